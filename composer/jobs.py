"""Jobs: one composed image each, from the command line or from a backend set, and what happens
to it after the build (lock checks before, push after).

The CLI turns its flags and --set files into Jobs and runs them one after another; images of
one run share their common layers through the engine's build cache.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from composer.catalog import Catalog
from composer.engine import Engine, ImageInfo
from composer.errors import ComposerError, ImageNotFound, UsageError
from composer.lock import LockFile, check_current, digest_of, locked_image, pinned_ref, read_lock, write_lock
from composer.pipeline import (
    BuildResult,
    Inspection,
    base_refs,
    build_image,
    check_packages,
    plan_from_engine,
    plan_from_inspection,
)
from composer.plan import BuildOptions
from composer.sets import load_set, override, preset_path
from composer.progress import LineSink, quiet




@dataclass(frozen=True)
class Job:
    """One image to compose, and what to do with it."""

    name: str
    options: BuildOptions
    smoke_test: bool = True
    model_repository: Path | None = None
    push: str | None = None
    set_path: Path | None = None
    # Set for a job from a bundle: plan from what the bundle recorded, not by asking registries.
    inspection: Inspection | None = None


@dataclass(frozen=True)
class Outcome:
    job: Job
    result: BuildResult | None = None
    pushed: tuple[str, str] | None = None  # (ref, digest)
    error: ComposerError | None = None

    def to_dict(self) -> dict:
        payload: dict[str, Any] = {"name": self.job.name}
        if self.result is not None:
            payload.update(self.result.to_dict())
        if self.pushed is not None:
            payload["pushed"] = {"ref": self.pushed[0], "digest": self.pushed[1]}
        if self.error is not None:
            payload["error"] = self.error.message
        return payload


def jobs_from_sets(names: Sequence[str], overrides: Mapping[str, Any]) -> list[Job]:
    """A job per set file (or shipped preset), command-line values in place of the set's."""
    jobs = []
    for name in names:
        backend_set = override(load_set(preset_path(name)), **overrides)
        jobs.append(
            Job(
                name=backend_set.name,
                options=backend_set.options,
                smoke_test=backend_set.smoke_test,
                model_repository=backend_set.model_repository,
                push=backend_set.push,
                set_path=backend_set.path,
            )
        )
    return jobs


def current_image(engine: Engine, ref: str, on_line: LineSink = quiet) -> ImageInfo:
    """What `ref` names now: pulled afresh when its registry answers, else the local image."""
    try:
        return engine.pull(ref, on_line=on_line)
    except ImageNotFound:
        info = engine.image(ref)
        if info is None:
            raise
        return info


def _roles(engine: Engine, options: BuildOptions, catalog: Catalog) -> list[tuple[str, str]]:
    full_ref, min_ref = base_refs(options, catalog, engine)
    return [("full", full_ref), ("min", min_ref)] + [(f"backend:{n}", r) for n, r in options.backend_images]


def lock_job(engine: Engine, job: Job, catalog: Catalog, on_line: LineSink = quiet) -> LockFile:
    """Resolve the job's base images to digests into the lock file beside its set."""
    if job.set_path is None:
        raise UsageError("composer lock works on backend sets: give --set FILE")
    images = []
    for role, ref in _roles(engine, job.options, catalog):
        on_line(f"resolving {ref}")
        images.append(locked_image(role, current_image(engine, ref, on_line)))
    return write_lock(job.set_path, images)


def verify_lock(engine: Engine, job: Job, catalog: Catalog, on_line: LineSink = quiet) -> Job:
    """Refuse to build if a base image tag has moved since the lock was written; else the job
    with its base images pinned to the locked digests (so a stale local copy is never used)."""
    if job.set_path is None:
        raise UsageError("--locked needs a backend set (--set FILE) with a lock file beside it")
    lock = read_lock(job.set_path)
    current = {}
    for role, ref in _roles(engine, job.options, catalog):
        locked = lock.image(role)
        if locked is not None and locked.ref != ref:
            raise UsageError(
                f"{job.set_path.name}: the lock pins {locked.ref} but the build uses {ref}: "
                f"run composer lock --set {job.set_path}"
            )
        current[role] = _digest_now(engine, ref, locked)
    check_current(lock, current)
    on_line(f"lock {lock.path.name}: every base image is where it was locked")
    pinned = {image.role: pinned_ref(image) for image in lock.images}
    options = dataclasses.replace(
        job.options,
        full_image=pinned["full"],
        min_image=pinned["min"],
        backend_images=tuple((name, pinned[f"backend:{name}"]) for name, _ in job.options.backend_images),
    )
    return dataclasses.replace(job, options=options)


def _digest_now(engine: Engine, ref: str, locked) -> str:
    """Where `ref` points now: its registry's answer (no pull), else the local image."""
    if locked is not None and locked.local:
        info = engine.image(ref)
        return info.id if info else "nothing"
    digest = engine.registry_digest(ref)
    if digest is not None:
        return digest
    info = engine.image(ref)
    if info is None:
        raise ImageNotFound(f"{ref}: neither its registry nor the engine has it")
    return digest_of(info)


def run_job(
    engine: Engine,
    job: Job,
    catalog: Catalog,
    *,
    locked: bool = False,
    push: Callable[[str, str], str] | None = None,
    labels: Mapping[str, str] | None = None,
    on_line: LineSink = quiet,
    on_build_line: LineSink | None = None,
    on_plan: Callable[[Any], None] | None = None,
) -> Outcome:
    """Plan, build, smoke-test, tag and (if asked) push one image; errors propagate.

    `push(image_ref, target_ref) -> digest` runs only after the smoke test passed.
    """
    if locked:
        job = verify_lock(engine, job, catalog, on_line)
    if job.inspection is not None:
        plan = plan_from_inspection(job.options, catalog, job.inspection, pin=False)
        check_packages(engine, plan, job.inspection.contents, on_line)
    else:
        plan, _ = plan_from_engine(engine, job.options, catalog, on_line=on_line)
    if on_plan is not None:
        on_plan(plan)
    result = build_image(
        engine,
        plan,
        smoke=job.smoke_test,
        model_repository=job.model_repository,
        labels=dict(labels or {}),
        on_line=on_build_line or on_line,
        on_smoke_line=on_line,
    )
    pushed = None
    if job.push and push is not None:
        pushed = (job.push, push(result.tag, job.push))
    return Outcome(job, result, pushed)


def junit_entries(outcomes: Sequence[Outcome]) -> list[tuple]:
    """Outcomes as composer.junit.write_junit takes them: a failed build is a failing case."""
    entries: list[tuple] = []
    for outcome in outcomes:
        tag = outcome.result.tag if outcome.result else (outcome.job.options.tag or outcome.job.name)
        report = outcome.result.smoke if outcome.result else getattr(outcome.error, "report", None)
        if report is not None:
            entries.append((tag, report))
        elif outcome.error is not None:
            entries.append((tag, None, outcome.error.message))
        # built with --no-smoke-test: nothing to report
    return entries
