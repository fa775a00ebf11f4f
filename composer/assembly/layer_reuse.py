"""Layers the engine holds already are not written again: a partial rebuild.

A part's layer is a function of what it copies and where from (a stage's layers, a base image's
id), the owner and the epoch (composer.assembly.canonical): its key. The layer that key gave once
is recorded (its diff id and sizes); when the engine holds an image whose layers start with the
same base and the same layers up to this one, the engine holds that whole chain, and the archive
the composer loads may leave the layer's bytes out (the engine loads a layer it lacks only:
interface.Engine.loads_partial_archives). So a new pin rewrites the packages layer and those
after it, not the server core or the backends. Parts read from the build context are always
written (their files are on this machine, cheap to read, and not named by any image).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from composer.assembly import records
from composer.assembly.canonical import LayerFile
from composer.core.errors import ComposerError
from composer.engine import locks
from composer.engine.interface import Engine
from composer.resolve.plan_types import BACKENDS_LABEL, FROM_CONTEXT, LayerPart

FORMAT = 2  # how the composer writes a layer: a new rule (2: own_folders) makes new keys and records


def part_key(engine: Engine, part: LayerPart, image: str | None, epoch: int) -> str | None:
    """What `part`'s layer is made of; None for a part of the build context (always written)."""
    if part.source == FROM_CONTEXT or image is None:
        return None
    info = engine.image(image)
    if info is None or not info.layers:
        return None
    what = {"format": FORMAT, "kind": part.kind, "name": part.name, "owner": part.owner, "epoch": epoch,
            "copies": [[c.source, c.dest, c.contents] for c in part.copies], "from": list(info.layers)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def recorded(key: str | None) -> dict | None:
    record = None if key is None else locks.read_record("layers", key)
    return record if record and record.get("format") == FORMAT else None


def save(key: str | None, layer: LayerFile) -> None:
    if key is not None:
        locks.write_record("layers", key, {"format": FORMAT, "diff_id": layer.diff_id, "size": layer.size,
                                           "content_bytes": layer.content_bytes})


@dataclass
class Chains:
    """The layer chains the engine's named composed images hold (each image's diff ids, bottom
    first), and an image holding each. Only a named one (a user's tag, a run's hold): a run's hold
    on an unnamed image (an engine build's last step, build cache another run of the same
    selection reads unheld) would remove that image when dropped, from under the other run."""

    held: dict[tuple[str, ...], str]

    @classmethod
    def on(cls, engine: Engine) -> "Chains":
        held: dict[tuple[str, ...], str] = {}
        if not engine.loads_partial_archives:
            return cls(held)  # every layer goes into the archive anyway
        for image in engine.images_labelled(BACKENDS_LABEL):
            info = engine.image(image)
            if info is not None and info.tags:
                held.update((tuple(info.layers[:n]), info.id) for n in range(1, len(info.layers) + 1))
        return cls(held)

    def holds(self, chain: tuple[str, ...]) -> bool:
        return chain in self.held

    def hold(self, engine: Engine, chain: tuple[str, ...], tag: str | None) -> bool:
        """Tag an image that holds `chain` (with the run's layer hold) so that no other run's cleanup
        takes the layers before the composed image, loaded on them, holds them itself. False when
        that image went meanwhile: the layers must then be written after all."""
        image = self.held.get(chain)
        if image is None or tag is None:
            return False
        try:
            engine.tag(image, tag)
        except ComposerError:
            return False
        info = engine.image(tag)
        if info is None or tuple(info.layers[:len(chain)]) != chain:
            records.drop_hold(engine, tag)
            return False
        return True

