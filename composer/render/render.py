"""Rendering: a CompositionPlan becomes a Dockerfile and its build context.

The Dockerfile comes only from the Jinja2 templates in dockerfiles/; this module gathers the
files the templates refer to. The same plan always renders byte-identical files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Mapping, Union

import jinja2

from composer.core.errors import Invalid, UsageError
from composer.core.files import check_output_file, digest, make_folders, path_problem, printable, read_text, write_file
from composer.config.model_envs import CONFIG, pointed_config
from composer.config.requirements import installable_requirement
from composer.resolve.plan_types import CACHE_LABEL, MODELS_ROOT, ROOT, STAGE_LABEL, SYSTEM_TREE, CompositionPlan

# Scripts that run inside the build (collect and packages stages), copied into every context.
BUILD_SCRIPTS = ("collect.py", "probe.py", "elfdeps.py", "record_packages.py", "system.sh")
PRUNE_SCRIPTS = ("prune.py", "pydists.py", "prove.sh")  # and these, for a pruned base
LAYER_SCRIPTS = ("layers.py", "keep_layer.sh")  # and these in the pruned base's own context
# A requirement line's distribution name, with the extras it asks for (prune.py --python-dist).
REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?")
PRUNED_BASE = "pruned-base"  # the pruned base's own build context, a folder of the composition's
# A build's second Dockerfile: the same stages, composed-files the image the composer loaded
# (render_dockerfile(on_files=True)); a render writes none.
ON_FILES_DOCKERFILE = "on-files.Dockerfile"


@dataclass(frozen=True)
class BuildContext:
    directory: Path
    dockerfile: Path
    pruned_base: Path | None = None  # the pruned base's own context (built first), when the plan has one


def templates() -> jinja2.Environment:
    """The template environment; strict, so a missing value fails rendering instead of the build."""
    folder = resources.files("composer.dockerfiles")
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    environment.filters["quoted"] = dockerfile_quoted
    environment.globals["stage_label_key"] = STAGE_LABEL
    environment.globals["cache_label_key"] = CACHE_LABEL
    environment.globals["composer_run"] = "${COMPOSER_RUN}"  # a render; the pruned base's build writes its run
    environment.globals["composition_key"] = "${COMPOSER_KEY}"  # a render; a build writes the key (render_dockerfile)
    return environment


def stage_names() -> frozenset[str]:
    """The names the composer's Dockerfiles give their stages ("FROM ... AS collect"): how its steps
    are told from others' in a builder's cache (composer cache --builder). A name made in the
    template ("AS layer-{{ slot.name }}") is given by its fixed start and a * ("layer-*")."""
    folder = resources.files("composer.dockerfiles")
    names = set()
    for template in folder.iterdir():
        if template.name.endswith((".j2", "Dockerfile")):
            for name, made in re.findall(r"^FROM\s+\S+\s+AS\s+([A-Za-z0-9_.-]+)(\{\{[^}]*\}\})?\s*$",
                                         template.read_text(), re.MULTILINE):
                names.add(name + ("*" if made else ""))
    return frozenset(names)


def dockerfile_quoted(value: str) -> str:
    """A value as a Dockerfile ENV takes it literally: double quotes, with \\, " and $ escaped
    (tojson would write > as \\u003e, which ENV keeps as it is)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'



def collect_paths(plan: CompositionPlan) -> list[str]:
    """What collect.py gathers the run-time needs of (paths under the Triton root)."""
    paths = list(plan.core) + plan.component_paths()
    paths += [f"backends/{c.name}" for c in plan.custom_backends]
    paths += [f"backends/{f.name}" for f in plan.foreign_backends]
    return paths


def python_prune(plan: CompositionPlan) -> dict | None:
    """A pruned base on a flavour's image (its python distributions pruned too): the parts prune.py
    seeds from (the image's server core and backends, then what is copied in) and the distributions
    asked for by name (--pip, model environments); None otherwise."""
    if not plan.pruning or plan.flavour.on_min_image:
        return None
    lines = list(plan.packages.specs) + [line for env in plan.model_envs for line in env.requirements]
    names = []
    for line in lines:
        match = REQUIREMENT_NAME.match(installable_requirement(line))
        if match and match.group(0) not in names:
            names.append(match.group(0))
    core = ["bin", "lib"] + [f"backends/{b}" for b in plan.base_backends]
    return {"paths": core + collect_paths(plan), "dists": names}


