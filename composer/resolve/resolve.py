"""One resolve step: every value a composition needs, worked out once, before any build.

The release, the base images (by digest or id), what the full image offers and its python
target (one probe run: a composition starts at most one container of the full image before its
build), the packages as the build installs them (a wheelhouse, fetched once) and the plan. Build,
render, bundle, lock, wheels and smoke-test take a Resolved; nothing downstream derives any of
it again, and the spec is never rewritten.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from composer.catalog.catalog import Catalog, FlavourImage, Release
from composer.resolve.contents import FullImageContents, inspect_full
from composer.backends import PYTHON
from composer.engine.interface import Engine, ImageInfo
from composer.core.errors import EngineUnavailable, ImageNotFound, UsageError
from composer.config.model_envs import ModelEnv
from composer.resolve.packages import PythonTarget, check_wheelhouse, download_wheels, python_target
from composer.resolve.offer import FlavourBase, Offer
from composer.resolve.plan_types import BaseConfig, BaseImage, CompositionPlan, created_label
from composer.resolve.plan import check_image_release, foreign_backend, image_refs, make_plan, resolve_release
from composer.core.progress import Heartbeat, LineSink, quiet
from composer.core.refs import ImageRef, build_source
from composer.config.types import CompositionSpec, Packages

RELEASE_ENV = "NVIDIA_TRITON_SERVER_VERSION"


@dataclass(frozen=True)
class Resolved:
    """One composition, resolved: what every later step reads and none works out again."""

    spec: CompositionSpec  # as the user gave it
    release: Release
    plan: CompositionPlan  # base images by digest or id, packages as installed, labels, tag
    inspection: "Inspection | None" = None  # what the engine said of the bases (None: planned offline)
    python: PythonTarget | None = None  # the wheels' python and platform, when there are packages
    wheels: tuple[Path, ...] = ()  # wheels fetched on the host for this composition

    @property
    def contents(self) -> FullImageContents | None:
        return self.inspection.contents if self.inspection else None


def resolve(engine: Engine, spec: CompositionSpec, catalog: Catalog, *, wheels: Path | None = None,
            on_line: LineSink = quiet, targets: "Targets | None" = None) -> Resolved:
    """Resolve `spec` against the engine's images: each base required once, the full image probed
    once. Packages from an index are fetched on the host into `wheels` (a wheelhouse), so no
    index URL reaches the engine; `targets` are given when a lock pinned them."""
    targets = targets or resolve_targets(spec, catalog, engine)
    inspection = inspect_images(engine, targets, on_line)
    python, packages, fetched = _packages(spec, targets.release, inspection.contents, wheels, on_line)
    envs, env_wheels = _model_envs(spec, targets.release, inspection.contents, wheels, on_line)
    plan = plan_from_inspection(spec, catalog, targets.release, inspection, packages=packages, model_envs=envs)
    _check_wheelhouse(python, plan, on_line)
    return Resolved(spec, targets.release, plan, inspection, python or (python_target(inspection.contents) if envs else None),
                    tuple(fetched + env_wheels))


def resolve_recorded(spec: CompositionSpec, catalog: Catalog, inspection: "Inspection",
                     on_line: LineSink = quiet) -> Resolved:
    """Resolve against what a bundle recorded of its images (no registry, no probe): built FROM
    the loaded images' names, whose ids the bundle checked."""
    release = resolve_release(spec.images.version, catalog, inspection.full.env)
    python = python_target(inspection.contents) if spec.packages else None
    plan = plan_from_inspection(spec, catalog, release, inspection, pin=False)
    _check_wheelhouse(python, plan, on_line)
    return Resolved(spec, release, plan, inspection, python)


def resolve_offline(spec: CompositionSpec, catalog: Catalog) -> Resolved:
    """Resolve with no engine: the selection is checked against NGC's catalogued layout."""
    plan = _plan_from_catalog(spec, catalog)
    return Resolved(spec, plan.release, plan)


def resolve_for_render(connect: Callable[[], Engine] | None, spec: CompositionSpec, catalog: Catalog, *,
                       wheels: Path, on_line: LineSink = quiet) -> Resolved:
    """What `render` writes: resolved against the engine's images when one answers and holds them,
    else (with a release named) against NGC's catalogued layout; connect=None asks no engine."""
    if connect is None:
        return resolve_offline(spec, catalog)
    try:
        engine = connect()
    except EngineUnavailable:
        if not spec.images.version:
            raise
        on_line("no Docker engine answers: checking the selection against NGC's catalogued layout")
        return resolve_offline(spec, catalog)
    try:
        return resolve(engine, spec, catalog, wheels=wheels, on_line=on_line)
    except ImageNotFound as missing:
        if not spec.images.version:
            raise
        on_line(f"{missing.message}: checking the selection against NGC's catalogued layout instead")
        return resolve_offline(spec, catalog)


