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
from composer.plan import BuildOptions, CompositionPlan, PackageOptions
from composer.render import write_context
from composer.progress import LineSink, quiet

FORMAT = 1
MANIFEST = "bundle.json"
IMAGES = "images.tar"



@dataclass(frozen=True)
class OpenedBundle:
    options: BuildOptions
    inspection: Inspection
    smoke_test: bool


def write_bundle(
    engine: Engine,
    plan: CompositionPlan,
    options: BuildOptions,
    inspection: Inspection,
    out: Path,
    *,
    smoke_test: bool = True,
    on_line: LineSink = quiet,
) -> Path:
    """Write the bundle archive `out`; package sources must be a wheelhouse (no index across a gap)."""
    if options.packages and options.packages.wheelhouse is None:
        raise UsageError("a bundle carries packages only from a wheelhouse: make one with composer wheels, "
                         "then pass --wheelhouse")
    staging = out.with_name(out.name + ".staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        refs = [inspection.full.ref, inspection.min.ref] + [info.ref for _, info, _ in inspection.backend_images]
        on_line(f"saving {len(refs)} base image(s): {', '.join(refs)}")
        engine.save(refs, staging / IMAGES)
        for name, source in options.custom_backends:
            shutil.copytree(source, staging / "custom-backends" / name, symlinks=True)
        if options.packages.wheelhouse is not None:
            shutil.copytree(options.packages.wheelhouse, staging / "wheelhouse")
        write_context(plan, staging / "context")  # for reading; the build renders it again
        manifest = {
            "format": FORMAT,
            "composer_version": __version__,
            "options": _options_dict(options),
            "inspection": inspection.to_dict(),
            "smoke_test": smoke_test,
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
    return OpenedBundle(_options_from(manifest["options"], workdir), inspection, bool(manifest.get("smoke_test", True)))


def _options_dict(options: BuildOptions) -> dict:
    packages = options.packages
    return {
        "backends": list(options.backends),
        "repoagents": list(options.repoagents),
        "caches": list(options.caches),
        "version": options.version,
        "registry": options.registry,
        "full_image": options.full_image,
        "min_image": options.min_image,
        "custom_backends": [name for name, _ in options.custom_backends],
        "backend_images": [list(pair) for pair in options.backend_images],
        "with_headers": options.with_headers,
        "tag": options.tag,
        # No index URL or CA: a bundle never holds a secret, and installs from its wheelhouse.
        "packages": {"specs": list(packages.specs), "wheelhouse": packages.wheelhouse is not None},
    }


def _options_from(d: dict, root: Path) -> BuildOptions:
    packages = d["packages"]
    return BuildOptions(
        backends=tuple(d["backends"]),
        repoagents=tuple(d["repoagents"]),
        caches=tuple(d["caches"]),
        version=d["version"],
        registry=d["registry"],
        full_image=d["full_image"],
        min_image=d["min_image"],
        custom_backends=tuple((name, root / "custom-backends" / name) for name in d["custom_backends"]),
        backend_images=tuple(tuple(pair) for pair in d["backend_images"]),
        with_headers=d["with_headers"],
        tag=d["tag"],
        packages=PackageOptions(
            specs=tuple(packages["specs"]),
            wheelhouse=root / "wheelhouse" if packages["wheelhouse"] else None,
        ),
    )