def render_dockerfile(plan: CompositionPlan, key: str | None = None, on_files: bool = False) -> str:
    """The composition's Dockerfile. A build's `key` (composition_key) is written into the labels of
    the stages the composer reads, not left to a build argument: buildah caches a LABEL step by its
    text, so a build of other inputs would find the stage of the last. A render keeps ${COMPOSER_KEY}.
    `on_files`: the stages after the parts' sources stand on the image the composer loaded of the
    base and those parts (ON_FILES_DOCKERFILE: the engine copies none of them)."""
    first, rest = plan.layer_parts()
    text = templates().get_template("compose.Dockerfile.j2").render(
        plan=plan, root=ROOT, collect_paths=collect_paths(plan), models_root=MODELS_ROOT,
        python_prune=python_prune(plan), first_parts=first, rest_parts=rest, system_tree=SYSTEM_TREE,
        on_files=on_files, **({"composition_key": key} if key else {}),
    )
    return text.rstrip("\n") + "\n"


def parts_stage(plan: CompositionPlan) -> str:
    """The last stage the first parts are read from (collected, packages, model-envs, decide: in
    the Dockerfile's order, before composed-files): what a build on files builds first."""
    if plan.pruning:
        return "decide"
    if plan.model_envs:
        return "model-envs"
    return "packages" if plan.packages else "collected"


def render_pruned_base(plan: CompositionPlan, run: str | None = None) -> str:
    """The pruned base's Dockerfile: the same collect and decide stages as the composition's. A
    build's `run` is written into its stages' labels (no ARG step that every run would share); the
    context keeps ${COMPOSER_RUN}, so the base's key (pruning.base_key) is the same for every run."""
    text = templates().get_template("pruned-base.Dockerfile.j2").render(
        plan=plan, root=ROOT, collect_paths=collect_paths(plan), models_root=MODELS_ROOT,
        python_prune=python_prune(plan), **({"composer_run": run} if run else {}),
    )
    return text.rstrip("\n") + "\n"


def composition_key(plan: CompositionPlan, inputs: Mapping[str, object]) -> str:
    """What the composition is made of, as 16 hex digits: every file of its build context (rendered
    with no key, wheels and models by their bytes) and `inputs` the context does not hold (the bases'
    image ids, the epoch, the labels the build adds). The same key, the same stages and image: it
    names the stages the composer reads (STAGE_LABEL) and the record of the image they made."""
    hashed = hashlib.sha256()
    for name, (data, mode) in sorted(_context_files(plan).items()):
        if isinstance(data, Path):  # what write_context copies: the file's bytes, through any link
            content = _bytes_digest(data)
        elif isinstance(data, bytes):
            content = hashlib.sha256(data).hexdigest()
        else:  # a link's target, or a folder
            content = data if isinstance(data, str) else FOLDER_DIGEST
        hashed.update(f"{name}\0{mode:o}\0{content}\n".encode())
    hashed.update(json.dumps(inputs, sort_keys=True, default=str).encode())
    return hashed.hexdigest()[:16]


def _bytes_digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def composition_record(plan: CompositionPlan) -> str:
    return json.dumps(plan.record(), indent=2, sort_keys=True) + "\n"


MARKER = ".triton-composer-context"  # in every folder render writes: the files it wrote, with digests
MARKER_FORMAT = 1


def check_output(directory: Path) -> Path:
    """A folder render may write into: new, empty, or one it rendered before (its marker is
    there) whose rendered files are as it left them. Anything else is a one-line error."""
    _owned(Path(os.path.abspath(directory)))
    return Path(os.path.abspath(directory))


def _owned(directory: Path) -> dict[str, str]:
    """The files render wrote into `directory` (relative path -> digest), each checked unchanged."""
    shown = f"-o {printable(str(directory))}"
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UsageError(f"{shown}: {path_problem(directory, 'folder') or exc}") from None
    if info is None:
        try:
            check_output_file(directory, "-o", makes_folders=True)  # a folder can be made there
        except Invalid as problem:
            raise UsageError(str(problem)) from None
        return {}
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{shown}: exists and is not a folder; give a new or empty folder")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"{shown}: is not writable")
    marker = directory / MARKER
    if not os.path.lexists(marker):
        if any(directory.iterdir()):
            raise UsageError(f"{shown}: the folder holds files the composer did not write; "
                             "give a new or empty folder (or one composer render wrote before)")
        return {}
    try:
        record = json.loads(read_text(marker, "render marker", 16 << 20))
        files = record["files"]
        if record.get("format") != MARKER_FORMAT or not isinstance(files, dict):
            raise ValueError
    except (Invalid, ValueError, KeyError, TypeError):
        raise UsageError(f"{shown}: its {MARKER} is not one this composer wrote (an older render?); "
                         "give a new or empty folder") from None
    for name, written in files.items():
        path = directory / name
        if not _inside(directory, path) or not isinstance(written, str):
            raise UsageError(f"{shown}: its {MARKER} names {printable(str(name))}, outside the folder")
        if written == FOLDER_DIGEST:
            if os.path.lexists(path) and (not _plain_path(directory, path) or not os.path.isdir(path)
                                          or os.path.islink(path)):
                raise UsageError(f"{shown}: {printable(name)} was replaced since composer render made it; "
                                 "move it away (or give a new folder): render replaces only its own files")
            continue
        if os.path.lexists(path) and (not _plain_path(directory, path) or digest(path) != written):
            raise UsageError(f"{shown}: {printable(name)} was changed or replaced since composer render wrote it; "
                             "move it away (or give a new folder): render replaces only its own files")
    return files