def _packages(spec: CompositionSpec, release: Release, contents: FullImageContents, folder: Path | None,
              on_line: LineSink) -> tuple[PythonTarget | None, Packages, list[Path]]:
    """The python target and the packages as the build installs them: from the given wheelhouse,
    or fetched once from their index into `folder` (index, trusted hosts and CA stay on the host)."""
    packages = spec.packages
    if not packages:
        return None, packages, []
    target = python_target(contents)
    if packages.wheelhouse is not None or folder is None:
        return target, packages, []
    files = fetch_wheels(target, packages, release, folder, on_line)
    return target, dataclasses.replace(packages, wheelhouse=folder, index_url=None, extra_index_urls=(),
                                       trusted_hosts=(), ca_cert=None), files


def _model_envs(spec: CompositionSpec, release: Release, contents: FullImageContents, folder: Path | None,
                on_line: LineSink, *, shared: bool = False) -> tuple[tuple[ModelEnv, ...], list[Path]]:
    """Each model environment with its own wheelhouse, fetched on the host (as --pip's packages
    are: index settings stay here) for the stub's python, before any image work; a package with
    no wheel for that python and platform (one that needs a compiler) fails here, named.
    `shared`: every model's wheels go into `folder` itself (composer wheels fills one wheelhouse)."""
    envs = spec.model_envs()
    if not envs:
        return (), []
    target = python_target(contents)
    given = spec.packages.wheelhouse
    fetched: list[Path] = []
    done = []
    for env in envs:
        packages = dataclasses.replace(spec.packages, specs=env.requirements)
        try:
            if given is not None or folder is None:
                wheelhouse = given
                if given is not None:
                    check_wheelhouse(target, packages, PYTHON.constraints(release))
            else:
                wheelhouse = folder if shared else folder / "model-envs" / env.model
                on_line(f"model {env.model}: its own environment")
                fetched += fetch_wheels(target, packages, release, wheelhouse, on_line)
        except UsageError as error:
            why = (f" (python {target.version} on {target.platform}; the build installs wheels only: a package "
                   "that needs a compiler cannot be built there)") if "no wheel" in error.message else ""
            raise UsageError(f"model {env.model}: {error.message}{why}") from None
        done.append(dataclasses.replace(env, wheelhouse=wheelhouse))
    return tuple(done), fetched


def fetch_model_env_wheels(spec: CompositionSpec, release: Release, contents: FullImageContents, folder: Path,
                           on_line: LineSink = quiet) -> list[Path]:
    """Into one wheelhouse `folder`, the wheels of every model environment (for composer wheels)."""
    return _model_envs(spec, release, contents, folder, on_line, shared=True)[1]


def fetch_wheels(target: PythonTarget, packages: Packages, release: Release, folder: Path,
                 on_line: LineSink = quiet) -> list[Path]:
    """Fetch on the host, into `folder`, the wheels `packages` need for the python target (with
    the release's pins)."""
    constraints = PYTHON.constraints(release)
    on_line(f"fetching wheels on this machine for python {target.version} ({target.platform}), "
            f"pins: {', '.join(constraints) or 'none'}")
    return download_wheels(target, packages, constraints, folder, on_line=on_line)


def _check_wheelhouse(python: PythonTarget | None, plan: CompositionPlan, on_line: LineSink) -> None:
    """Fail before the build, on the host, if the wheelhouse cannot satisfy the requirements."""
    if python is None or plan.packages.wheelhouse is None:
        return
    for name, version in check_wheelhouse(python, plan.packages, plan.constraints):
        on_line(f"wheelhouse: {name} {version}")


# -- base images ----------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """The base images of one composition, named and with their release known, before any pull."""

    release: Release
    full: str
    min: str
    backend_images: tuple[tuple[str, str], ...] = ()
    full_info: ImageInfo | None = None  # when reading the release already required the full image
    flavour: FlavourImage | None = None  # --flavour: `min` is the flavour's image, the composition's base

    def roles(self) -> list[tuple[str, str]]:
        """(role, ref) of every base image: full, min, backend:<name>."""
        return [("full", self.full), ("min", self.min)] + [(f"backend:{n}", r) for n, r in self.backend_images]

    def pinned(self, refs: Mapping[str, str]) -> "Targets":
        """The same targets with each role's reference replaced (role -> ref), e.g. by a lock."""
        return dataclasses.replace(
            self,
            full=refs.get("full", self.full),
            full_info=self.full_info if refs.get("full", self.full) == self.full else None,
            min=refs.get("min", self.min),
            backend_images=tuple((n, refs.get(f"backend:{n}", r)) for n, r in self.backend_images),
        )


