"""Rendering: a CompositionPlan becomes a Dockerfile and its build context.

The Dockerfile comes only from the Jinja2 templates in dockerfiles/; this module gathers the
files the templates refer to. The same plan always renders byte-identical files.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2

from composer.errors import UsageError
from composer.packages import installable_requirement
from composer.plan import MODELS_ROOT, ROOT, CompositionPlan

# Scripts that run inside the build (collect and packages stages), copied into every context.
BUILD_SCRIPTS = ("collect.py", "probe.py", "record_packages.py")


@dataclass(frozen=True)
class BuildContext:
    directory: Path
    dockerfile: Path


def templates() -> jinja2.Environment:
    """The template environment; strict, so a missing value fails rendering instead of the build."""
    folder = resources.files("composer.dockerfiles")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def collect_paths(plan: CompositionPlan) -> list[str]:
    """What collect.py gathers the run-time needs of (paths under the Triton root)."""
    paths = list(plan.core) + plan.component_paths()
    paths += [f"backends/{c.name}" for c in plan.custom_backends]
    paths += [f"backends/{f.name}" for f in plan.foreign_backends]
    return paths


def render_dockerfile(plan: CompositionPlan) -> str:
    text = templates().get_template("compose.Dockerfile.j2").render(
        plan=plan, root=ROOT, collect_paths=collect_paths(plan), models_root=MODELS_ROOT,
    )
    return text.rstrip("\n") + "\n"


def composition_record(plan: CompositionPlan) -> str:
    return json.dumps(plan.record(), indent=2, sort_keys=True) + "\n"


MARKER = ".triton-composer-context"  # left in every folder render writes, so it knows its own


def check_output(directory: Path) -> Path:
    """A folder render may write into: new, empty, or one it rendered before (its marker is
    there). Anything else is a one-line error: nothing of the user's is deleted or overwritten."""
    directory = Path(directory).absolute()
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"-o {directory}: exists and is not a folder; give a new or empty folder")
    if directory.is_dir() and any(directory.iterdir()) and not (directory / MARKER).is_file():
        raise UsageError(f"-o {directory}: the folder holds files the composer did not write; "
                         "give a new or empty folder (or one composer render wrote before)")
    parent = directory if directory.exists() else next(p for p in directory.parents if p.exists())
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"-o {directory}: {parent} is not writable")
    return directory


def write_context(plan: CompositionPlan, directory: Path) -> BuildContext:
    """Write the Dockerfile and everything it copies into `directory` (see check_output)."""
    directory = check_output(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MARKER).write_text("written by triton-composer render; it rewrites only its own files here\n")
        return _write(plan, directory)
    except OSError as exc:
        raise UsageError(f"cannot write the build context in {directory}: {exc.strerror or exc}") from None


def _write(plan: CompositionPlan, directory: Path) -> BuildContext:
    dockerfile = directory / "Dockerfile"
    dockerfile.write_text(render_dockerfile(plan))
    (directory / "composition.json").write_text(composition_record(plan))
    package = resources.files("composer.in_image")
    for script in BUILD_SCRIPTS:
        (directory / script).write_bytes(package.joinpath(script).read_bytes())
    _write_packages(plan, directory / "packages")
    customs = directory / "custom-backends"
    if customs.exists():
        shutil.rmtree(customs)
    for custom in plan.custom_backends:
        shutil.copytree(custom.source, customs / custom.name, symlinks=True)
    models = directory / "models"
    if models.exists():
        shutil.rmtree(models)
    if plan.baked_models is not None:  # links are followed: the image holds the files themselves
        shutil.copytree(plan.baked_models, models, ignore=shutil.ignore_patterns("__pycache__"))
    return BuildContext(directory=directory, dockerfile=dockerfile)


def _write_packages(plan: CompositionPlan, folder: Path) -> None:
    """requirements, the release's constraints and the wheelhouse for the packages stage."""
    if folder.exists():
        shutil.rmtree(folder)
    packages = plan.packages
    if not packages:
        return
    folder.mkdir(parents=True)
    lines = [installable_requirement(spec) for spec in packages.specs]
    (folder / "requirements.txt").write_text("".join(f"{line}\n" for line in lines))
    (folder / "constraints.txt").write_text("".join(f"{pin}\n" for pin in plan.constraints))
    wheels = folder / "wheelhouse"
    wheels.mkdir()
    for wheel in sorted(packages.wheelhouse.glob("*.whl")):
        shutil.copy2(wheel, wheels / wheel.name)