def _inside(directory: Path, path: Path) -> bool:
    return os.path.normpath(path).startswith(str(directory) + os.sep)


def _plain_path(directory: Path, path: Path) -> bool:
    """No folder between `directory` and `path` is a link (a write would leave the folder)."""
    for parent in path.relative_to(directory).parents:
        if parent != Path(".") and os.path.islink(directory / parent):
            return False
    return True


def write_context(plan: CompositionPlan, directory: Path, key: str | None = None) -> BuildContext:
    """Write the Dockerfile and everything it copies into `directory` (for a build, its `key`; or a render).

    Only files render wrote there before (listed in its marker, unchanged since) are replaced
    or removed; a user's other files stay; nothing is written through a symbolic link. The
    marker is rewritten even when writing fails half-way, so it always lists what render owns."""
    directory = Path(os.path.abspath(directory))
    owned = dict(_owned(directory))
    files = _context_files(plan, key)
    for name in files:
        blocker = _in_the_way(directory, name, owned)
        if blocker:
            raise UsageError(f"-o {printable(str(directory))}: {printable(blocker)} is in the way (composer render "
                             "did not write it, or it is a link); move it away or give a new folder")
    try:
        make_folders(directory)
        for name in sorted(set(owned) - set(files), reverse=True):  # what the last render wrote, this one not
            with contextlib.suppress(FileNotFoundError, OSError):
                if owned[name] == FOLDER_DIGEST:
                    os.rmdir(directory / name)  # only an empty one: a file of the user's in it stays
                else:
                    os.unlink(directory / name)
            del owned[name]
            _remove_empty_parents(directory, directory / name)
        for name, (data, mode) in sorted(files.items()):
            path = directory / name
            make_folders(path.parent)
            if isinstance(data, Folder):
                make_folders(path)
                owned[name] = FOLDER_DIGEST
                continue
            if isinstance(data, str):  # a link kept as a link (custom backends)
                if os.path.lexists(path):
                    os.unlink(path)
                os.symlink(data, path)
            else:
                write_file(path, data, mode)
            owned[name] = digest(path)
    except OSError as exc:
        raise UsageError(f"cannot write the build context in {directory}: {exc.strerror or exc}") from None
    finally:
        if os.path.isdir(directory):
            record = {"format": MARKER_FORMAT, "written_by": "triton-composer render: it replaces only these files",
                      "files": owned}
            write_file(directory / MARKER, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return BuildContext(directory=directory, dockerfile=directory / "Dockerfile",
                        pruned_base=directory / PRUNED_BASE if plan.pruning else None)


def _in_the_way(directory: Path, name: str, owned: dict[str, str]) -> str | None:
    """What keeps render from writing `name`: a file of the user's there, or a folder on the
    way that is a link or not a folder; None when nothing does."""
    for parent in reversed(Path(name).parents):
        if parent == Path("."):
            continue
        there = directory / parent
        if os.path.islink(there) or (os.path.lexists(there) and not os.path.isdir(there)):
            return str(parent)
    if name not in owned and os.path.lexists(directory / name):
        return name
    return None


def _remove_empty_parents(directory: Path, path: Path) -> None:
    for parent in path.relative_to(directory).parents:
        if parent == Path("."):
            return
        try:
            os.rmdir(directory / parent)
        except OSError:
            return


class Folder:
    """An empty folder of the context (a baked ensemble's version folder `1/`, which Triton needs)."""


FOLDER = Folder()
FOLDER_DIGEST = "folder"  # how the marker lists a folder render made
Content = tuple[Union[bytes, Path, str, Folder], int]  # bytes, a file to copy, a link's target, a folder; mode


def _context_files(plan: CompositionPlan, key: str | None = None) -> dict[str, Content]:
    """Every file of the build context (relative path -> content), the same for the same plan (and
    key: the pruned base's files never name it)."""
    files: dict[str, Content] = {
        "Dockerfile": (render_dockerfile(plan, key).encode(), 0o644),
        "composition.json": (composition_record(plan).encode(), 0o644),
    }
    if key:  # a build's: the Dockerfile of its stages on the image of the base and the first parts
        files[ON_FILES_DOCKERFILE] = (render_dockerfile(plan, key, on_files=True).encode(), 0o644)
    package = resources.files("composer.in_image")
    for script in BUILD_SCRIPTS + (PRUNE_SCRIPTS if plan.pruning else ()):
        files[script] = (package.joinpath(script).read_bytes(), 0o644)
    if plan.pruning:
        files["loaded-at-run-time.json"] = (plan.pruning.loaded_json().encode(), 0o644)
    packages = plan.packages
    if packages:
        lines = [installable_requirement(spec) for spec in packages.specs]
        files["packages/requirements.txt"] = ("".join(f"{line}\n" for line in lines).encode(), 0o644)
        files["packages/constraints.txt"] = ("".join(f"{pin}\n" for pin in plan.constraints).encode(), 0o644)
        for wheel in sorted(packages.wheelhouse.glob("*.whl")):
            files[f"packages/wheelhouse/{wheel.name}"] = (wheel, 0o644)
    for custom in plan.custom_backends:
        files.update(_tree(custom.source, f"custom-backends/{custom.name}", keep_links=True))
    if plan.pruning:  # the pruned base's context: what its Dockerfile copies, and no more
        files[f"{PRUNED_BASE}/Dockerfile"] = (render_pruned_base(plan).encode(), 0o644)
        for name in ("collect.py", "probe.py", "elfdeps.py", "prune.py", "pydists.py", "loaded-at-run-time.json"):
            files[f"{PRUNED_BASE}/{name}"] = files[name]
        for script in LAYER_SCRIPTS:
            files[f"{PRUNED_BASE}/{script}"] = (package.joinpath(script).read_bytes(), 0o644)
        files[f"{PRUNED_BASE}/layers.json"] = (plan.pruning.layers_json().encode(), 0o644)
        for name in [n for n in files if n.startswith("custom-backends/")]:
            files[f"{PRUNED_BASE}/{name}"] = files[name]
    if plan.baked_models is not None:  # links are followed: the image holds the files themselves
        files.update(_tree(plan.baked_models, "models", keep_links=False))
    files.update(_model_env_files(plan))
    return files


def _model_env_files(plan: CompositionPlan) -> dict[str, Content]:
    """Each model environment's requirements, pins and wheels; a baked model's configuration
    pointed at its environment."""
    files: dict[str, Content] = {}
    if plan.model_envs:
        files["make_env.py"] = (resources.files("composer.in_image").joinpath("make_env.py").read_bytes(), 0o644)
    for env in plan.model_envs:
        folder = f"model_envs/{env.model}"
        lines = [installable_requirement(spec) for spec in env.requirements]
        files[f"{folder}/requirements.txt"] = ("".join(f"{line}\n" for line in lines).encode(), 0o644)
        files[f"{folder}/constraints.txt"] = ("".join(f"{pin}\n" for pin in plan.constraints).encode(), 0o644)
        for wheel in sorted(env.wheelhouse.glob("*.whl")):
            files[f"{folder}/wheelhouse/{wheel.name}"] = (wheel, 0o644)
        if env.baked and plan.baked_models is not None:
            config = plan.baked_models / env.model / CONFIG
            text = pointed_config(read_text(config, "model configuration", 1 << 20), env)
            files[f"models/{env.model}/{CONFIG}"] = (text.encode(), stat.S_IMODE(os.stat(config).st_mode))
    return files


def _tree(source: Path, prefix: str, keep_links: bool) -> dict[str, Content]:
    files: dict[str, Content] = {}
    for folder, dirs, names in os.walk(source, followlinks=not keep_links):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" or keep_links)
        if not dirs and not names and Path(folder) != Path(source):  # an empty folder is kept as one
            files[f"{prefix}/{Path(folder).relative_to(source).as_posix()}"] = (FOLDER, 0o755)
        for name in sorted(names + ([d for d in dirs if os.path.islink(Path(folder) / d)] if keep_links else [])):
            path = Path(folder) / name
            relative = f"{prefix}/{path.relative_to(source).as_posix()}"
            if keep_links and os.path.islink(path):
                files[relative] = (os.readlink(path), 0)
            else:
                files[relative] = (path, stat.S_IMODE(os.stat(path).st_mode))
    return files
