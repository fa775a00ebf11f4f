"""How an image was made, as SLSA provenance v1 in an in-toto statement: the pushed digest as its
subject; the composition as the user gave it (no secret, no path of this machine) as the external
parameters, what the composer resolved (release, server, bases, tag, epoch, compression) as the
internal ones; the base images by manifest digest and every wheel as a purl with its hash as
resolved dependencies; the composer's version and source commit, the run's own id, the SBOM as a
byproduct. The build type's parameters are described in docs/reference/build-type.md.
`composer verify --rebuild` reads it back and builds the same image again.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from composer import PROJECT_URL, __version__
from composer.config.options import spec_record
from composer.config.types import CompositionSpec
from composer.resolve.plan_types import BaseImage, CompositionPlan

STATEMENT = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = f"{PROJECT_URL}/blob/main/docs/reference/build-type.md#compose-v1"  # what its parameters mean
BUILDER = f"{PROJECT_URL}/composer-build@v1"  # the composer's own build, run where it was invoked
SBOM_MEDIA_TYPE = "application/vnd.cyclonedx+json"


@dataclass(frozen=True)
class Made:
    """What a build knows of how it made the image, beyond its spec and plan."""

    started: str  # RFC 3339
    finished: str
    run: str  # this invocation's own id: unique per run, the same image or not
    compression: str
    compressor: str  # the compressor's library and level (a blob digest depends on it)
    image_id: str = ""  # the image's config id (the same for every run of the same inputs)
    sbom: str | None = None  # where the SBOM was pushed beside the image (a reference), if it was


def now() -> str:
    return datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _image(image: BaseImage) -> dict:
    """A base image as a resolved dependency: by its manifest digest where a registry had it; an
    image only an engine held has no manifest digest, so its config id is an annotation only."""
    entry: dict = {"name": image.role, "uri": f"docker://{image.ref}"}
    if image.digest:
        entry["digest"] = {"sha256": image.digest.partition(":")[2]}
    if image.id:
        entry["annotations"] = {"image_id": image.id}
    return entry


_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-")


def wheel_purl(filename: str) -> str:
    """pkg:pypi/NAME@VERSION of a wheel file (the name normalized as PEP 503 says)."""
    found = _WHEEL.match(filename)
    if found is None:
        return f"pkg:pypi/{filename}"
    name = re.sub(r"[-_.]+", "-", found.group("name")).lower()
    return f"pkg:pypi/{name}@{found.group('version')}"


def wheel_dependencies(folders: Iterable[Path | None]) -> list[dict]:
    """Every wheel the build installed from, as a purl with its hash (the wheelhouses of packages
    and environments)."""
    seen: dict[str, dict] = {}
    for folder in folders:
        if folder is None or not Path(folder).is_dir():
            continue
        for wheel in sorted(Path(folder).glob("*.whl")):
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            seen[wheel.name] = {"name": wheel.name, "uri": wheel_purl(wheel.name), "digest": {"sha256": digest}}
    return [seen[name] for name in sorted(seen)]


def is_wheel(dependency: dict) -> bool:
    return str(dependency.get("uri", "")).startswith("pkg:pypi/")


def source_commit() -> str | None:
    """The git commit the running composer comes from (with '-dirty' for changed files), or None
    where it was installed from a wheel and carries no repository."""
    here = Path(__file__).resolve().parents[2]
    if not (here / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no",
                                "--", "composer", "dockerfiles", "backend_sets"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "")


def _given(spec: CompositionSpec) -> dict:
    """The composition as the user gave it: every portable option that differs from its default."""
    defaults = spec_record(CompositionSpec(), portable_only=True)
    return {key: value for key, value in spec_record(spec, portable_only=True).items()
            if value is not None and value != defaults.get(key)}


def statement(spec: CompositionSpec, plan: CompositionPlan, subject: str, digest: str, made: Made) -> bytes:
    """The in-toto statement (SLSA provenance v1) of the image pushed as `subject@digest`."""
    from composer.publish.sign import canonical

    images = [plan.full, plan.min, *(f.image for f in plan.foreign_backends)]
    wheels = wheel_dependencies([plan.packages.wheelhouse, *(env.wheelhouse for env in plan.model_envs)])
    version = {"triton-composer": __version__}
    commit = source_commit()
    if commit:
        version["source"] = commit
    run_details: dict = {
        "builder": {"id": BUILDER, "version": version},
        "metadata": {"invocationId": made.run, "startedOn": made.started, "finishedOn": made.finished},
    }
    if made.sbom:
        run_details["byproducts"] = [{"name": "sbom", "uri": made.sbom, "mediaType": SBOM_MEDIA_TYPE}]
    document = {
        "_type": STATEMENT,
        "subject": [{"name": subject, "digest": {"sha256": digest.partition(":")[2]}}],
        "predicateType": SLSA_PROVENANCE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"composition": _given(spec), "local_inputs": _local_inputs(spec)},
                "internalParameters": {"epoch": plan.epoch, "created": plan.created, "tag": plan.tag,
                                       "release": plan.release.name, "server_version": plan.server_version,
                                       "backends": list(plan.all_backends), "image_id": made.image_id,
                                       "compression": made.compression, "compressor": made.compressor},
                "resolvedDependencies": [_image(image) for image in images] + wheels,
            },
            "runDetails": run_details,
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
