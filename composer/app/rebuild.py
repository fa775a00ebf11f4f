"""`composer verify --rebuild`: build an image again from its provenance, on this machine, and
compare the manifest the composer would push with the pushed one (composer.pipeline builds it,
as any build; this module reads the provenance, checks the inputs and compares).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from composer.assembly.assemble import Assembled
from composer.catalog.catalog import Catalog
from composer.config.options import BUILD, spec_from_record
from composer.config.rules import validate
from composer.engine import locks
from composer.engine.interface import Engine
from composer.pipeline import Run, build_image
from composer.publish.image_push import image_manifest, own_layers
from composer.publish.provenance import is_wheel, wheel_dependencies
from composer.publish.verify import VerificationFailed, config_of, provenance_of
from composer.registry.client import Registries
from composer.resolve.resolve import Resolved, resolve


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild from an image's provenance gave: the digest it would push, and how it compares."""

    ref: str
    digest: str  # what the registry holds
    rebuilt: str  # what the rebuild would push
    detail: str  # "same", or which layer (or input) differs
    provenance_verified: bool = False  # the provenance rebuilt from was signed by the key given

    @property
    def same(self) -> bool:
        return self.digest == self.rebuilt

    def to_dict(self) -> dict:
        return {"ref": self.ref, "digest": self.digest, "rebuilt": self.rebuilt, "same": self.same,
                "detail": self.detail, "provenance_verified": self.provenance_verified}


def rebuild(engine: Engine, registries: Registries, ref: str, catalog: Catalog, run: Run = Run(),
            public_key=None) -> Rebuilt:
    """Read `ref`'s provenance (with `public_key`, only one the key verifies), build the same
    composition on this machine (the same bases by digest, the same wheels by hash, the same
    epoch) and compare the manifest it would push with the pushed one: the same digest, or the
    first layer (or input) that differs."""
    digest, document, verified = provenance_of(registries, ref, public_key)
    definition = document["predicate"]["buildDefinition"]
    local = definition["externalParameters"].get("local_inputs") or []
    if local:
        raise VerificationFailed(f"{ref}: its composition named files of the machine that built it "
                                 f"({', '.join(local)}), which the provenance does not carry: it cannot be rebuilt here")
    internal = definition["internalParameters"]
    spec = spec_from_record(definition["externalParameters"]["composition"], source=f"{ref}: provenance")
    spec = spec.with_fields({"result.push": None, "result.smoke_test": False, "result.sbom": None,
                             "result.tag": internal["tag"], "result.sign_key": None})
    validate(spec, BUILD)
    previous = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(int(internal["epoch"]))
    try:
        with locks.temporary_folder("wheels") as wheels:
            resolved = resolve(engine, spec, catalog, wheels=Path(wheels), on_line=run.on_line)
            changed = _changed_inputs(resolved, definition["resolvedDependencies"])
            if changed:
                return Rebuilt(ref, digest, "", f"not the same inputs: {changed}", verified)
            with locks.temporary_folder("layers") as layers, \
                    locks.temporary_folder("blobs") as blobs:
                built = build_image(engine, resolved.plan, labels=dict(run.labels or {}), layers_dir=Path(layers),
                                    contents=resolved.contents,
                                    on_line=run.on_line, on_engine_line=run.on_build_line, tag=False)
                # The image went with the run's hold (unless another run holds or tagged it): its layers are here.
                compared = _compare(registries, ref, digest, built.assembled, internal["compression"], Path(blobs))
                return dataclasses.replace(compared, provenance_verified=verified)
    finally:
        if previous is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = previous


def _changed_inputs(resolved: Resolved, dependencies: list[dict]) -> str:
    """The first base image or wheel the rebuild resolved otherwise than the provenance says ('' :
    none): bases by manifest digest (or, for an image only an engine held, its config id), wheels
    compared both ways (one the provenance names that the rebuild did not fetch differs too)."""
    plan = resolved.plan
    recorded = {d.get("name"): d for d in dependencies}
    for image in (plan.full, plan.min, *(f.image for f in plan.foreign_backends)):
        entry = recorded.get(image.role)
        if entry is None:
            return f"base {image.role} {image.ref}: the provenance names no such base"
        was = (entry.get("digest") or {}).get("sha256")
        if was is not None:
            now_digest = (image.digest or "").partition(":")[2]
            if now_digest != was:
                return (f"base {image.role} {image.ref} is {now_digest[:12] or 'not from a registry'} here, "
                        f"the provenance names {was[:12]}")
        elif (entry.get("annotations") or {}).get("image_id") != image.id:
            return f"base {image.role} {image.ref} is image {str(image.id)[:19]} here, the provenance names another"
    recorded_wheels = {d["name"]: (d.get("digest") or {}).get("sha256") for d in dependencies if is_wheel(d)}
    fetched = {e["name"]: e["digest"]["sha256"]
               for e in wheel_dependencies([plan.packages.wheelhouse, *(env.wheelhouse for env in plan.model_envs)])}
    for name in sorted(set(recorded_wheels) | set(fetched)):
        if name not in fetched:
            return f"wheel {name}: the provenance names it, the rebuild did not fetch it"
        if name not in recorded_wheels:
            return f"wheel {name}: the rebuild fetched it, the provenance does not name it"
        if recorded_wheels[name] != fetched[name]:
            return f"wheel {name} hashes otherwise than the provenance says"
    return ""


def _compare(registries: Registries, ref: str, digest: str, assembled: Assembled, compression: str,
             folder: Path) -> Rebuilt:
    """The manifest the rebuild would push (the base's layers as the pushed manifest has them, the
    composition's compressed as the composer does), against the pushed one."""
    manifest, config = config_of(registries, ref, digest)
    pushed_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    mine = list(assembled.diff_ids)
    if pushed_ids != mine:
        index = next((i for i, (a, b) in enumerate(zip(pushed_ids, mine)) if a != b), min(len(pushed_ids), len(mine)))
        history = [h.get("created_by", "") for h in config.get("history") or [] if not h.get("empty_layer")]
        what = history[index] if index < len(history) else f"layer {index + 1}"
        return Rebuilt(ref, digest, assembled.image_id, f"layer {index + 1} differs: {what}")
    base = [(layer["digest"], int(layer["size"]), layer["mediaType"]) for layer in manifest["layers"]]
    base = base[:len(assembled.base_layers)]
    own = [(b.digest, b.size, b.media_type) for b in own_layers(assembled, compression, folder)]
    rebuilt = "sha256:" + hashlib.sha256(image_manifest(assembled.config, base + own)).hexdigest()
    detail = "same" if rebuilt == digest else "the same layers, compressed otherwise (another compressor build?)"
    return Rebuilt(ref, digest, rebuilt, detail)
