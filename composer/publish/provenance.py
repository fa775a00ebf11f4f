"""How an image was made, as SLSA provenance v1 in an in-toto statement: the pushed digest as its
subject, the whole composition (every option as the build resolved it, no secret and no path of this
machine) as the build's external parameters, the base images by digest and every wheel by its hash
as resolved dependencies, the builder's name and version. `composer verify --rebuild` reads it back
and builds the same image again.
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from composer import __version__
from composer.config.options import spec_record
from composer.config.types import CompositionSpec
from composer.resolve.plan_types import BaseImage, CompositionPlan

STATEMENT = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://triton-composer.invalid/build-types/compose/v1"  # documented in docs/reference/supply-chain.md
BUILDER = "https://triton-composer.invalid/builder/composer-build"


@dataclass(frozen=True)
class Made:
    """What a build knows of how it made the image, beyond its spec and plan."""

    started: str  # RFC 3339
    finished: str
    run: str  # the build's own id (its stages' label)
    compression: str
    compressor: str  # the compressor's library and level (a blob digest depends on it)


def now() -> str:
    return datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _image(image: BaseImage) -> dict:
    """A base image as a resolved dependency: by its registry digest, else by its image id."""
    digest = image.digest or image.id or ""
    entry = {"name": image.role, "uri": f"docker://{image.ref}", "digest": {"sha256": digest.partition(":")[2]}}
    annotations = {"kind": "registry-digest" if image.digest else "image-id"}
    if image.id:
        annotations["image_id"] = image.id
    entry["annotations"] = annotations
    return entry


def wheel_dependencies(folders: Iterable[Path | None]) -> list[dict]:
    """Every wheel the build installed from, by its hash (the wheelhouses of packages and environments)."""
    seen: dict[str, dict] = {}
    for folder in folders:
        if folder is None or not Path(folder).is_dir():
            continue
        for wheel in sorted(Path(folder).glob("*.whl")):
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            seen[wheel.name] = {"name": wheel.name, "uri": f"pypi:{wheel.name}", "digest": {"sha256": digest}}
    return [seen[name] for name in sorted(seen)]


def statement(spec: CompositionSpec, plan: CompositionPlan, subject: str, digest: str, made: Made) -> bytes:
    """The in-toto statement (SLSA provenance v1) of the image pushed as `subject@digest`."""
    from composer.publish.sign import canonical

    images = [plan.full, plan.min, *(f.image for f in plan.foreign_backends)]
    wheels = wheel_dependencies([plan.packages.wheelhouse, *(env.wheelhouse for env in plan.model_envs)])
    document = {
        "_type": STATEMENT,
        "subject": [{"name": subject, "digest": {"sha256": digest.partition(":")[2]}}],
        "predicateType": SLSA_PROVENANCE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"composition": spec_record(spec, portable_only=True),
                                       "local_inputs": _local_inputs(spec)},
                "internalParameters": {"epoch": plan.epoch, "created": plan.created, "tag": plan.tag,
                                       "compression": made.compression, "compressor": made.compressor},
                "resolvedDependencies": [_image(image) for image in images] + wheels,
            },
            "runDetails": {
                "builder": {"id": BUILDER, "version": {"triton-composer": __version__}},
                "metadata": {"invocationId": made.run, "startedOn": made.started, "finishedOn": made.finished},
            },
        },
    }
    return canonical(document)


def _local_inputs(spec: CompositionSpec) -> list[str]:
    """The options that name files of the build's machine (not carried: a rebuild needs them given)."""
    names = []
    s = spec.selection
    if s.custom_backends:
        names.append("custom_backends")
    if s.bake_models is not None:
        names.append("bake_models")
    if s.model_envs:
        names.append("model_envs")
    return names
