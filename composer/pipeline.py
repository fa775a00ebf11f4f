"""The pipeline: spec -> Resolved (composer.resolve.resolve, once) -> Dockerfile + context -> image ->
smoke report -> tag -> push.

Each step takes the previous step's value as given: nothing here works out the release, the base
images, the packages or the plan again. Several images per run (sets) are a loop over compose();
the CLI only parses, calls and prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from composer import __version__
from composer.catalog.catalog import Catalog
from composer.engine.buildkit import BuildKit
from composer.engine.errors import lost_layer
from composer.engine.interface import Builder, Engine
from composer.core import interrupts
from composer.core.workers import Shared
from composer.core.errors import (BuildFailed, ComposerError, EngineUnavailable, Invalid, NoSpace, SmokeTestFailed,
                                   UsageError)
from composer.core.files import check_output_file, write_file
from composer.resolve.packages import explain_pip_failure, redactor, secrets_of
from composer.resolve.plan_types import RUN_LABEL, STAGE_LABEL, CompositionPlan
from composer.core.progress import LineSink, quiet
from composer.assembly.assemble import Assembled, Files, Sources, assemble, assemble_files, find_stages, sbom_part
from composer.assembly import space
from composer.assembly import layer_reuse, records
from composer.assembly.cache import remove_dead_runs, remove_run
from composer.assembly.pruning import (PrunedBase, PruningReport, proof_failure, pruned_base, pruned_base_made,
                                    remove_run_stages)
from composer.engine import locks, oci_layout
from composer.resolve.contents import FullImageContents
from composer.core.redaction import redact
from composer.render.render import ON_FILES_DOCKERFILE, BuildContext, composition_key, parts_stage, write_context
from composer.resolve.resolve import Inspection, Resolved, resolve, resolve_recorded, resolve_targets
from composer.config.values import is_sbom
from composer.verify.sbom import SBOM_PATH, make_sbom, read_facts, version_labels
from composer.verify.sizes import SizeReport, measure
from composer.verify import smoke_record
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan, SmokeReport
from composer.config.types import CompositionSpec, Providers
from composer.sources.bundle import ReadBundle, open_bundle
from composer.sources.lock import verify_lock
from composer.registry.client import Registries
from composer.registry.retries import retry_policy
from composer.publish.image_push import push_again, push_assembled, pushed_before, record_push
from composer.publish.blobs import compressor_id, kept_as
from composer.publish.provenance import SLSA_PROVENANCE, Made, now, statement
from composer.publish.push import push_image
from composer.publish.sign import SigningKey, push_attestation, push_signature
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
    assembled: Assembled | None = None  # the image as the composer wrote it (its layers, for a push)

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
            "device": str(self.plan.device),
            "ort_providers": None if self.plan.ort_providers is None else Providers.listing(self.plan.ort_providers),
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
    on_engine_line: LineSink | None = None,
    layers_dir: Path | None = None,
    tag: bool = True,
    contents: FullImageContents | None = None,
    check_space: bool = True,
    cache: bool = True,
    smoke_always: bool = False,
    reuse_when=None,
    builder: Builder | None = None,
    record_reads: bool = False,
) -> BuildResult:
    """Build the plan; tag the image only once its smoke test (with plan.smoke's settings) passed.

    The engine builds the rendered Dockerfile (its stages run the steps); the composer then writes
    the image itself from the same parts (composer.assembly.assemble), so the same inputs give the same
    image id. Everything is keyed by what it is made of (render.composition_key): the stages, shared
    through the engine's build cache by every build of the same inputs; the image, recorded
    (composer.assembly.records), so an unchanged build takes it as it is; a PASS of its smoke test
    (composer.verify.smoke_record), unless `smoke_always`. `cache` False builds from scratch.
    A failed build or smoke test leaves the tag where it was: the run's hold on the new image goes,
    and the image with it unless another run holds it. `labels` mark what the build and smoke test
    leave on the engine (tests use them to sweep); `layers_dir` keeps the image's own layers for a
    push after (so the image is written, not taken from the record, unless `reuse_when(image id)`
    says its layers are not needed: pushed before, composer.publish.image_push); `tag` False leaves every tag
    alone (a rebuild that only compares). `record_reads`: the smoke test lists the files the server
    opens (an eStargz push's prefetch list, composer.verify.reads). `contents` (the probe's) sizes the parts for the disk check
    (composer.assembly.space), which `check_space` False skips. `builder` builds instead of the
    engine's own builder (BuildKit: composer.engine.buildkit); the engine still holds and runs it all.
    """
    run = uuid.uuid4().hex[:16]  # this build's hold on its image, its containers and record carry it
    engine_id = engine.identity()
    with contextlib.ExitStack() as held:
        # While it works, the run is on record (a run that dies leaves a record naming what it left,
        # which the next run removes), it holds the engine's build cache (no `cache clear` under it),
        # and its pruned base's use lock.
        held.enter_context(locks.run_record(run, engine_id))
        held.enter_context(locks.using_host(engine_id, records.CACHE_LOCK))
        remove_dead_runs(engine, on_line)
        key = composition_key(plan, {"full": plan.full.id or plan.full.ref, "min": plan.min.id or plan.min.ref,
                                     "backend_images": [f.image.id or f.image.ref for f in plan.foreign_backends],
                                     "epoch": plan.epoch, "labels": dict(labels or {}), "composer": __version__,
                                     "layers": layer_reuse.FORMAT})
        reusable = (lambda image_id: True) if layers_dir is None else reuse_when
        found = records.find(engine, key, run, reusable) if cache and reusable is not None else None
        try:
            if found is not None:
                image_id, sbom, assembled = found.image_id, found.sbom, None
                base = PrunedBase(**{**found.pruned_base, "made": False, "seconds": 0.0}) \
                    if found.pruned_base else None
                on_line(f"unchanged: {image_id[:19]}, composed before from the same inputs (key {key}), "
                        f"is on the engine; nothing to build")
            else:
                assembled, sbom, base = _build_and_assemble(engine, plan, context_dir, layers_dir, labels, on_line,
                                                            run, key, held, contents, check_space,
                                                            on_engine_line or on_line, cache, builder or engine)
                image_id = assembled.image_id
                on_line(f"composed {image_id[:19]} ({len(assembled.layers)} layers of its own on {assembled.base[:19]})")
                records.save(engine, key, image_id, sbom, _base_record(base))
            # Until it is tagged, the image is the run's: an interrupt (or a lost engine) takes the
            # run's hold away, and the image with it unless another run holds it. Every tag stays.
            try:
                sizes = measure(engine, image_id, plan, assembled.parts if assembled else (*plan.all_parts(), sbom_part()))
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
                report = _smoke(engine, plan, image_id, run, labels, cache and not smoke_always,
                                on_smoke_line or on_line, record_reads)
            if tag:
                engine.tag(image_id, plan.tag)
            info = engine.image(image_id)
        finally:
            records.release(engine, run)
        return BuildResult(plan, image_id, plan.tag if tag else None, info.size if info else 0, report, sizes, pruning,
                           sbom, base, assembled)


def _base_record(base: PrunedBase | None) -> dict | None:
    return None if base is None else {"image": base.image, "tag": base.tag, "key": base.key}


def _smoke(engine: Engine, plan: CompositionPlan, image_id: str, run: str, labels, reuse: bool,
           on_line: LineSink, record_reads: bool = False) -> SmokeReport:
    """The image's smoke test: a PASS recorded for the same image, models, cases and engine stands
    when `reuse` (the table says when it passed); else the server runs. A failure raises."""
    smoke = dataclasses.replace(SmokePlan.of(plan.all_backends, plan.server_version, plan.smoke, device=plan.device),
                    record_reads=record_reads)
    report = smoke_record.recorded(engine, image_id, smoke) if reuse else None
    if report is not None:
        on_line(f"smoke test: passed at {report.recorded_at} for this image, its models and cases on this engine "
                "(--smoke-test always serves them again)")
        return report
    report = smoke_test(engine, image_id, smoke, on_line=on_line, labels={**dict(labels or {}), RUN_LABEL: run})
    if not report.passed:
        failed = ", ".join(f"{r.subject}{'/' + r.model if r.model else ''}" for r in report.failures())
        raise SmokeTestFailed(f"smoke test failed ({failed}); {plan.tag} was not moved", report=report,
                              log_tail=report.log_tail)
    smoke_record.save(engine, image_id, smoke, report)
    return report


def _build_and_assemble(engine: Engine, plan: CompositionPlan, context_dir: Path | None, layers_dir: Path | None,
                        labels, on_line: LineSink, run: str, key: str, held: contextlib.ExitStack,
                        contents: FullImageContents | None, check_space: bool,
                        on_engine_line: LineSink, cache: bool,
                        builder: Builder) -> tuple[Assembled, str, PrunedBase | None]:
    """The engine's build (the pruned base first, when the plan has one), then the composer's image
    of it, loaded with the run's hold on it. The stages stay as build cache, named by `key`; what
    the run made that is its alone (a pruned base's stages, its containers) goes. A build the
    engine's disk cannot hold is refused first; one that fills it anyway ends in one line naming
    the disk."""
    workdir = locks.make_folder("context") if context_dir is None else context_dir
    layers = locks.make_folder("layers") if layers_dir is None else layers_dir
    redact = redactor(secrets_of(plan.packages))
    containers = {**dict(labels or {}), RUN_LABEL: run}  # what the run's containers carry
    base = assembled = None
    try:
        context: BuildContext = write_context(plan, workdir, key)
        on_line(f"build context: {context.directory} (run {run}: the stages it reads carry {STAGE_LABEL}=<stage> {key})")
        if check_space:
            to_make = context.pruned_base is not None and (not cache or not pruned_base_made(engine, plan,
                                                                                             context.pruned_base))
            on_line(space.check(engine, space.estimate(engine, plan, contents, context.directory, to_make)))
        # --no-cache on Docker's builder: the run's first build takes no step of the build cache, each
        # later one only the steps the run's builds made (`fresh`, their images), so the stages two of
        # its builds share (collect, decide: the pruned base's and the composition's; the composition's
        # in two, around the files) run once, not once per build.
        fresh: list[str] | None = [] if not cache and builder is engine and engine.takes_cache_from else None
        # A pruned base is a build of its own, made first (or found); its failure says so itself.
        if context.pruned_base:
            base = pruned_base(engine, plan, context.pruned_base, labels=labels, on_line=on_line, run=run, hold=held,
                               on_engine_line=on_engine_line, builder=builder, reuse=cache, steps=fresh)
        reuse = layers_dir is None and cache
        # (--no-cache elsewhere: one build, every step afresh)
        if (cache and (builder is not engine or engine.builds_on_files)) or fresh is not None:
            built, assembled = _build_on_files(engine, builder, plan, context, base, layers, key, run, labels,
                                               containers, redact, on_line, on_engine_line, cache, reuse, fresh)
        else:
            built = _build_composition(builder, plan, context, base, labels, redact, on_engine_line, cache,
                                       fresh=fresh)
            on_line(f"built {built[:19]}; writing the image's own layers")
            assembled = _assemble(engine, plan, built, base, context, layers, key, run, containers, on_line,
                                  reuse=reuse)
    except ComposerError as error:
        if space.no_space(error.message, getattr(error, "log_tail", "") or ""):
            where = builder.where() if builder is not engine and hasattr(builder, "where") else None
            raise space.disk_full(engine, plan.tag, where if where and error.message.startswith(
                f"the build failed on {where}") else None) from error
        raise
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise NoSpace(f"no space left on device writing {error.filename or tempfile.gettempdir()} on this "
                          f"machine; {plan.tag} was not moved: free some space and run again") from error
        raise
    finally:
        stopped = sys.exc_info()[0] is not None  # an interrupt or a failure on the way out
        try:
            with interrupts.holding():  # an interrupt that comes now waits for the cleanup to end
                try:
                    remove_run(engine, run)
                    remove_run_stages(engine, run)
                    if stopped:
                        _settle(engine, run)
                finally:  # this machine's folders go whatever the engine did (CI: a failed cleanup left them)
                    if context_dir is None:
                        locks.drop_folder(workdir)
                    if layers_dir is None:
                        locks.drop_folder(layers)
        except EngineUnavailable as lost:  # restarted or stopped under the build: nothing more to remove now
            raise EngineUnavailable(
                f"lost the engine {engine.where()} during the build (it stopped answering: restarted or stopped); "
                f"{plan.tag} was not moved; what this run left there is removed by the next build on that engine, "
                f"or by composer cache clear") from lost
        except BaseException:  # then the run's hold goes too, and the run's record stays for the next run
            locks.cleanup_unfinished(run)
            if assembled is not None:
                records.release(engine, run)
            raise
    assembled, sbom = assembled
    return assembled, sbom, base


def _build_on_files(engine: Engine, builder: Builder, plan: CompositionPlan, context: BuildContext,
                    base: PrunedBase | None, layers: Path, key: str, run: str, labels, containers, redact,
                    on_line: LineSink, on_engine_line: LineSink, cache: bool,
                    reuse: bool, fresh: list[str] | None = None) -> tuple[str, tuple[Assembled, str]]:
    """The build in two: first the stages the parts come from (collect, packages...); then, once
    the composer wrote the base and the parts the system stage runs over and loaded them as an image
    (handed to BuildKit as the engine's other images are), the stages that run over them (system,
    composed, the proof) FROM that image (ON_FILES_DOCKERFILE). The builder copies none of the parts
    (a backend's folder went through Docker's four times more: its COPY's hash, copy and commit); the
    composed image takes their layers as they are, loaded already. The built image's id, and the
    composed image with its SBOM. `fresh`: --no-cache's steps of the run (_build_composition)."""
    _build_composition(builder, plan, context, base, labels, redact, on_engine_line, cache, target=parts_stage(plan),
                       fresh=fresh)
    base_info = _base_info(engine, plan, base)
    first = plan.layer_parts()[0]
    on_line(f"writing the base's parts the system stage runs over ({len(first)} layers of the image's own)")
    found = _sources(engine, plan, context, key, base_info, base, first)
    files = assemble_files(engine, plan, base_info, found, layers, epoch=plan.epoch, run_labels=containers,
                           on_line=on_line, run=run, reuse=reuse)
    try:
        if builder is not engine:  # BuildKit: in the engine's OCI layout, its layers linked from their files
            oci_layout.add_written(engine, files.image_id, files.config, base_info.id,
                                   [(layer.diff_id, layer.path) for layer in files.layers], on_line)
        built = _build_composition(builder, plan, context, base, labels, redact, on_engine_line, cache,
                                   dockerfile=ON_FILES_DOCKERFILE, files=files.image_id, fresh=fresh)
        on_line(f"built {built[:19]} on them; writing the image's other layers")
        return built, _assemble(engine, plan, built, base, context, layers, key, run, containers, on_line,
                                reuse=reuse, files=files, stages=found.stages)
    finally:
        if files.hold:
            records.drop_hold(engine, files.hold)  # the composed image holds its layers now (or it failed)


def _base_info(engine: Engine, plan: CompositionPlan, base: PrunedBase | None):
    base_info = engine.image(base.image if base else (plan.min.id or plan.min.ref))
    if base_info is None:
        raise BuildFailed(f"the base image {base.image if base else plan.min.ref} is gone from the engine")
    return base_info


def _sources(engine: Engine, plan: CompositionPlan, context: BuildContext, key: str, base_info, base: PrunedBase | None,
             parts=None, known: Mapping[str, str] | None = None) -> Sources:
    """Where the files of `parts` (or of every part) are read from: the build's stages, found by
    their label (but those `known`, found earlier in the build); the full and foreign images;
    the build context."""
    stages = find_stages(engine, plan.read_stages(parts), key, tuple(base_info.layers) if base else (), known)
    foreign = {f.stage: f.image.id or f.image.ref for f in plan.foreign_backends}
    return Sources(stages, plan.full.id or plan.full.ref, foreign, context.directory)


def _assemble(engine: Engine, plan: CompositionPlan, built: str, base: PrunedBase | None, context: BuildContext,
              layers: Path, key: str, run: str, labels, on_line: LineSink, reuse: bool = False,
              files: Files | None = None, stages: Mapping[str, str] | None = None) -> tuple[Assembled, str]:
    """The composed image as the composer writes it, with its SBOM (made from what the engine's image
    holds) as its last layer, loaded with the run's hold on it. The engine's own image stays, as the
    stages it was made from do: build cache (its last step is labelled STAGE_LABEL "composed <key>").
    `files`: its first layers, written and loaded already (_build_on_files); `stages`: the stage
    images found for them."""
    facts = read_facts(engine, built, labels)
    document = make_sbom(plan, facts)
    on_line(f"SBOM: {len(facts.debs)} packages, {len(facts.python)} python packages, at {SBOM_PATH}")
    base_info = _base_info(engine, plan, base)
    sources = _sources(engine, plan, context, key, base_info, base, known=stages)
    assembled = loaded_whole_if_need_be(
        lambda reusing: assemble(engine, plan, built, base_info, sources, layers, epoch=plan.epoch,
                                 labels=version_labels(facts), extra=[(SBOM_PATH, "SBOM", document.encode())],
                                 run_labels=labels, on_line=on_line, run=run, reuse=reusing, files=files), reuse,
        on_line)
    return assembled, document


def loaded_whole_if_need_be(assemble_with: Callable[[bool], Assembled], reuse: bool, on_line: LineSink) -> Assembled:
    """The image assembled leaving out the layers the engine holds (`reuse`); once more with every
    layer written when the engine lost one of those meanwhile (another run's cleanup removed the
    only image holding it, between the check and the load: its load names the missing layer.tar)."""
    try:
        return assemble_with(reuse)
    except BuildFailed as error:
        if not reuse or not lost_layer(error.message):
            raise
    on_line("note: a layer the engine held went while the image loaded (another run removed it): loading it whole")
    return assemble_with(False)


def _settle(engine: Engine, run: str, quiet_for: float = 3, at_most: float = 20) -> None:
    """After a build that stopped on the way (its connection closed), the engine may still commit a
    step it had started before it notices: remove what of the run appears until none has for
    `quiet_for` seconds (at most `at_most`)."""
    deadline = time.monotonic() + at_most
    calm_since = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - calm_since < quiet_for:
        time.sleep(0.5)
        if remove_run(engine, run)[0] + remove_run_stages(engine, run):
            calm_since = time.monotonic()


def _build_composition(builder: Builder, plan: CompositionPlan, context: BuildContext, base: PrunedBase | None,
                       labels, redact, on_line: LineSink, cache: bool, *, target: str | None = None,
                       dockerfile: str = "Dockerfile", files: str | None = None, fresh: list[str] | None = None) -> str:
    """Build the composition's Dockerfile (on `base` when pruned; to `target`; `dockerfile` on the
    image `files` of the base and the first parts); a failed proof or pip install becomes its one
    line. `cache` False: no step of the build cache but those under `fresh` (the images of the steps
    this run's earlier builds made, to which this build's are added)."""
    arguments = {"SOURCE_DATE_EPOCH": str(plan.epoch)}
    if base:
        arguments["PRUNED_BASE"] = base.image
    if files:
        arguments["COMPOSED_FILES"] = files
    try:
        return builder.build(
            context.directory,
            dockerfile=dockerfile,
            network_mode="none",  # everything comes from the images and the context
            labels=labels,
            buildargs=arguments,
            redact=redact,
            on_line=on_line,
            nocache=not cache and not fresh,
            **({"target": target} if target else {}),
            **({"cache_from": tuple(dict.fromkeys(fresh))} if not cache and fresh else {}),
            **({"steps": fresh} if fresh is not None else {}),
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
    registry_auth: Any = None  # composer.registry.credentials.RegistryAuth, for pushes and registry reads
    labels: Mapping[str, str] | None = None  # marks what the run leaves on the engine (tests)
    on_line: LineSink = quiet  # progress
    on_build_line: LineSink | None = None  # build output
    on_plan: Any = None  # called with each plan before its build (the CLI shows notes)
    # The signing keys the preflight loaded (composer.app.preflight), by spec name: nothing here reads a secret.
    sign_keys: Mapping[str, SigningKey] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What became of one spec: its result, where it was pushed, or the error that stopped it."""

    spec: CompositionSpec
    result: BuildResult | None = None
    pushed: "Published | None" = None  # where it went, and its SBOM, provenance and signature
    error: ComposerError | None = None
    builder: str | None = None  # which builder built it, when the run had several

    @property
    def tag(self) -> str:
        return self.result.tag if self.result else (self.spec.result.tag or self.spec.name)

    def to_dict(self) -> dict:
        payload: dict[str, Any] = {"name": self.spec.name}
        if self.builder is not None:
            payload["builder"] = self.builder
        if self.result is not None:
            payload.update(self.result.to_dict())
        if self.pushed is not None:
            payload["pushed"] = self.pushed.to_dict()
        if self.error is not None:
            payload["error"] = redact(self.error.message)
            report = getattr(self.error, "report", None)
            if report is not None and not payload.get("smoke_test"):
                payload["smoke_test"] = report.to_dict()  # a failed smoke test's rows, as --junit has them
        return payload


def compose(
    engine: Engine, spec: CompositionSpec, catalog: Catalog, run: Run = Run(), *,
    inspection: Inspection | None = None, builder: str | None = None,
) -> Outcome:
    """Plan, build, smoke-test, tag and (if asked) push one image; errors propagate.

    `inspection` is given for a bundle: plan from what it recorded, not by asking registries.
    `builder` is which of the spec's builders builds it (its first by default).
    """
    builder = builder or spec.result.builders[0]
    if inspection is not None:
        return _build_and_push(engine, resolve_recorded(spec, catalog, inspection, run.on_line), run, builder)
    targets = resolve_targets(spec, catalog, engine)
    if run.locked:
        registries = Registries(engine, run.registry_auth, spec.images.registry_ca,
                                retry_policy(spec.images, run.on_line))
        targets = verify_lock(engine, spec, targets, run.on_line, registries=registries)
    with locks.temporary_folder("wheels") as wheels:
        resolved = resolve(engine, spec, catalog, wheels=Path(wheels), on_line=run.on_line, targets=targets)
        return _build_and_push(engine, resolved, run, builder)


def _build_and_push(engine: Engine, resolved: Resolved, run: Run, builder: str) -> Outcome:
    spec, plan = resolved.spec, resolved.plan
    result = spec.result
    # The signing key was read (and refused, if it is not one) by the preflight, before any work.
    key = run.sign_keys.get(spec.name)
    if result.sign_key and key is None:
        raise UsageError(f"{spec.name}: --sign-key was not loaded before the work (a bug: the preflight loads it)")
    if run.on_plan is not None:
        run.on_plan(plan)
    started = now()
    mine = bool(result.push) and result.push_via == "composer"
    with contextlib.ExitStack() as stack:
        # The image's own layers stay on this machine until the composer pushed them.
        layers = Path(stack.enter_context(locks.temporary_folder("layers"))) if mine else None
        compression = result.layer_compression
        # An eStargz push puts first what the smoke test saw the server open: the push is kept by
        # that list too, known only once the smoke test ran, so the image's layers are written.
        record_reads = mine and compression == "estargz"
        options = dict(labels=dict(run.labels or {}), on_line=run.on_line, on_engine_line=run.on_build_line or run.on_line,
                       on_smoke_line=run.on_line, contents=resolved.contents, check_space=result.space_check,
                       smoke_always=result.smoke_mode == "always", record_reads=record_reads,
                       builder=BuildKit(builder, engine, result.builder_cache, result.builder_tls)
                       if builder != "engine" else None)
        built = build_image(engine, plan, layers_dir=layers, cache=result.cache, **options,
                            reuse_when=lambda image_id: not record_reads and pushed_before(image_id, compression,
                                                                                           result.push))
        if result.sbom and built.sbom:
            try:  # checked before any work; checked again, as something may have taken the name since
                write_file(check_output_file(result.sbom, "--sbom", is_sbom), built.sbom.encode())
            except Invalid as problem:
                return Outcome(spec, built, None, UsageError(str(problem)))
            run.on_line(f"SBOM written to {result.sbom}")
        if not result.push:
            return Outcome(spec, built)
        registries = Registries(engine, run.registry_auth, spec.images.registry_ca,
                                retry_policy(spec.images, run.on_line))
        try:
            if mine:
                prefetch = _prefetch(built, run.on_line) if record_reads else ()
                kept = kept_as(compression, prefetch)
                again = None if built.assembled and not record_reads else push_again(built.image_id, kept, result.push,
                                                                                   registries, run.on_line)
                if again is None and built.assembled is None:  # the registry lost a blob: the layers again
                    built = build_image(engine, plan, layers_dir=layers, cache=result.cache, **options)
                if again is None:
                    folder = Path(stack.enter_context(locks.temporary_folder("blobs")))
                    origin = plan.min.in_its_registry if built.assembled.base == plan.min.id else None
                    again = push_assembled(engine, built.assembled, result.push, registries, compression=compression,
                                           folder=folder, origin=origin, prefetch=prefetch, on_line=run.on_line)
                    record_push(built.image_id, kept, again)
                digest = again.digest
            else:
                run.on_line(f"pushing {result.push} through the engine")
                digest = push_image(engine, built.tag, result.push, auth=run.registry_auth, on_line=run.on_line,
                                    retries=spec.images.registry_tries - 1, backoff=spec.images.registry_backoff)
        except ComposerError as error:  # the image was built, tagged and smoke-tested: keep that in the outcome
            return Outcome(spec, built, None, error)
    run.on_line(f"pushed {result.push}@{digest}")
    pushed = Published(result.push, digest)
    try:
        pushed = _attach(engine, spec, plan, run, built, pushed, key, registries, started)
    except ComposerError as error:  # the image is pushed: say so, and what of its attachments is not
        return Outcome(spec, built, pushed, error)
    return Outcome(spec, built, pushed)


def _prefetch(built: BuildResult, on_line: LineSink) -> tuple[str, ...]:
    """The files an eStargz push puts first: those the smoke test saw the server open."""
    report = built.smoke
    if report is None:
        on_line("eStargz: no prefetch list, as the smoke test did not run (a node fetches each file on first read)")
        return ()
    if not report.reads:
        on_line(f"eStargz: no prefetch list ({report.reads_note or 'the server opened no file of the image'})")
        return ()
    on_line(f"eStargz: the {len(report.reads)} file(s) the server opened up to its last checked answer go first in "
            "their layers (a lazily pulling node fetches them before the container starts)")
    return report.reads


@dataclass(frozen=True)
class Published:
    """Where a push put the image, and what it put beside it."""

    ref: str
    digest: str
    sbom: str | None = None
    provenance: str | None = None
    signature: str | None = None

    def to_dict(self) -> dict:
        return {"ref": self.ref, "digest": self.digest, "sbom": self.sbom, "provenance": self.provenance,
                "signature": self.signature}


def _attach(engine: Engine, spec: CompositionSpec, plan: CompositionPlan, run: Run, built: BuildResult,
            pushed: Published, key: SigningKey | None, registries: Registries, started: str) -> Published:
    """Beside the pushed image: its SBOM, its provenance (signed when a key is given) and its signature."""
    target = ImageRef.parse(pushed.ref)
    api = registries.client(target.host)
    if built.sbom:
        where = push_sbom(api, target.repository, pushed.digest, built.sbom)
        run.on_line(f"pushed its SBOM as {where}")
        pushed = dataclasses.replace(pushed, sbom=where)
    compression = spec.result.layer_compression if spec.result.push_via == "composer" else "engine's"
    made = Made(started, now(), uuid.uuid4().hex, compression, compressor_id(compression)
                if spec.result.push_via == "composer" else "the engine's", image_id=built.image_id, sbom=pushed.sbom)
    subject = f"{target.host}/{target.repository}"
    document = statement(spec, plan, subject, pushed.digest, made)
    where = push_attestation(api, target.repository, pushed.digest, document, SLSA_PROVENANCE, key)
    run.on_line(f"pushed its provenance{' (signed)' if key else ''} as {where}")
    pushed = dataclasses.replace(pushed, provenance=where)
    if key is not None:
        where = push_signature(api, target.repository, pushed.digest, str(target), key)
        run.on_line(f"pushed its signature as {where}")
        pushed = dataclasses.replace(pushed, signature=where)
    return pushed


def compose_all(engine: Engine, specs: Sequence[CompositionSpec], catalog: Catalog, run: Run = Run(),
                inspection: Inspection | None = None) -> list[Outcome]:
    """compose() each spec; a failure is kept in its outcome and the next one goes on.

    Images of one run share their common layers through the engine's build cache. With one
    builder the specs go in turn; with several (--builder given more than once), each builder takes
    the next spec it may build when it is free (composer.core.workers), its lines marked with the
    spec's name. A builder that fails a spec and no longer answers takes no more.
    """
    builders = list(dict.fromkeys(b for spec in specs for b in spec.result.builders))
    if len(builders) <= 1:
        outcomes = []
        for spec in specs:
            if len(specs) > 1:
                run.on_line(f"== {spec.name} ==")
            outcomes.append(_one(engine, spec, catalog, run, inspection, None))
        return outcomes

    def work(builder: str, spec: CompositionSpec) -> Outcome:
        run.on_line(f"== {spec.name} on {_builder_name(builder)} ==")
        mark = _marked(spec.name)
        marked = dataclasses.replace(run, on_line=mark(run.on_line),
                                     on_build_line=mark(run.on_build_line) if run.on_build_line else None)
        return dataclasses.replace(_one(engine, spec, catalog, marked, inspection, builder), builder=builder)

    def answers(builder: str) -> bool:
        tls = next(s.result.builder_tls for s in specs if builder in s.result.builders)
        return builder == "engine" or BuildKit(builder, engine, tls=tls).answers()

    def orphaned(spec: CompositionSpec, gone: list[str]) -> Outcome:
        names = ", ".join(_builder_name(b) for b in gone if b in spec.result.builders)
        return Outcome(spec, error=EngineUnavailable(f"{spec.name}: not built: its builder(s) {names} stopped "
                                                     "answering"))

    shared = Shared(specs, builders, may=lambda builder, spec: builder in spec.result.builders, work=work,
                    failed=lambda outcome: outcome.error is not None, answers=answers, orphaned=orphaned,
                    on_gone=lambda b: run.on_line(f"{_builder_name(b)} stopped answering: it takes no more sets"))
    return shared.run()


def _one(engine: Engine, spec: CompositionSpec, catalog: Catalog, run: Run, inspection: Inspection | None,
         builder: str | None) -> Outcome:
    try:
        return compose(engine, spec, catalog, run, inspection=inspection, builder=builder)
    except ComposerError as error:
        return Outcome(spec, error=error)


def _builder_name(builder: str) -> str:
    return "the engine's builder" if builder == "engine" else builder


def _marked(name: str):
    """A progress sink whose lines start with the spec's name (several builders at work at once)."""
    return lambda sink: (lambda line: sink(f"[{name}] {line}"))


def compose_bundle(engine: Engine, read: ReadBundle, spec: CompositionSpec, catalog: Catalog, run: Run) -> list[Outcome]:
    """Load the bundle's images and compose `spec`: the bundle's own, checked with the result
    options given (composer.config.rules.validate, as for every build)."""
    inspection = open_bundle(engine, read, on_line=run.on_line)
    return compose_all(engine, [spec], catalog, run, inspection)