def resolve_targets(spec: CompositionSpec, catalog: Catalog, engine: Engine | None = None) -> Targets:
    """The release and the base references, resolved once for the whole pipeline.

    With --version the catalog answers; with only --image full=REF the full image's own
    environment says its release (and the min image sits beside it: <repo>:<release>-py3-min).
    """
    images = spec.images
    if images.version:
        release = catalog.release(images.version)
        flavour = catalog.flavour(spec.selection.flavour, release, images.registry)
        full, minimal = image_refs(spec, release)
        if flavour is not None and not images.min:
            minimal = flavour.ref(images.registry)  # the flavour's image is the base
        return Targets(release, full, minimal, spec.selection.backend_images, flavour=flavour)
    # composer.config.rules: with no release named, a full image is, and an engine reads its release
    # (render --offline names its release).
    if not images.full or engine is None:
        raise ValueError("resolve_targets: no release, and no full image or no engine to read it from")
    info = engine.require_image(images.full)
    release = resolve_release(None, catalog, info.env)
    # The min image sits beside the full one: same repository, tag <release>-py3-min.
    flavour = catalog.flavour(spec.selection.flavour, release, images.registry)
    repository = ImageRef.parse(images.full).without_digest()
    beside = flavour.tag if flavour is not None else f"{release.name}-py3-min"
    minimal = images.min or str(repository.with_tag(beside))
    return Targets(release, images.full, minimal, spec.selection.backend_images, full_info=info, flavour=flavour)


