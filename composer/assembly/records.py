"""The images the composer made on an engine, recorded by their composition key (render.composition_key:
what the image is made of). A build whose key is recorded, and whose image the engine still holds,
takes that image as it is: the same inputs give the same image id (composer.assembly.assemble), so
nothing is built or written again. Records live with the engine's other state on this machine and
name the engine; an image the engine lost is simply built again.

A run holds the image it made or found with a tag of its own (HOLD_REPOSITORY:RUN) from the moment
it is loaded (the archive names it) or found, until the user's tag is on it or the run is done:
another run's discard (a failed smoke test) or cleanup removes a tag of its own, never an image
another run holds, whatever its id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from composer.core.errors import ComposerError
from composer.engine import locks
from composer.engine.interface import Engine

HOLD_REPOSITORY = "triton-composer/hold"
CACHE_LOCK = "build-cache"  # held (shared) by each build on an engine; `cache clear` removes stages only alone
FORMAT = 1


FILES = "files"  # the hold on the image of the base and the first parts (composer.assembly.assemble.assemble_files)


def hold_tag(run: str, what: str = "") -> str:
    """The run's hold on its image; with `what` ("layers"), a second hold of the same run on another
    image whose layers it is about to use (composer.assembly.layer_reuse)."""
    return f"{HOLD_REPOSITORY}:{run}-{what}" if what else f"{HOLD_REPOSITORY}:{run}"


def run_of_hold(tag: str) -> str:
    return tag.rpartition(":")[2].partition("-")[0]


def is_hold(tag: str) -> bool:
    return tag.removeprefix("localhost/").removeprefix("docker.io/").startswith(HOLD_REPOSITORY + ":")


def release(engine: Engine, run: str) -> None:
    """Take the run's hold off its image: the image goes with it when no other tag names it (and no
    container uses it); another run's hold or the user's tag keeps it."""
    for tag in (hold_tag(run), hold_tag(run, "layers"), hold_tag(run, FILES)):
        drop_hold(engine, tag)


def drop_hold(engine: Engine, tag: str) -> None:
    """Remove one hold tag (never the image by force): the image stays while anything else names it."""
    try:
        engine.remove_image(tag, prune=False)
    except ComposerError:
        pass  # in use by a container: `composer cache clear` sweeps it


@dataclass(frozen=True)
class Recorded:
    """An image made before from the same composition key."""

    image_id: str
    sbom: str
    pruned_base: dict | None  # PrunedBase.to_dict() of the base it was built on
    made_at: float


def save(engine: Engine, key: str, image_id: str, sbom: str, pruned_base: dict | None) -> None:
    locks.write_record("compositions", f"{engine.identity()}\n{key}",
                       {"format": FORMAT, "engine": engine.identity(), "key": key, "image": image_id, "sbom": sbom,
                        "pruned_base": pruned_base, "made_at": time.time()})


def find(engine: Engine, key: str, run: str, accept=lambda image_id: True) -> Recorded | None:
    """The recorded image of `key` (one `accept` takes), now held by `run` (hold_tag); None when
    there is none or the engine no longer has it (it is then built again)."""
    record = locks.read_record("compositions", f"{engine.identity()}\n{key}") or {}
    try:
        if record.get("format") != FORMAT or record["engine"] != engine.identity() or record["key"] != key:
            return None
        found = Recorded(str(record["image"]), str(record["sbom"]), record.get("pruned_base"), float(record["made_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not accept(found.image_id) or engine.image(found.image_id) is None:
        return None
    try:
        engine.tag(found.image_id, hold_tag(run))
    except ComposerError:  # removed since it was looked at: build it
        return None
    return found
