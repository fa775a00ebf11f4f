"""The commands that compose images: build, render, bundle, wheels, lock, backends.

Each takes the options as the CLI read them, runs the preflight (composer.app.preflight) before
any work, then the pipeline, and returns a Result; nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from composer.app import preflight
from composer.app.results import Result
from composer.catalog.catalog import Catalog
from composer.config.options import BACKENDS, BUILD, BUNDLE, RENDER, WHEELS
from composer.config.rules import one_tag_for_several_sets, validate
from composer.config.sets import specs_from_sets
from composer.config.types import CompositionSpec, Providers
from composer.config.values import check_environment
from composer.core.errors import ComposerError, UsageError
from composer.core.progress import LineSink, quiet
from composer.core.redaction import redact
from composer.core.units import human_size
from composer.engine.interface import Engine
from composer.pipeline import Outcome, Run, compose_all, compose_bundle
from composer.publish.junit import check_junit_output, outcome_entries, write_junit
from composer.registry.client import Registries
from composer.render.render import check_output, write_context
from composer.resolve.packages import python_target
from composer.resolve.resolve import (fetch_model_env_wheels, fetch_wheels, inspect_images, probe, require_full,
                                      resolve, resolve_for_render, resolve_targets)
from composer.sources.bundle import check_bundle_output, check_overrides, unpacked, write_bundle
from composer.sources.lock import check_lock_output, check_locked, lock_spec


@dataclass(frozen=True)
class Progress:
    """Where a command's progress goes (the CLI's printer; quiet in tests)."""

    on_line: LineSink = quiet
    on_build_line: LineSink | None = None
    on_plan: Callable[[Any], None] | None = None


def specs_of(command: str, set_files: Sequence[str], given: dict[str, Any], **run: bool) -> list[CompositionSpec]:
    """The specs of a run: one per set (flags in place of the set's values), or the flags alone;
    every rule about the input checked (composer.config.rules), before any work."""
    one_tag_for_several_sets(len(set_files), set(given))
    specs = specs_from_sets(list(set_files), given) if set_files else [CompositionSpec().with_fields(given)]
    return [validate(spec, command, sets=len(set_files), **run) for spec in specs]


def one_spec(command: str, set_files: Sequence[str], given: dict[str, Any], **run: bool) -> CompositionSpec:
    if len(set_files) > 1:
        raise UsageError(f"composer {command} takes one --set")
    return specs_of(command, set_files, given, **run)[0]


# -- build ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildOptions:
    given: dict = field(default_factory=dict)
    set_files: tuple[str, ...] = ()
    registry_auth: str | None = None
    locked: bool = False
    junit: Path | None = None
    bundle: Path | None = None
    explain: bool = False


def build(options: BuildOptions, engine: Callable[[], Engine], progress: Progress = Progress()) -> Result:
    """Compose, build, smoke-test, tag and push each set: the preflight first (every input, every
    secret, the engine, the push targets), then the work."""
    catalog = Catalog.load()
    junit = check_junit_output(options.junit) if options.junit is not None else None
    check_environment(os.environ)
    if options.bundle is not None:
        check_overrides(options.given, set_files=list(options.set_files), locked=options.locked)
    with contextlib.ExitStack() as stack:
        read = stack.enter_context(unpacked(options.bundle)) if options.bundle is not None else None
        # One check for every path: a bundle's spec (with the result flags given) as the flags' or a set's.
        specs = ([validate(read.spec().with_fields(options.given), BUILD, explain=options.explain)] if read
                 else specs_of(BUILD, options.set_files, options.given, explain=options.explain))
        if options.locked:
            check_locked(specs)
        secrets = preflight.load_secrets(options.registry_auth, specs)
        connected = preflight.connect(engine)
        preflight.check_builders(connected, specs)
        preflight.check_push_targets(connected, specs, secrets, progress.on_line)
        run = Run(locked=options.locked, registry_auth=secrets.registry_auth, on_line=progress.on_line,
                  on_build_line=progress.on_build_line, on_plan=progress.on_plan, sign_keys=secrets.sign_keys)
        if read is not None:
            outcomes = compose_bundle(connected, read, specs[0], catalog, run)
        else:
            outcomes = compose_all(connected, specs, catalog, run)
    if junit is not None:
        write_junit(outcome_entries(outcomes), junit)
    return built_result(outcomes, options.explain)


def built_result(outcomes: Sequence[Outcome], explain: bool = False) -> Result:
    """The outcomes as one Result: an entry per image (its status), the text the CLI prints, and
    the error the command fails with (a single image's own, or how many of several failed)."""
    images = [{**o.to_dict(), "status": _status(o)} for o in outcomes]
    failed = [o for o in outcomes if o.error is not None]
    summary = {"images": len(outcomes), "failed": len(failed), "passed": len(outcomes) - len(failed)}
    error = None
    if len(outcomes) == 1 and failed:
        error = failed[0].error
    elif failed:
        error = ComposerError(f"{len(failed)} of {len(outcomes)} images failed: "
                              f"{', '.join(o.spec.name for o in failed)}")
    parts = [_describe(o, explain) for o in outcomes]
    return Result(BUILD, images, summary, "\n\n".join(parts), error, outcomes=list(outcomes), parts=parts)


def _status(outcome: Outcome) -> str:
    if outcome.error is None:
        return "pushed" if outcome.pushed else "built"
    if outcome.pushed is not None:
        return "pushed, attachments failed"
    return "built, push failed" if outcome.result is not None and outcome.result.tag else "failed"


def _describe(outcome: Outcome, explain: bool) -> str:
    """An image's lines after its smoke table (which the CLI draws: colours are the terminal's)."""
    result = outcome.result
    if result is None:
        return f"{outcome.spec.name}: FAILED: {redact(outcome.error.message)}"
    lines = []
    if outcome.error is not None:
        lines.append(f"{outcome.spec.name}: FAILED: {redact(outcome.error.message)}")
    if explain and result.pruning:
        lines.append(result.pruning.explain())
    if result.pruned_base:
        base = result.pruned_base
        lines.append(f"pruned base {base.tag}: " + (f"made in {base.seconds:.0f} s; later builds of this selection "
                     "on this min image reuse it" if base.made else "reused (made by an earlier build)"))
    if result.sizes:
        lines.append(result.sizes.table())
    lines.append(f"{result.tag}  {result.image_id[:19]}  {human_size(result.size)}"
                 + (f"  (built by {outcome.builder})" if outcome.builder else ""))
    if outcome.pushed:
        lines.append(f"pushed {outcome.pushed.ref}@{outcome.pushed.digest}")
        for kind in ("sbom", "provenance", "signature"):
            if getattr(outcome.pushed, kind):
                lines.append(f"  its {kind}: {getattr(outcome.pushed, kind)}")
    return "\n".join(lines)


# -- render, bundle, wheels, lock, backends -----------------------------------------------------


def render(given: dict, set_files: Sequence[str], output: Path, offline: bool,
           engine: Callable[[], Engine], progress: Progress = Progress()) -> Result:
    """The Dockerfile and build context only (no build)."""
    catalog = Catalog.load()
    spec = one_spec(RENDER, set_files, given, offline=offline)
    check_output(output)  # before any work
    check_environment(os.environ)
    with tempfile.TemporaryDirectory(prefix="triton-composer-wheels-") as wheels:
        plan = resolve_for_render(None if offline else engine, spec, catalog, wheels=Path(wheels),
                                  on_line=progress.on_line).plan
        for note in plan.notes:
            progress.on_line(f"note: {note}")
        context = write_context(plan, output)
    how = f"docker build -t {plan.tag} {context.directory}"
    if context.pruned_base:  # the base first, then the image on it
        how = (f"docker build -t pruned-base {context.pruned_base} && "
               f"docker build --build-arg PRUNED_BASE=pruned-base -t {plan.tag} {context.directory}")
    image = {"status": "rendered", "dockerfile": str(context.dockerfile), "context": str(context.directory),
             "tag": plan.tag, "pruned_base_context": str(context.pruned_base) if context.pruned_base else None,
             "composition": plan.record()}
    return Result(RENDER, [image], {"images": 1}, f"wrote {context.dockerfile} (build with: {how})")


def bundle(given: dict, set_files: Sequence[str], output: Path, engine: Callable[[], Engine],
           progress: Progress = Progress()) -> Result:
    """One archive with everything a build needs, for a machine that reaches no registry."""
    catalog = Catalog.load()
    spec = one_spec(BUNDLE, set_files, given)
    output = check_bundle_output(output)
    check_environment(os.environ)
    connected = preflight.connect(engine)
    with tempfile.TemporaryDirectory(prefix="triton-composer-wheels-") as wheels:
        resolved = resolve(connected, spec, catalog, wheels=Path(wheels), on_line=progress.on_line)
        path = write_bundle(connected, resolved, output, on_line=progress.on_line)
    plan = resolved.plan
    size = path.stat().st_size
    image = {"status": "bundled", "tag": plan.tag, "backends": list(plan.all_backends)}
    return Result(BUNDLE, [image], {"images": 1, "bundle": str(path), "size": size},
                  f"wrote {path} ({human_size(size)}); on the other side: composer build --bundle {path.name}",
                  extra={"bundle": str(path), "size": size})


def wheels(given: dict, set_files: Sequence[str], output: Path, engine: Callable[[], Engine],
           progress: Progress = Progress()) -> Result:
    """The wheels a build's packages need, downloaded on this machine, so the build runs offline."""
    catalog = Catalog.load()
    if not set_files and "selection.backends" not in given:
        given = {**given, "selection.backends": ("python",)}
    spec = one_spec(WHEELS, set_files, given)
    if not spec.packages and not (spec.selection.model_envs or spec.selection.bake_models):
        raise UsageError("name the packages with --pip SPEC or --requirements FILE (or models with --model-env "
                         "MODEL=REQUIREMENTS or --bake-models DIR)")
    preflight.check_writable_folder(output, "-o")
    connected = preflight.connect(engine)
    targets = resolve_targets(spec, catalog, connected)
    contents = inspect_images(connected, targets, progress.on_line).contents
    target = python_target(contents)
    files = fetch_wheels(target, spec.packages, targets.release, output, progress.on_line) if spec.packages else []
    files = sorted(set(files) | set(fetch_model_env_wheels(spec, targets.release, contents, output,
                                                           progress.on_line)))
    names = [f.name for f in files]
    return Result(WHEELS, [], {"wheels": len(names)}, f"{len(files)} wheels in {output} (build with --wheelhouse "
                  f"{output})", extra={"wheelhouse": str(output), "python": target.version,
                                       "platform": target.platform, "wheels": names})


def lock(set_files: Sequence[str], registry_auth: str | None, engine: Callable[[], Engine],
         progress: Progress = Progress()) -> Result:
    """Each set's base images resolved to digests, in a lock file beside the set."""
    catalog = Catalog.load()
    specs = specs_of(BUILD, set_files, {})
    for spec in specs:
        check_lock_output(spec.source)
    secrets = preflight.load_secrets(registry_auth)
    connected = preflight.connect(engine)
    locks = [lock_spec(connected, spec, resolve_targets(spec, catalog, connected), progress.on_line,
                       registries=Registries(connected, secrets.registry_auth, spec.images.registry_ca))
             for spec in specs]
    records = [{"path": str(l.path), "images": [i.record() for i in l.images]} for l in locks]
    return Result("lock", [{"status": "locked", **r} for r in records], {"locks": len(records)},
                  "\n".join(f"wrote {l.path}: " + ", ".join(f"{i.role} {i.digest[:19]}" for i in l.images)
                            for l in locks), extra={"locks": records})


def backends(given: dict, engine: Callable[[], Engine], progress: Progress = Progress()) -> Result:
    """What a full image offers (backends, repo agents, caches) with their sizes."""
    catalog = Catalog.load()
    spec = validate(CompositionSpec().with_fields(given), BACKENDS)
    connected = preflight.connect(engine)
    targets = resolve_targets(spec, catalog, connected)
    require_full(connected, targets, progress.on_line)
    full_ref, contents = targets.full, probe(connected, targets.full, progress.on_line)
    rows = [("KIND", "NAME", "SIZE", "NOTE")]
    components = []
    for c in contents.components:
        need_bytes = sum(n.size for n in c.needs)
        note = "python-based" if c.python_based else ""
        providers = tuple(p for p in c.providers if p != Providers.SHARED)
        if providers:  # ONNX Runtime's execution providers, for --ort-provider
            note = f"providers: {', '.join(Providers.listing(providers))} (--ort-provider)"
        rows.append((c.kind, c.name, human_size(c.size), note))
        components.append({"kind": c.kind, "name": c.name, "size": c.size, "python_based": c.python_based,
                           "needs_bytes": need_bytes,
                           **({"ort_providers": Providers.listing(providers)} if providers else {})})
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    table = "\n".join(f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].rjust(widths[2])}  {r[3]}"
                      for r in rows)
    image = {"status": "probed", "image": full_ref, "core_size": contents.core_size}
    return Result(BACKENDS, [image], {"components": len(components)},
                  f"{full_ref}: core {human_size(contents.core_size)}\n{table}",
                  extra={"image": full_ref, "core_size": contents.core_size, "components": components})
