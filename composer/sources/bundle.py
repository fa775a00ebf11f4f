"""Air-gapped bundles: one archive with everything a build needs, for a machine with no registry.

`composer bundle` writes the base images (docker save), what was learnt by looking inside them,
the selection, custom backends, baked models and the wheelhouse. `composer build --bundle` loads
the images, plans from the recorded inspection and renders the build context there, once: no
pull, no probe of a registry, no network in the build. (To read the Dockerfile before carrying
the bundle over, `composer render` gives the same one.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from composer import __version__
from composer.engine.interface import Engine
from composer.core.errors import ComposerError, Invalid, UsageError
from composer.core.files import check_output_file, fresh_folder, path_problem, printable, read_text
from composer.resolve.resolve import Inspection, Resolved
from composer.config.requirements import public_requirement
from composer.config.options import spec_from_record, spec_record
from composer.config.types import CompositionSpec
from composer.core.progress import LineSink, quiet

FORMAT = 1
MANIFEST = "bundle.json"
IMAGES = "images.tar"



def is_bundle(path: Path) -> bool:
    """A bundle archive this composer wrote: its first member is the manifest (so a rerun may
    replace it, and nothing else)."""
    try:
        with tarfile.open(path) as tar:
            first = tar.next()
        return first is not None and first.name == MANIFEST
    except (tarfile.TarError, OSError, EOFError):
        return False


def check_bundle_output(out: Path) -> Path:
    """bundle -o: checked before any work (not a link, not someone else's file, writable)."""
    try:
        return check_output_file(out, "-o", ours=is_bundle)
    except Invalid as problem:
        raise UsageError(str(problem)) from None


def write_bundle(engine: Engine, resolved: Resolved, out: Path, *, on_line: LineSink = quiet) -> Path:
    """Write the bundle archive `out` of a composition resolved against this side's images;
    packages travel as the plan's wheelhouse (fetched on this side).

    Everything is gathered in a fresh folder beside `out` and archived under a fresh name, then
    renamed into place: no path of the user's is used for staging, and a failure leaves `out` as it was.
    """
    out = check_bundle_output(out)
    spec, plan, inspection = resolved.spec, resolved.plan, resolved.inspection
    if inspection is None:
        raise UsageError("a bundle needs the base images themselves: resolve against an engine")
    staging = fresh_folder(out, "staging")
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
        manifest = {
            "format": FORMAT,
            "composer_version": __version__,
            # No index URL or CA: a bundle never holds a secret, and installs from its wheelhouse.
            # Requirement URLs without their credentials: the wheels travel in the bundle.
            "spec": spec_record(spec.with_fields(
                {"packages.specs": tuple(public_requirement(line) for line in spec.packages.specs)}
            ), portable_only=True),
            "custom_backends": [name for name, _ in spec.selection.custom_backends],
            "wheelhouse": plan.packages.wheelhouse is not None,
            "bake_models": spec.selection.bake_models is not None,
            "inspection": inspection.to_dict(),
            "tag": plan.tag,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        on_line(f"writing {out}")
        archive = staging / "bundle.tar"
        with tarfile.open(archive, "w") as tar:
            for item in sorted(staging.iterdir()):  # the manifest first (is_bundle reads it)
                if item != archive:
                    tar.add(item, arcname=item.name)
        check_bundle_output(out)  # still not a link or someone else's file
        os.replace(archive, out)
    except OSError as exc:
        raise UsageError(f"cannot write the bundle {out}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


@dataclass(frozen=True)
class ReadBundle:
    """A bundle unpacked and checked, before any engine is asked."""

    archive: Path
    workdir: Path
    manifest: dict
    inspection: Inspection

    def spec(self) -> CompositionSpec:
        return _spec_from(self.manifest, self.workdir, self.archive)


def read_bundle(archive: Path, workdir: Path) -> ReadBundle:
    """Unpack `archive` into `workdir` and check it: only plain files and folders inside the
    archive's own tree, a manifest of the shape this composer writes."""
    shown = f"--bundle {printable(str(archive))}"
    problem = path_problem(archive, "file")
    if problem:
        raise UsageError(f"{shown}: {problem}")
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            for member in members:
                name = member.name
                if name.startswith("/") or ".." in Path(name).parts or not (member.isfile() or member.isdir()
                                                                           or (member.issym() and _inside_link(member))):
                    raise UsageError(f"{shown}: holds {printable(name)[:120]}, which no bundle holds")
            tar.extractall(workdir, members=members, filter="data") if hasattr(tarfile, "data_filter") \
                else tar.extractall(workdir, members=members)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise UsageError(f"{shown}: not a readable bundle ({' '.join(str(exc).split())[:160]})") from None
    try:
        manifest = json.loads(read_text(workdir / MANIFEST, "bundle manifest", 64 << 20))
    except Invalid:
        raise UsageError(f"{shown}: no readable {MANIFEST} in it") from None
    except ValueError:
        raise UsageError(f"{shown}: its {MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        shape = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise UsageError(f"{shown}: format {printable(str(shape))[:40]} is not one this composer reads")
    try:
        inspection = Inspection.from_dict(manifest["inspection"])
        read = ReadBundle(archive, workdir, manifest, inspection)
        read.spec()
    except UsageError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, ComposerError) as exc:
        raise UsageError(f"{shown}: its {MANIFEST} is not one this composer wrote ({type(exc).__name__})") from None
    if not (workdir / IMAGES).is_file():
        raise UsageError(f"{shown}: holds no {IMAGES}")
    return read


def _inside_link(member: tarfile.TarInfo) -> bool:
    """A link in a custom backend that stays inside the archive's tree."""
    target = os.path.normpath(os.path.join(os.path.dirname(member.name), member.linkname))
    return not member.linkname.startswith("/") and not target.startswith("..")


# What a build from a bundle may still choose: where the image goes and how it is tested.
OVERRIDES = ("result.tag", "result.push", "result.smoke_test", "result.model_repository", "result.labels",
             "result.smoke_cases", "result.samples", "result.sbom")


def check_overrides(given: dict, *, set_files: list, locked: bool) -> None:
    """build --bundle: the bundle carries its own selection; only the result's options may change."""
    if set_files or locked or set(given) - set(OVERRIDES):
        raise UsageError("--bundle carries its own selection: give only --tag, --push, --label, "
                         "--no-smoke-test, --model-repository, --smoke-cases, --no-samples, --sbom, --junit or --json "
                         "with it")


@contextlib.contextmanager
def unpacked(archive: Path) -> Iterator[ReadBundle]:
    """The bundle read and checked in a fresh folder, removed when the build is done."""
    workdir = Path(tempfile.mkdtemp(prefix="triton-composer-bundle-"))
    try:
        yield read_bundle(archive, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def open_bundle(engine: Engine, read: ReadBundle, *, on_line: LineSink = quiet) -> Inspection:
    """Load a read bundle's images into the engine, and return what was learnt of them."""
    inspection = read.inspection
    wanted = [inspection.full, inspection.min] + [info for _, info, _ in inspection.backend_images]
    for info in wanted:  # never move a name that already means something else here
        present = engine.image(info.ref)
        if present is not None and present.id != info.id:
            raise ComposerError(
                f"{info.ref} names another image on this engine than the bundle's ({info.id[:19]}): "
                "remove or rename it first"
            )
    if any(engine.image(info.id) is None for info in wanted):
        on_line(f"loading base images from {read.archive}")
        engine.load(read.workdir / IMAGES)
    for info in wanted:
        if engine.image(info.ref) is None:
            engine.tag(info.id, info.ref)
    return inspection


def _spec_from(manifest: dict, root: Path, archive: Path) -> CompositionSpec:
    """The spec the bundle was made for, read and checked as a set file is (each value by its
    option's declaration), with its folders where the bundle was unpacked."""
    try:
        spec = spec_from_record(manifest["spec"], base=root, source=f"--bundle {archive}: {MANIFEST}",
                                name=archive.name)
        return spec.with_fields({
            "selection.custom_backends": tuple(
                (name, root / "custom-backends" / name) for name in manifest["custom_backends"]),
            "packages.wheelhouse": root / "wheelhouse" if manifest["wheelhouse"] else None,
            "selection.bake_models": root / "models" if manifest.get("bake_models") else None,
        })
    except UsageError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, ComposerError) as exc:
        raise UsageError(f"--bundle {archive}: its {MANIFEST} is not one this composer wrote ({exc})") from None
