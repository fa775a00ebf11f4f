"""Air-gapped bundles: one archive with everything a build needs, for a machine with no registry.

`composer bundle` writes the base images (docker save), what was learnt by looking inside them,
the selection, custom backends, the wheelhouse and the rendered context. `composer build
--bundle` loads the images and plans from the recorded inspection: no pull, no probe of a
registry, no network in the build.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from composer import __version__
from composer.engine import Engine
from composer.errors import ComposerError, UsageError
from composer.pipeline import Inspection
from composer.packages import public_requirement
from composer.plan import CompositionPlan
from composer.render import write_context
from composer.spec import CompositionSpec
from composer.progress import LineSink, quiet

FORMAT = 1
MANIFEST = "bundle.json"
IMAGES = "images.tar"



@dataclass(frozen=True)
class OpenedBundle:
    spec: CompositionSpec
    inspection: Inspection


def write_bundle(
    engine: Engine,
    plan: CompositionPlan,
    spec: CompositionSpec,
    inspection: Inspection,
    out: Path,
    *,
    on_line: LineSink = quiet,
) -> Path:
    """Write the bundle archive `out`; packages travel as the plan's wheelhouse (fetched on this side)."""
    staging = out.with_name(out.name + ".staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        refs = [inspection.full.ref, inspection.min.ref] + [info.ref for _, info, _ in inspection.backend_images]
        on_line(f"saving {len(refs)} base image(s): {', '.join(refs)}")
        engine.save(refs, staging / IMAGES)
        for name, source in spec.selection.custom_backends:
            shutil.copytree(source, staging / "custom-backends" / name, symlinks=True)
        if plan.packages.wheelhouse is not None:
            shutil.copytree(plan.packages.wheelhouse, staging / "wheelhouse")
        if spec.selection.bake_models is not None:
            shutil.copytree(spec.selection.bake_models, staging / "models")
        write_context(plan, staging / "context")  # for reading; the build renders it again
        manifest = {
            "format": FORMAT,
            "composer_version": __version__,
            # No index URL or CA: a bundle never holds a secret, and installs from its wheelhouse.
            # Requirement URLs without their credentials: the wheels travel in the bundle.
            "spec": spec.with_fields(
                {"packages.specs": tuple(public_requirement(line) for line in spec.packages.specs)}
            ).to_dict(portable_only=True),
            "custom_backends": [name for name, _ in spec.selection.custom_backends],
            "wheelhouse": plan.packages.wheelhouse is not None,
            "bake_models": spec.selection.bake_models is not None,
            "inspection": inspection.to_dict(),
            "tag": plan.tag,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        on_line(f"writing {out}")
        with tarfile.open(out, "w") as tar:
            for item in sorted(staging.iterdir()):
                tar.add(item, arcname=item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def open_bundle(engine: Engine, archive: Path, workdir: Path, *, on_line: LineSink = quiet) -> OpenedBundle:
    """Unpack `archive` into `workdir`, load its images into the engine, and return what to build."""
    if not archive.is_file():
        raise UsageError(f"--bundle {archive}: no such file")
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(workdir, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(workdir)
    except (tarfile.TarError, OSError) as exc:
        raise UsageError(f"--bundle {archive}: not a readable bundle ({exc})") from exc
    try:
        manifest = json.loads((workdir / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--bundle {archive}: no {MANIFEST} in it") from exc
    if manifest.get("format") != FORMAT:
        raise UsageError(f"--bundle {archive}: format {manifest.get('format')} is not one this composer reads")
    inspection = Inspection.from_dict(manifest["inspection"])
    wanted = [inspection.full, inspection.min] + [info for _, info, _ in inspection.backend_images]
    for info in wanted:  # never move a name that already means something else here
        present = engine.image(info.ref)
        if present is not None and present.id != info.id:
            raise ComposerError(
                f"{info.ref} names another image on this engine than the bundle's ({info.id[:19]}): "
                "remove or rename it first"
            )
    if any(engine.image(info.id) is None for info in wanted):
        on_line(f"loading base images from {archive}")
        engine.load(workdir / IMAGES)
    for info in wanted:
        if engine.image(info.ref) is None:
            engine.tag(info.id, info.ref)
    return OpenedBundle(_spec_from(manifest, workdir, archive), inspection)


def _spec_from(manifest: dict, root: Path, archive: Path) -> CompositionSpec:
    """The spec the bundle was made for, with its folders where the bundle was unpacked."""
    try:
        spec = CompositionSpec.from_dict(manifest["spec"], name=archive.name)
        return spec.with_fields({
            "selection.custom_backends": tuple(
                (name, root / "custom-backends" / name) for name in manifest["custom_backends"]),
            "packages.wheelhouse": root / "wheelhouse" if manifest["wheelhouse"] else None,
            "selection.bake_models": root / "models" if manifest.get("bake_models") else None,
        })
    except (KeyError, TypeError, ValueError, ComposerError) as exc:
        raise UsageError(f"--bundle {archive}: its {MANIFEST} is not one this composer wrote ({exc})") from None