@dataclass(frozen=True)
class Inspection:
    """What the engine told about the base images: everything planning needs, and nothing else.

    Kept as one value so a bundle can carry it to a machine that reaches no registry.
    """

    full: ImageInfo
    min: ImageInfo
    contents: FullImageContents
    backend_images: tuple[tuple[str, ImageInfo, FullImageContents], ...] = ()
    base_contents: FullImageContents | None = None  # what the flavour's image (the min role) holds

    def to_dict(self) -> dict:
        return {
            "full": _info_dict(self.full),
            "min": _info_dict(self.min),
            "contents": self.contents.to_dict(),
            **({"base_contents": self.base_contents.to_dict()} if self.base_contents else {}),
            "backend_images": [
                {"name": n, "image": _info_dict(i), "contents": c.to_dict()} for n, i, c in self.backend_images
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Inspection":
        return cls(
            full=_info(d["full"]),
            min=_info(d["min"]),
            contents=FullImageContents.from_dict(d["contents"]),
            backend_images=tuple(
                (b["name"], _info(b["image"]), FullImageContents.from_dict(b["contents"])) for b in d["backend_images"]
            ),
            base_contents=FullImageContents.from_dict(d["base_contents"]) if d.get("base_contents") else None,
        )


def require_full(engine: Engine, targets: Targets, on_line: LineSink = quiet) -> ImageInfo:
    """The full image, pulled if missing (once: reading the release may have required it) and
    checked against the release before anything slow."""
    on_line(f"full image: {targets.full}")
    info = targets.full_info or engine.require_image(targets.full, on_line=on_line)
    check_image_release(targets.release, info.env)
    return info


def probe(engine: Engine, ref: str, on_line: LineSink = quiet) -> FullImageContents:
    """What the full image `ref` offers, from the one probe container (composer.resolve.contents)."""
    on_line(f"looking inside {ref}")
    with Heartbeat(on_line, f"looking inside {ref}"):
        return inspect_full(engine, ref)


def inspect_images(engine: Engine, targets: Targets, on_line: LineSink = quiet) -> Inspection:
    """Pull what is missing and look inside the full image(s), one short-lived container each."""
    full_info = require_full(engine, targets, on_line)
    on_line(f"min image: {targets.min}")
    min_info = engine.require_image(targets.min, on_line=on_line)
    contents = probe(engine, targets.full, on_line)
    others = []
    for name, ref in targets.backend_images:
        on_line(f"backend {name} from: {ref}")
        info = engine.require_image(ref, on_line=on_line)
        others.append((name, info, probe(engine, ref, on_line)))
    base = probe(engine, targets.min, on_line) if targets.flavour is not None else None
    return Inspection(full_info, min_info, contents, tuple(others), base)


def plan_from_inspection(
    spec: CompositionSpec,
    catalog: Catalog,
    release: Release,
    inspection: Inspection,
    *,
    pin: bool = True,
    created: str | None = None,
    packages: Packages | None = None,
    model_envs: tuple[ModelEnv, ...] = (),
) -> CompositionPlan:
    """The plan, checked against what the images offer; no engine involved.

    pin=False builds FROM the names rather than the registry digests (for loaded bundles,
    whose image ids were checked instead: a loaded image has no digest reference).
    """
    notes: list[str] = []

    def base(role: str, info: ImageInfo) -> BaseImage:
        """Built FROM its own repository's digest, or by id when only another repository has one."""
        if not pin:
            return BaseImage(role, info.ref, info.id, info.digest, source=info.ref)
        source = build_source(info.ref, info.id, info.repo_digests)
        if source.note:
            notes.append(source.note)
        return BaseImage(role, info.ref, info.id, info.digest, source=source.ref)

    full, minimal = base("full", inspection.full), base("min", inspection.min)
    foreign = tuple(
        foreign_backend(name, base(f"backend:{name}", info), Offer.from_contents(contents), info.env.get(RELEASE_ENV))
        for name, info, contents in inspection.backend_images
    )
    offer = Offer.from_contents(inspection.contents)
    flavour = None
    if inspection.base_contents is not None:
        described = catalog.flavour(spec.selection.flavour, release, spec.images.registry)
        if described is not None:
            flavour = FlavourBase.of(described, Offer.from_contents(inspection.base_contents), inspection.min.env,
                                     inspection.base_contents.cuda_major)
    return make_plan(spec, release, offer, catalog, full, minimal, inspection.full.env, foreign,
                     created=created or created_label(os.environ, _times(inspection)), notes=tuple(notes),
                     packages=packages,
                     model_envs=model_envs, min_config=BaseConfig.of(inspection.min), flavour=flavour,
                     full_cuda_major=inspection.contents.cuda_major)


def _times(inspection: Inspection) -> list[str]:
    """Every base image's own time (the composition's epoch is the newest, unless SOURCE_DATE_EPOCH)."""
    return [inspection.full.created, inspection.min.created, *(info.created for _, info, _ in inspection.backend_images)]


def _plan_from_catalog(spec: CompositionSpec, catalog: Catalog, created: str | None = None) -> CompositionPlan:
    """Plan with no engine: the selection is checked against NGC's catalogued layout."""
    if not spec.images.version:  # render fell back to the catalog, which knows releases by name only
        raise UsageError("no Docker engine answers: without one, give --version YY.MM (the release of --image full= "
                         "is read from the image)")
    targets = resolve_targets(spec, catalog)
    offer = Offer.from_layout(catalog, targets.release)
    foreign = tuple(
        foreign_backend(name, BaseImage(f"backend:{name}", ref), offer, None) for name, ref in targets.backend_images
    )
    envs = tuple(dataclasses.replace(e, wheelhouse=spec.packages.wheelhouse)  # no engine: a given wheelhouse only
                 for e in spec.model_envs())
    flavour = None
    if targets.flavour is not None:  # as catalogued: its backends, the release's python and server
        flavour = FlavourBase.of(targets.flavour, Offer.from_flavour(targets.flavour, targets.release), {}, None)
    return make_plan(spec, targets.release, offer, catalog, BaseImage("full", targets.full),
                     BaseImage("min", targets.min), foreign=foreign, created=created or created_label(os.environ),
                     model_envs=envs, flavour=flavour)


def _info_dict(info: ImageInfo) -> dict:
    return {
        "id": info.id, "ref": info.ref, "tags": list(info.tags), "repo_digests": list(info.repo_digests),
        "env": dict(info.env), "labels": dict(info.labels), "size": info.size,
        "entrypoint": list(info.entrypoint), "cmd": list(info.cmd), "workdir": info.workdir,
        "created": info.created,
    }


def _info(d: dict) -> ImageInfo:
    return ImageInfo(
        id=d["id"], ref=d["ref"], tags=tuple(d["tags"]), repo_digests=tuple(d["repo_digests"]),
        env=dict(d["env"]), labels=dict(d["labels"]), size=int(d["size"]),
        entrypoint=tuple(d.get("entrypoint") or ()), cmd=tuple(d.get("cmd") or ()), workdir=str(d.get("workdir") or ""),
        created=str(d.get("created") or ""),
    )


