"""The pipeline: spec -> Resolved (composer.resolve.resolve, once) -> Dockerfile + context -> image ->
smoke report -> tag -> push.

Each step takes the previous step's value as given: nothing here works out the release, the base
images, the packages or the plan again. Several images per run (sets) are a loop over compose();
the CLI only parses, calls and prints.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from composer.spec.catalog import Catalog
from composer.engine.engine import Engine
from composer.core.errors import BuildFailed, ComposerError, Invalid, SmokeTestFailed, UsageError
from composer.core.files import check_output_file, write_file
from composer.resolve.packages import explain_pip_failure, redactor, secrets_of
from composer.resolve.plan import CompositionPlan
from composer.core.progress import LineSink, quiet
from composer.build.pruning import PrunedBase, PruningReport, proof_failure, pruned_base
from composer.core.redaction import redact
from composer.render.render import BuildContext, write_context
from composer.resolve.resolve import Inspection, Resolved, resolve, resolve_recorded, resolve_targets
from composer.spec.options import is_sbom
from composer.verify.sbom import SBOM_PATH, add_sbom
from composer.verify.sizes import SizeReport, measure
from composer.verify.smoke import SmokePlan, SmokeReport, smoke_test
from composer.spec.options import CompositionSpec
from composer.publish.bundle import ReadBundle, open_bundle
from composer.publish.lock import verify_lock
from composer.registry.client import Registries
from composer.publish.push import push_image
from composer.publish.artifacts import push_sbom
from composer.core.refs import ImageRef


# -- build, smoke test, tag ------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    plan: CompositionPlan
    image_id: str
    tag: str | None
    size: int
    smoke: SmokeReport | None
    sizes: SizeReport | None = None  # what each part costs, read from the built image
    pruning: PruningReport | None = None  # on a pruned base: each package kept (why) or dropped
    sbom: str | None = None  # the CycloneDX document the image holds at composer.verify.sbom.SBOM_PATH
    pruned_base: PrunedBase | None = None  # on a pruned base: the base image, made now or reused

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
            "base": self.plan.base,
            "device": self.plan.device,
            "ort_providers": None if self.plan.ort_providers is None else ["cpu", *self.plan.ort_providers],
            "pruning": self.pruning.to_dict() if self.pruning else None,
            "pruned_base": self.pruned_base.to_dict() if self.pruned_base else None,
            "sbom_path": SBOM_PATH if self.sbom else None,
            "sbom": json.loads(self.sbom) if self.sbom else None,
        }


def build_image(
    engine: Engine,
    plan: CompositionPlan,
    *,
    context_dir: Path | None = None,
    labels: dict[str, str] | None = None,
    on_line: LineSink = quiet,
    on_smoke_line: LineSink | None = None,
) -> BuildResult:
    """Build the plan; tag the image only once its smoke test (with plan.smoke's settings) passed.

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
        # A pruned base is a build of its own, made first (or found); its failure says so itself.
        base = None
        if context.pruned_base:
            base = pruned_base(engine, plan, context.pruned_base, labels=labels, on_line=on_line)
        image_id = _build_composition(engine, plan, context, base, labels, redact, on_line)
    finally:
        if context_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    on_line(f"built {image_id[:19]}")
    try:  # its SBOM, from what the built image holds, in a last layer of its own
        image_id, sbom = add_sbom(engine, image_id, plan, labels=labels, on_line=on_line)
    except BaseException:
        engine.discard_untagged(image_id)
        raise
    try:
        sizes = measure(engine, image_id, plan)
    except ComposerError as error:  # the image is fine; only its report is missing
        on_line(f"note: no size report: {error.message}")
        sizes = None
    pruning = None
    if plan.pruning:
        try:
            pruning = PruningReport.read(engine, image_id)
        except ComposerError as error:
            on_line(f"note: no pruning report: {error.message}")

    report = None
    if plan.smoke is not None:
        try:
            smoke = SmokePlan.of(plan.all_backends, plan.server_version, plan.smoke, device=plan.device)
            report = smoke_test(engine, image_id, smoke, on_line=on_smoke_line or on_line, labels=labels)
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
    return BuildResult(plan, image_id, plan.tag, info.size if info else 0, report, sizes, pruning, sbom, base)


def _build_composition(engine: Engine, plan: CompositionPlan, context: BuildContext, base: PrunedBase | None,
                       labels, redact, on_line: LineSink) -> str:
    """Build the composition's Dockerfile (on `base` when pruned); a failed proof or pip install
    becomes its one line."""
    try:
        return engine.build(
            context.directory,
            network_mode="none",  # everything comes from the images and the context
            labels=labels,
            buildargs={"PRUNED_BASE": base.image} if base else None,
            redact=redact,
            on_line=on_line,
        )
    except BuildFailed as failure:
        proof = proof_failure(failure.log_tail)
        if proof:
            raise BuildFailed(f"{proof}; {plan.tag} was not moved", log_tail=failure.log_tail) from failure
        packages = plan.packages
        if packages and "pip" in failure.log_tail:
            where = f"the wheelhouse {packages.wheelhouse}"
            raise BuildFailed(
                "installing python packages failed: " + explain_pip_failure(failure.log_tail, plan.constraints, where),
                log_tail=failure.log_tail,
            ) from failure
        raise


# -- one image, end to end; several in a row ------------------------------------------------


@dataclass(frozen=True)
class Run:
    """How images are composed in this run (not what goes into them)."""

    locked: bool = False
    registry_auth: Any = None  # composer.registry.client.RegistryAuth, for pushes and registry reads
    labels: Mapping[str, str] | None = None  # marks what the run leaves on the engine (tests)
    on_line: LineSink = quiet  # progress
    on_build_line: LineSink | None = None  # build output
    on_plan: Any = None  # called with each plan before its build (the CLI shows notes)


@dataclass(frozen=True)
class Outcome:
    """What became of one spec: its result, where it was pushed, or the error that stopped it."""

    spec: CompositionSpec
    result: BuildResult | None = None
    pushed: tuple[str, ...] | None = None  # (ref, digest), and where its SBOM went
    error: ComposerError | None = None

    @property
    def tag(self) -> str:
        return self.result.tag if self.result else (self.spec.result.tag or self.spec.name)

    def to_dict(self) -> dict:
        payload: dict[str, Any] = {"name": self.spec.name}
        if self.result is not None:
            payload.update(self.result.to_dict())
        if self.pushed is not None:
            payload["pushed"] = {"ref": self.pushed[0], "digest": self.pushed[1],
                                 "sbom": self.pushed[2] if len(self.pushed) > 2 else None}
        if self.error is not None:
            payload["error"] = redact(self.error.message)
            report = getattr(self.error, "report", None)
            if report is not None and not payload.get("smoke_test"):
                payload["smoke_test"] = report.to_dict()  # a failed smoke test's rows, as --junit has them
        return payload


def compose(
    engine: Engine, spec: CompositionSpec, catalog: Catalog, run: Run = Run(), *,
    inspection: Inspection | None = None,
) -> Outcome:
    """Plan, build, smoke-test, tag and (if asked) push one image; errors propagate.

    `inspection` is given for a bundle: plan from what it recorded, not by asking registries.
    """
    if inspection is not None:
        return _build_and_push(engine, resolve_recorded(spec, catalog, inspection, run.on_line), run)
    targets = resolve_targets(spec, catalog, engine)
    if run.locked:
        registries = Registries(engine, run.registry_auth, spec.images.registry_ca)
        targets = verify_lock(engine, spec, targets, run.on_line, registries=registries)
    with tempfile.TemporaryDirectory(prefix="triton-composer-wheels-") as wheels:
        resolved = resolve(engine, spec, catalog, wheels=Path(wheels), on_line=run.on_line, targets=targets)
        return _build_and_push(engine, resolved, run)


def _build_and_push(engine: Engine, resolved: Resolved, run: Run) -> Outcome:
    spec, plan = resolved.spec, resolved.plan
    if run.on_plan is not None:
        run.on_plan(plan)
    result = build_image(
        engine,
        plan,
        labels=dict(run.labels or {}),
        on_line=run.on_build_line or run.on_line,
        on_smoke_line=run.on_line,
    )
    if spec.result.sbom and result.sbom:
        try:  # checked before any work; checked again, as something may have taken the name since
            write_file(check_output_file(spec.result.sbom, "--sbom", is_sbom), result.sbom.encode())
        except Invalid as problem:
            return Outcome(spec, result, None, UsageError(str(problem)))
        run.on_line(f"SBOM written to {spec.result.sbom}")
    pushed = None
    if spec.result.push:
        run.on_line(f"pushing {spec.result.push}")
        try:
            digest = push_image(engine, result.tag, spec.result.push, auth=run.registry_auth, on_line=run.on_line)
        except ComposerError as error:  # the image was built, tagged and smoke-tested: keep that in the outcome
            return Outcome(spec, result, None, error)
        run.on_line(f"pushed {spec.result.push}@{digest}")
        pushed = (spec.result.push, digest)
        if result.sbom:
            try:
                where = _push_sbom(engine, spec, run, digest, result.sbom)
            except ComposerError as error:  # the image is pushed: say so, and that its SBOM is not
                return Outcome(spec, result, pushed, error)
            run.on_line(f"pushed its SBOM as {where}")
            pushed = (spec.result.push, digest, where)
    return Outcome(spec, result, pushed)


def _push_sbom(engine: Engine, spec: CompositionSpec, run: Run, digest: str, document: str) -> str:
    """The SBOM next to the pushed image, with the push's credentials and the registry's trust."""
    target = ImageRef.parse(spec.result.push)
    api = Registries(engine, run.registry_auth, spec.images.registry_ca).client(target.host)
    return push_sbom(api, target.repository, digest, document)


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


def compose_bundle(engine: Engine, read: ReadBundle, spec: CompositionSpec, catalog: Catalog, run: Run) -> list[Outcome]:
    """Load the bundle's images and compose `spec`: the bundle's own, checked with the result
    options given (composer.spec.options.check, as for every build)."""
    inspection = open_bundle(engine, read, on_line=run.on_line)
    return compose_all(engine, [spec], catalog, run, inspection)
