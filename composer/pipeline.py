"""The pipeline: spec -> base images (resolved once) -> plan -> Dockerfile + context -> image ->
smoke report -> tag -> push.

Each step takes the previous step's value as given: the release and the base references are
resolved once per image (resolve_targets), the images are looked into once (inspect_images), and
the plan checks the selection against them. Several images per run (sets) are a loop over
compose(); the CLI only parses, calls and prints.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from composer.catalog import Catalog, Release
from composer.contents import FullImageContents, inspect_full
from composer.engine import Engine, ImageInfo
from composer.errors import BuildFailed, ComposerError, SmokeTestFailed, UsageError
from composer.packages import check_wheelhouse, download_wheels, explain_pip_failure, python_target, redactor, secrets_of
from composer.plan import (
    BaseImage,
    CompositionPlan,
    check_release,
    Offer,
    created_label,
    foreign_backend,
    image_refs,
    make_plan,
    release_constraints,
    resolve_release,
)
from composer.progress import Heartbeat, LineSink, quiet
from composer.refs import ImageRef, build_source
from composer.render import BuildContext, write_context
from composer.sizes import SizeReport, measure
from composer.smoke import SmokeOptions, SmokeReport, smoke_test
from composer.redaction import redact
from composer.spec import CompositionSpec

RELEASE_ENV = "NVIDIA_TRITON_SERVER_VERSION"


# -- base images ----------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """The base images of one composition, named and with their release known, before any pull."""

    release: Release
    full: str
    min: str
    backend_images: tuple[tuple[str, str], ...] = ()

    def roles(self) -> list[tuple[str, str]]:
        """(role, ref) of every base image: full, min, backend:<name>."""
        return [("full", self.full), ("min", self.min)] + [(f"backend:{n}", r) for n, r in self.backend_images]

    def pinned(self, refs: Mapping[str, str]) -> "Targets":
        """The same targets with each role's reference replaced (role -> ref), e.g. by a lock."""
        return dataclasses.replace(
            self,
            full=refs.get("full", self.full),
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
        full, minimal = image_refs(spec, release)
        return Targets(release, full, minimal, spec.selection.backend_images)
    if not images.full:
        raise UsageError("give --version YY.MM, or --image full=REF so the release can be read from the image")
    if engine is None:
        raise UsageError("give --version YY.MM: without an engine the release of the full image is unknown")
    info = engine.require_image(images.full)
    release = resolve_release(None, catalog, info.env)
    # The min image sits beside the full one: same repository, tag <release>-py3-min.
    minimal = images.min or str(ImageRef.parse(images.full).without_digest().with_tag(f"{release.name}-py3-min"))
    return Targets(release, images.full, minimal, spec.selection.backend_images)


@dataclass(frozen=True)
class Inspection:
    """What the engine told about the base images: everything planning needs, and nothing else.

    Kept as one value so a bundle can carry it to a machine that reaches no registry.
    """

    full: ImageInfo
    min: ImageInfo
    contents: FullImageContents
    backend_images: tuple[tuple[str, ImageInfo, FullImageContents], ...] = ()

    def to_dict(self) -> dict:
        return {
            "full": _info_dict(self.full),
            "min": _info_dict(self.min),
            "contents": self.contents.to_dict(),
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
        )


def inspect_images(engine: Engine, targets: Targets, on_line: LineSink = quiet) -> Inspection:
    """Pull what is missing and look inside the full image(s) with short-lived containers."""
    on_line(f"full image: {targets.full}")
    full_info = engine.require_image(targets.full, on_line=on_line)
    check_release(targets.release, full_info.env)  # a mismatch fails before anything slow
    on_line(f"min image: {targets.min}")
    min_info = engine.require_image(targets.min, on_line=on_line)
    on_line(f"looking inside {targets.full}")
    with Heartbeat(on_line, f"looking inside {targets.full}"):
        contents = inspect_full(engine, targets.full)
    others = []
    for name, ref in targets.backend_images:
        on_line(f"backend {name} from: {ref}")
        info = engine.require_image(ref, on_line=on_line)
        with Heartbeat(on_line, f"looking inside {ref}"):
            others.append((name, info, inspect_full(engine, ref)))
    return Inspection(full_info, min_info, contents, tuple(others))


def plan_from_inspection(
    spec: CompositionSpec,
    catalog: Catalog,
    release: Release,
    inspection: Inspection,
    *,
    pin: bool = True,
    created: str | None = None,
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
    return make_plan(spec, release, offer, catalog, full, minimal, inspection.full.env, foreign,
                     created=created or created_label(os.environ), notes=tuple(notes))


def plan_from_catalog(spec: CompositionSpec, catalog: Catalog, created: str | None = None) -> CompositionPlan:
    """Plan with no engine: the selection is checked against NGC's catalogued layout."""
    if not spec.images.version:
        raise UsageError("without a Docker engine, give --version YY.MM")
    targets = resolve_targets(spec, catalog)
    offer = Offer.from_layout(catalog, targets.release)
    foreign = tuple(
        foreign_backend(name, BaseImage(f"backend:{name}", ref), offer, None) for name, ref in targets.backend_images
    )
    return make_plan(spec, targets.release, offer, catalog, BaseImage("full", targets.full),
                     BaseImage("min", targets.min), foreign=foreign, created=created or created_label(os.environ))


def check_packages(engine: Engine, plan: CompositionPlan, contents: FullImageContents, on_line: LineSink) -> None:
    """Fail before the build, on the host, if the wheelhouse cannot satisfy the requirements."""
    if plan.packages.wheelhouse is None:
        return
    target = python_target(engine, plan.full.ref, contents.python.version)
    for name, version in check_wheelhouse(target, plan.packages, plan.constraints):
        on_line(f"wheelhouse: {name} {version}")


def plan_from_engine(
    engine: Engine, spec: CompositionSpec, catalog: Catalog, on_line: LineSink = quiet,
    targets: Targets | None = None, wheels: Path | None = None,
) -> tuple[CompositionPlan, Inspection]:
    """Look inside the real base images, then plan: the selection is checked against them.

    Packages from an index are fetched on the host into the folder `wheels` first, so the plan
    (and the build) install from a wheelhouse and no index URL reaches the engine.
    """
    targets = targets or resolve_targets(spec, catalog, engine)
    inspection = inspect_images(engine, targets, on_line)
    if wheels is not None:
        spec = fetch_packages(engine, spec, targets, inspection, wheels, on_line)
    plan = plan_from_inspection(spec, catalog, targets.release, inspection)
    check_packages(engine, plan, inspection.contents, on_line)
    return plan, inspection


def fetch_wheels(engine: Engine, spec: CompositionSpec, targets: Targets, inspection: Inspection,
                 folder: Path, on_line: LineSink = quiet):
    """Fetch on the host, into `folder`, the wheels the spec's packages need for the python the
    image's python backend runs (with the release's pins); (the python target, the wheel files)."""
    if inspection.contents.python is None:
        raise UsageError(f"{targets.full} has no python: --pip packages need the python backend's python")
    target = python_target(engine, targets.full, inspection.contents.python.version)
    constraints = release_constraints(targets.release)
    on_line(f"fetching wheels on this machine for python {target.version} ({target.platform}), "
            f"pins: {', '.join(constraints) or 'none'}")
    return target, download_wheels(target, spec.packages, constraints, folder, on_line=on_line)


def fetch_packages(engine: Engine, spec: CompositionSpec, targets: Targets, inspection: Inspection,
                   folder: Path, on_line: LineSink = quiet) -> CompositionSpec:
    """The spec with its packages fetched from their index into `folder` on the host (a
    wheelhouse), and no index, trusted host or CA left in it: those stay on the host."""
    if not spec.packages or spec.packages.wheelhouse is not None:
        return spec
    fetch_wheels(engine, spec, targets, inspection, folder, on_line)
    return spec.with_fields({"packages.wheelhouse": folder, "packages.index_url": None,
                             "packages.extra_index_urls": (), "packages.trusted_hosts": (), "packages.ca_cert": None})


def _info_dict(info: ImageInfo) -> dict:
    return {
        "id": info.id, "ref": info.ref, "tags": list(info.tags), "repo_digests": list(info.repo_digests),
        "env": dict(info.env), "labels": dict(info.labels), "size": info.size,
    }


def _info(d: dict) -> ImageInfo:
    return ImageInfo(
        id=d["id"], ref=d["ref"], tags=tuple(d["tags"]), repo_digests=tuple(d["repo_digests"]),
        env=dict(d["env"]), labels=dict(d["labels"]), size=int(d["size"]),
    )


# -- build, smoke test, tag ------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    plan: CompositionPlan
    image_id: str
    tag: str | None
    size: int
    smoke: SmokeReport | None
    sizes: SizeReport | None = None  # what each part costs, read from the built image

    def to_dict(self) -> dict:
        return {
            "image_id": self.image_id,
            "tag": self.tag,
            "size": self.size,
            "release": self.plan.release.name,
            "server_version": self.plan.server_version,
            "backends": list(self.plan.all_backends),
            "repoagents": list(self.plan.repoagents),
            "caches": list(self.plan.caches),
            "base_images": {"full": self.plan.full.record(), "min": self.plan.min.record()},
            "labels": dict(self.plan.labels),
            "smoke_test": self.smoke.to_dict() if self.smoke else None,
            "sizes": self.sizes.to_dict() if self.sizes else None,
        }


def build_image(
    engine: Engine,
    plan: CompositionPlan,
    *,
    smoke: bool = True,
    model_repository: Path | None = None,
    smoke_cases: Path | None = None,
    samples: bool = True,
    gpus: str | int = "auto",
    strict: bool = False,
    context_dir: Path | None = None,
    labels: dict[str, str] | None = None,
    on_line: LineSink = quiet,
    on_smoke_line: LineSink | None = None,
) -> BuildResult:
    """Build the plan; tag the image only once its smoke test passed.

    A failed build or smoke test leaves the tag where it was: the new image is built untagged
    and discarded if it does not serve. `labels` mark what the build and smoke test leave on
    the engine (tests use them to sweep).
    """
    workdir = Path(tempfile.mkdtemp(prefix="triton-composer-")) if context_dir is None else context_dir
    packages = plan.packages
    redact = redactor(secrets_of(packages))
    try:
        context: BuildContext = write_context(plan, workdir)
        on_line(f"build context: {context.directory}")
        image_id = engine.build(
            context.directory,
            network_mode="none",  # everything comes from the images and the context
            labels=labels,
            redact=redact,
            on_line=on_line,
        )
    except BuildFailed as failure:
        if packages and "pip" in failure.log_tail:
            where = f"the wheelhouse {packages.wheelhouse}"
            raise BuildFailed(
                "installing python packages failed: " + explain_pip_failure(failure.log_tail, plan.constraints, where),
                log_tail=failure.log_tail,
            ) from failure
        raise
    finally:
        if context_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    on_line(f"built {image_id[:19]}")
    try:
        sizes = measure(engine, image_id, plan)
    except ComposerError as error:  # the image is fine; only its report is missing
        on_line(f"note: no size report: {error.message}")
        sizes = None

    report = None
    if smoke:
        options = SmokeOptions(
            backends=plan.all_backends, server_version=plan.server_version, model_repository=model_repository,
            cases_file=smoke_cases, samples=samples, gpus=gpus, strict=strict,
        )
        try:
            report = smoke_test(engine, image_id, options, on_line=on_smoke_line or on_line, labels=labels)
        except BaseException:  # Ctrl-C or a lost engine: the untagged new image goes, every tag stays
            engine.discard_untagged(image_id)
            raise
        if not report.passed:
            engine.discard_untagged(image_id)
            failed = ", ".join(f"{r.subject}{'/' + r.model if r.model else ''}" for r in report.failures())
            raise SmokeTestFailed(
                f"smoke test failed ({failed}); {plan.tag} was not moved", report=report, log_tail=report.log_tail
            )
    engine.tag(image_id, plan.tag)
    info = engine.image(image_id)
    return BuildResult(plan, image_id, plan.tag, info.size if info else 0, report, sizes)


# -- one image, end to end; several in a row ------------------------------------------------


@dataclass(frozen=True)
class Run:
    """How images are composed in this run (not what goes into them)."""

    locked: bool = False
    registry_auth: Any = None  # composer.registry.RegistryAuth, for pushes and registry reads
    labels: Mapping[str, str] | None = None  # marks what the run leaves on the engine (tests)
    on_line: LineSink = quiet  # progress
    on_build_line: LineSink | None = None  # build output
    on_plan: Any = None  # called with each plan before its build (the CLI shows notes)


@dataclass(frozen=True)
class Outcome:
    """What became of one spec: its result, where it was pushed, or the error that stopped it."""

    spec: CompositionSpec
    result: BuildResult | None = None
    pushed: tuple[str, str] | None = None  # (ref, digest)
    error: ComposerError | None = None

    @property
    def tag(self) -> str:
        return self.result.tag if self.result else (self.spec.result.tag or self.spec.name)

    def to_dict(self) -> dict:
        payload: dict[str, Any] = {"name": self.spec.name}
        if self.result is not None:
            payload.update(self.result.to_dict())
        if self.pushed is not None:
            payload["pushed"] = {"ref": self.pushed[0], "digest": self.pushed[1]}
        if self.error is not None:
            payload["error"] = redact(self.error.message)
        return payload


def compose(
    engine: Engine, spec: CompositionSpec, catalog: Catalog, run: Run = Run(), *,
    inspection: Inspection | None = None,
) -> Outcome:
    """Plan, build, smoke-test, tag and (if asked) push one image; errors propagate.

    `inspection` is given for a bundle: plan from what it recorded, not by asking registries.
    """
    if inspection is not None:
        release = resolve_release(spec.images.version, catalog, inspection.full.env)
        plan = plan_from_inspection(spec, catalog, release, inspection, pin=False)
        check_packages(engine, plan, inspection.contents, run.on_line)
    else:
        targets = resolve_targets(spec, catalog, engine)
        if run.locked:
            from composer.lock import verify_lock
            from composer.registry import Registries

            registries = Registries(engine, run.registry_auth, spec.images.registry_ca)
            targets = verify_lock(engine, spec, targets, run.on_line, registries=registries)
        with tempfile.TemporaryDirectory(prefix="triton-composer-wheels-") as wheels:
            plan, _ = plan_from_engine(engine, spec, catalog, run.on_line, targets, wheels=Path(wheels))
            return _build_and_push(engine, spec, plan, run)
    return _build_and_push(engine, spec, plan, run)


def _build_and_push(engine: Engine, spec: CompositionSpec, plan: CompositionPlan, run: Run) -> Outcome:
    if run.on_plan is not None:
        run.on_plan(plan)
    result = build_image(
        engine,
        plan,
        smoke=spec.result.smoke_test,
        model_repository=spec.result.model_repository,
        smoke_cases=spec.result.smoke_cases,
        samples=spec.result.samples,
        gpus=spec.result.gpus,
        strict=spec.result.strict,
        labels=dict(run.labels or {}),
        on_line=run.on_build_line or run.on_line,
        on_smoke_line=run.on_line,
    )
    pushed = None
    if spec.result.push:
        from composer.registry import push_image

        run.on_line(f"pushing {spec.result.push}")
        try:
            digest = push_image(engine, result.tag, spec.result.push, auth=run.registry_auth, on_line=run.on_line)
        except ComposerError as error:  # the image was built, tagged and smoke-tested: keep that in the outcome
            return Outcome(spec, result, None, error)
        run.on_line(f"pushed {spec.result.push}@{digest}")
        pushed = (spec.result.push, digest)
    return Outcome(spec, result, pushed)


def compose_all(engine: Engine, specs: Sequence[CompositionSpec], catalog: Catalog, run: Run = Run(),
                inspection: Inspection | None = None) -> list[Outcome]:
    """compose() each spec in turn; a failure is kept in its outcome and the next one goes on.

    Images of one run share their common layers through the engine's build cache.
    """
    outcomes = []
    for spec in specs:
        if len(specs) > 1:
            run.on_line(f"== {spec.name} ==")
        try:
            outcomes.append(compose(engine, spec, catalog, run, inspection=inspection))
        except ComposerError as error:
            outcomes.append(Outcome(spec, error=error))
    return outcomes
