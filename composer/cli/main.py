"""The `composer` command: parse options, call the pipeline, print. Nothing else lives here.

Progress goes to stderr so that `--json` output on stdout stays machine-readable; every
ComposerError becomes one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from composer import __version__
from composer.cli.output import PHASES, Printer, smoke_table
from composer.core import interrupts
from composer.core.errors import BuildFailed, ComposerError, Invalid, SmokeTestFailed, UsageError
from composer.core.files import check_output_file, printable
from composer.core.platforms import Platform
from composer.core.redaction import redact
from composer.core.docker_config import HostDockerConfig
from composer.core.refs import is_image_id
from composer.core.units import human_size
from composer.engine.engine import Engine
from composer.pipeline import compose_all, compose_bundle, rebuild, Run
from composer.publish.verify import VerificationFailed, verify as check_image
from composer.sources.bundle import check_bundle_output, check_overrides, unpacked, write_bundle
from composer.publish.inspect import Difference, inspect as inspect_image
from composer.publish.junit import check_junit_output, outcome_entries, write_junit
from composer.sources.lock import check_lock_output, check_locked, lock_spec
from composer.sources.mirror import mirror_release, mirror_through_engine
from composer.registry.client import load_auth, Registries, retry_policy
from composer.render.render import check_output, write_context
from composer.resolve.packages import python_target
from composer.resolve.resolve import (
    fetch_model_env_wheels,
    fetch_wheels,
    inspect_images,
    probe,
    require_full,
    resolve,
    resolve_for_render,
    resolve_targets,
)
from composer.catalog.catalog import Catalog
from composer.config.sets import specs_from_sets
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import image_smoke_plan
from composer.config.options import (
    BACKENDS,
    BUILD,
    BUNDLE,
    INSPECT,
    MIRROR,
    Option,
    RENDER,
    SMOKE,
    VERIFY,
    WHEELS,
    flags_for,
    given_on_command_line,
)
from composer.config.rules import one_tag_for_several_sets, validate
from composer.config.types import Providers
from composer.config.types import CompositionSpec
from composer.config.values import Flag, LocalPath, RequirementFiles, check_environment, check_reference

try:  # the command-line library under typer: vendored by newer typers, click itself before
    from typer._click import exceptions as _cli_errors
except ImportError:  # pragma: no cover
    import click.exceptions as _cli_errors

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compose slim Triton Inference Server images and prove they serve.",
    pretty_exceptions_enable=False,
)


def reports_errors(command):
    """Turn every failure of a command into one line and an exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        PHASES.set("starting")
        try:
            with interrupts.handling(PHASES):  # SIGINT, SIGTERM: the cleanup runs, then one line
                return command(*args, **kwargs)
        except interrupts.Interrupted as stop:
            _interrupted(stop, kwargs.get("as_json"))
        except ComposerError as error:
            if isinstance(error, BuildFailed) and error.log_tail:  # the output first: the error is the last line
                typer.echo("--- build output (tail) ---\n" + redact(error.log_tail.rstrip()), err=True)
            if kwargs.get("as_json") and not getattr(error, "reported", False):
                _json_error(error)  # --json answers on every exit path
            typer.secho(f"error: {redact(error.message)}", err=True, fg="red")
            raise typer.Exit(error.exit_code)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:  # a bug: still one line, the traceback on request
            if os.environ.get("COMPOSER_DEBUG"):
                raise
            typer.secho(
                f"internal error: {type(error).__name__}: {printable(redact(str(error)))} "
                "(COMPOSER_DEBUG=1 shows the traceback)",
                err=True,
                fg="red",
            )
            raise typer.Exit(70)

    return wrapper


def _interrupted(stop: "interrupts.Interrupted", as_json: bool) -> None:
    """One line for a command a signal stopped, once its cleanup ran: what it was doing, and that
    no tag moved (a push's tag is put last, so an interrupted push moved none either)."""
    where = "the registry's tag was not moved" if stop.phase in ("pushing", "copying blobs") else "no tag moved"
    message = f"{stop.message}: {where}"
    if as_json:
        typer.echo(json.dumps({"error": message, "exit_code": stop.exit_code}, indent=2, sort_keys=True))
    typer.echo(message, err=True)
    raise typer.Exit(stop.exit_code)


def _json_error(error: ComposerError) -> None:
    payload: dict[str, Any] = {"error": error.message, "exit_code": error.exit_code}
    report = getattr(error, "report", None)
    if report is not None:
        payload["smoke_test"] = report.to_dict()
    typer.echo(redact(json.dumps(payload, indent=2, sort_keys=True)))


def check_wheelhouse_output(folder: Path) -> None:
    """wheels -o DIR: a folder (new or existing) where files can be made, checked before any work."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise UsageError(f"-o {printable(str(folder))}: exists and is not a folder")
    try:  # the folder's own writability is the test: a wheel is a file in it
        check_output_file(Path(folder) / "wheel.whl", "-o", makes_folders=True)  # pip makes the folder
    except Invalid as problem:
        raise UsageError(str(problem).replace("/wheel.whl", "")) from None


def _engine():
    return Engine.connect()


# -- spec options: declared once in composer.config.options, turned into typer parameters here ---------


def _typer_parameter(option: Option) -> inspect.Parameter:
    """The typer parameter of one declared flag (repeatable kinds become lists)."""
    names = [option.flag, *option.aliases] + ([option.short] if option.short else [])
    kind = option.kind
    if isinstance(kind, Flag):
        annotation, default = bool, False
    elif kind.repeatable or option.flag_key is not None:
        annotation, default = List[Path] if isinstance(kind, RequirementFiles) else List[str], []
    else:
        annotation, default = Optional[Path] if isinstance(kind, LocalPath) else Optional[str], None
    info = typer.Option(default, *names, help=option.help, envvar=option.envvar, show_envvar=False)
    return inspect.Parameter(option.param, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


def spec_options(command: str):
    """Give a typer command the flags of every spec option it takes.

    The command receives `given`: field path -> value for the fields the command line gave,
    each read and checked by its declaration (composer.config.options.given_on_command_line).
    """

    def decorate(function):
        flags = flags_for(command)
        own = [p for p in inspect.signature(function).parameters.values() if p.name != "given"]

        @functools.wraps(function)
        def wrapper(**kwargs):
            values = {option.param: kwargs.pop(option.param) for option in flags}
            return function(given=given_on_command_line(command, values), **kwargs)

        wrapper.__signature__ = inspect.Signature(own + [_typer_parameter(o) for o in flags])
        return wrapper

    return decorate


SetOpt = typer.Option([], "--set", "-s", help="A backend set: YAML file or shipped preset name (repeatable: several images).")
JsonOpt = typer.Option(False, "--json", help="Print a machine-readable result on stdout.")
RegistryAuthOpt = typer.Option(
    None, "--registry-auth",
    help="Registry credentials: file:PATH or env:NAME holding user:password (default: docker login's).",
)


def _specs(command: str, set_files: list[str], given: dict[str, Any], **run: bool) -> list[CompositionSpec]:
    """The specs of a run: one per set (flags in place of the set's values), or the flags alone.

    Everything is checked here (composer.config.rules), before any work starts; `run`: the run's
    options the rules look at (explain, offline).
    """
    one_tag_for_several_sets(len(set_files), set(given))
    specs = specs_from_sets(set_files, given) if set_files else [CompositionSpec().with_fields(given)]
    return [validate(spec, command, sets=len(set_files), **run) for spec in specs]


def _one_spec(command: str, set_files: list[str], given: dict[str, Any], **run: bool) -> CompositionSpec:
    if len(set_files) > 1:
        raise UsageError(f"composer {command} takes one --set")
    return _specs(command, set_files, given, **run)[0]


# -- commands -------------------------------------------------------------------


@app.command()
@reports_errors
@spec_options(BUILD)
def build(
    given: dict,
    set_files: List[str] = SetOpt,
    registry_auth: Optional[str] = RegistryAuthOpt,
    locked: bool = typer.Option(False, "--locked", help="Build from the digests in the set's lock file."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write smoke-test results as JUnit XML."),
    bundle: Optional[Path] = typer.Option(
        None, "--bundle", help="Build from a bundle made by composer bundle: no registry, no network."
    ),
    explain: bool = typer.Option(False, "--explain", help="With --base pruned: list each package of the min image "
                                 "kept (and why) or dropped (and its size)."),
    as_json: bool = JsonOpt,
) -> None:
    """Compose, build and smoke-test a slim image; tag (and push) it only once it serves."""
    out = Printer(as_json)
    catalog = Catalog.load()
    if junit is not None:
        junit = check_junit_output(junit)
    check_environment(os.environ)
    if bundle is not None:
        check_overrides(given, set_files=set_files, locked=locked)
    with contextlib.ExitStack() as stack:
        read = stack.enter_context(unpacked(bundle)) if bundle is not None else None
        # One check for every path: a bundle's spec (with the result flags given) as the flags' or a set's.
        specs = ([validate(read.spec().with_fields(given), BUILD, explain=explain)] if read
                 else _specs(BUILD, set_files, given, explain=explain))
        if locked:
            check_locked(specs)
        auth = load_auth(registry_auth)
        engine = _engine()

        def show_plan(plan) -> None:
            for note in plan.notes:
                out.step(f"note: {note}")
            out.step(f"composing {plan.tag}: backends {', '.join(plan.all_backends)}")

        run = Run(locked=locked, registry_auth=auth, on_line=out.step, on_build_line=out.build_line,
                  on_plan=show_plan)
        if read is not None:
            outcomes = compose_bundle(engine, read, specs[0], catalog, run)
        else:
            outcomes = compose_all(engine, specs, catalog, run)
    _report(out, outcomes, junit, explain)


def _report(out: Printer, outcomes, junit: Optional[Path], explain: bool = False) -> None:
    """Print the outcomes (and write JUnit); any failure makes the command fail."""
    for outcome in outcomes:
        if isinstance(outcome.error, SmokeTestFailed):
            out.smoke_failure(outcome.error.report, outcome.error.log_tail)
    if junit is not None:
        write_junit(outcome_entries(outcomes), junit)
    failed = [o for o in outcomes if o.error is not None]
    payload = outcomes[0].to_dict() if len(outcomes) == 1 else {"images": [o.to_dict() for o in outcomes]}
    if len(outcomes) == 1 and failed:
        error = failed[0].error
        if out.as_json:  # the result, smoke rows included, on every exit path
            out.result({**payload, "exit_code": error.exit_code}, "")
            error.reported = True
        if outcomes[0].result is not None and outcomes[0].result.smoke and not out.as_json:
            typer.echo(smoke_table(outcomes[0].result.smoke))
        raise error
    for outcome in failed:
        typer.secho(f"error: {outcome.spec.name}: {redact(outcome.error.message)}", err=True, fg="red")

    def describe(outcome) -> str:
        result = outcome.result
        if result is None:
            return f"{outcome.spec.name}: FAILED: {redact(outcome.error.message)}"
        lines = [smoke_table(result.smoke)] if result.smoke else []
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
        lines.append(f"{result.tag}  {result.image_id[:19]}  {human_size(result.size)}")
        if outcome.pushed:
            lines.append(f"pushed {outcome.pushed.ref}@{outcome.pushed.digest}")
            for kind in ("sbom", "provenance", "signature"):
                if getattr(outcome.pushed, kind):
                    lines.append(f"  its {kind}: {getattr(outcome.pushed, kind)}")
        return "\n".join(lines)

    out.result(payload, "\n\n".join(describe(o) for o in outcomes))
    if failed:
        error = ComposerError(f"{len(failed)} of {len(outcomes)} images failed: {', '.join(o.spec.name for o in failed)}")
        error.reported = True  # the JSON result above says so
        raise error


@app.command()
@reports_errors
def lock(
    set_files: List[str] = typer.Option(..., "--set", "-s", help="Backend set(s) to lock (repeatable)."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Resolve a set's base images to digests into a lock file beside it (for --locked builds)."""
    out = Printer(as_json)
    catalog = Catalog.load()
    specs = _specs(BUILD, set_files, {})
    for spec in specs:
        check_lock_output(spec.source)
    auth = load_auth(registry_auth)
    engine = _engine()
    locks = [lock_spec(engine, spec, resolve_targets(spec, catalog, engine), out.step,
                       registries=Registries(engine, auth, spec.images.registry_ca))
             for spec in specs]
    out.result(
        {"locks": [{"path": str(l.path), "images": [i.record() for i in l.images]} for l in locks]},
        "\n".join(f"wrote {l.path}: " + ", ".join(f"{i.role} {i.digest[:19]}" for i in l.images) for l in locks),
    )


@app.command()
@reports_errors
@spec_options(MIRROR)
def mirror(
    given: dict,
    registry_auth: Optional[str] = RegistryAuthOpt,
    source_auth: Optional[str] = typer.Option(
        None, "--source-auth", help="Credentials for --registry: file:PATH or env:NAME (user:password)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Copy a release's full and min images into a private registry, registry to registry (every
    platform, their SBOMs); only what is missing moves. --to-engine copies through the engine."""
    out = Printer(as_json)
    spec = validate(CompositionSpec().with_fields(given), MIRROR)
    images, how = spec.images, spec.mirror
    release = Catalog.load().release(images.version)
    platform = Platform.parse(how.platform) if how.platform else None
    source, to, registry_ca = images.registry, how.to, images.registry_ca
    auth, src_auth = load_auth(registry_auth), load_auth(source_auth, flag="--source-auth")
    if how.to_engine:
        result = mirror_through_engine(_engine(), release, source=source, dest=to, auth=auth, source_auth=src_auth,
                                       registry_ca=registry_ca, on_line=out.step)
    else:  # registry to registry: this machine's trust settings and logins, read from their files; no engine
        host = HostDockerConfig()
        retry = retry_policy(images, out.step)
        result = mirror_release(release, source=source, dest=to, registries=Registries(host, auth, registry_ca, retry),
                                source_registries=Registries(host, src_auth, registry_ca, retry), platform=platform,
                                compression=spec.result.compression, on_line=out.step)
    out.result(result.to_dict(), "\n".join(_mirrored_line(i) for i in result.images))


def _mirrored_line(image) -> str:
    line = f"{'moved' if image.moved else 'present'}  {image.dest}@{image.digest}"
    if image.stats is not None:
        s = image.stats
        line += (f"  ({human_size(s.bytes_moved)} moved, {human_size(s.bytes_mounted)} mounted, "
                 f"{human_size(s.bytes_skipped)} already there; {', '.join(image.platforms) or 'platform unnamed'}; "
                 f"{len(image.referrers)} referrers)")
    return line


@app.command("inspect")
@reports_errors
@spec_options(INSPECT)
def inspect_command(
    given: dict,
    images: List[str] = typer.Argument(..., metavar="REF [REF]",
                                       help="An image; with a second one, what differs between them."),
    remote: bool = typer.Option(False, "--remote", help="Read the registry even when the engine holds REF."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    as_json: bool = JsonOpt,
) -> None:
    """An image's versions, parts and SBOM without pulling it (from its registry, or the engine's copy)."""
    out = Printer(as_json)
    if len(images) > 2:
        raise UsageError(f"inspect takes one image, or two to compare; got {len(images)}")
    for ref in images:
        problem = check_reference(ref) if not is_image_id(ref) else None
        if problem:
            raise UsageError(f"REF {printable(ref[:200])}: {problem}")
    auth = load_auth(registry_auth)
    engine = _engine()
    registries = Registries(engine, auth, CompositionSpec().with_fields(given).images.registry_ca)
    reports = [inspect_image(engine, registries, ref, remote=remote) for ref in images]
    if len(reports) == 1:
        out.result(reports[0].to_dict(), reports[0].table())
    else:
        difference = Difference(*reports)
        out.result(difference.to_dict(), difference.table())


@app.command()
@reports_errors
@spec_options(VERIFY)
def verify(
    given: dict,
    image_ref: str = typer.Argument(..., metavar="REF", help="The pushed image (a tag or a digest reference)."),
    key: Optional[Path] = typer.Option(None, "--key", help="The PEM public key its signature and provenance must "
                                       "verify with (cosign's kind: ECDSA P-256)."),
    rebuild_it: bool = typer.Option(False, "--rebuild", help="Rebuild it here from its provenance and compare the "
                                    "digests (needs an engine)."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check a pushed image's signature and provenance from its registry, with no engine; --rebuild
    builds it again from its provenance and says whether the digest is the same."""
    out = Printer(as_json)
    problem = check_reference(image_ref)
    if problem:
        raise UsageError(f"REF {printable(image_ref[:200])}: {problem}")
    if key is None and not rebuild_it:
        raise UsageError("give --key PUB (the public key to verify with), --rebuild, or both")
    if key is not None:
        key = LocalPath("file").read(str(key), Path.cwd())
    spec = validate(CompositionSpec().with_fields(given), VERIFY)
    auth = load_auth(registry_auth)
    registries = Registries(HostDockerConfig(), auth, spec.images.registry_ca)
    payload: dict[str, Any] = {}
    text: list[str] = []
    failed = False
    if key is not None:
        checked = check_image(registries, image_ref, key)
        payload["verification"] = checked.to_dict()
        text.append(checked.table())
        failed = not checked.passed
    if rebuild_it:
        engine = _engine()
        rebuilt = rebuild(engine, Registries(engine, auth, spec.images.registry_ca), image_ref, Catalog.load(),
                          Run(on_line=out.step, on_build_line=out.build_line))
        payload["rebuild"] = rebuilt.to_dict()
        text.append(f"rebuild: {'same' if rebuilt.same else 'differs'}: {rebuilt.detail}"
                    + ("" if rebuilt.same else f" (pushed {rebuilt.digest}, rebuilt {rebuilt.rebuilt or '-'})"))
        failed = failed or not rebuilt.same
    out.result({"ref": image_ref, "passed": not failed, **payload}, "\n".join(text))
    if failed:
        error = VerificationFailed(f"{image_ref}: verification failed")
        error.reported = True
        raise error


@app.command()
@reports_errors
@spec_options(BUNDLE)
def bundle(
    given: dict,
    output: Path = typer.Option(..., "--output", "-o", help="The bundle archive to write (.tar)."),
    set_files: List[str] = SetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write one archive with everything a build needs, for a machine that reaches no registry."""
    import tempfile

    out = Printer(as_json)
    catalog = Catalog.load()
    spec = _one_spec(BUNDLE, set_files, given)
    output = check_bundle_output(output)
    check_environment(os.environ)
    engine = _engine()
    with tempfile.TemporaryDirectory(prefix="triton-composer-wheels-") as wheels:
        resolved = resolve(engine, spec, catalog, wheels=Path(wheels), on_line=out.step)
        path = write_bundle(engine, resolved, output, on_line=out.step)
    plan = resolved.plan
    size = path.stat().st_size
    out.result({"bundle": str(path), "size": size, "tag": plan.tag, "backends": list(plan.all_backends)},
               f"wrote {path} ({human_size(size)}); on the other side: composer build --bundle {path.name}")


@app.command()
@reports_errors
@spec_options(RENDER)
def render(
    given: dict,
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the Dockerfile and build context."),
    set_files: List[str] = SetOpt,
    offline: bool = typer.Option(
        False, "--offline", help="Do not ask an engine: check the selection against NGC's catalogued layout."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Write the Dockerfile and build context only (no build)."""
    import tempfile

    out = Printer(as_json)
    catalog = Catalog.load()
    spec = _one_spec(RENDER, set_files, given, offline=offline)
    check_output(output)  # before any work
    check_environment(os.environ)
    with tempfile.TemporaryDirectory(prefix="triton-composer-wheels-") as wheels:
        _render(out, spec, catalog, output, offline, Path(wheels))


def _render(out: Printer, spec: CompositionSpec, catalog: Catalog, output: Path, offline: bool, wheels: Path) -> None:
    plan = resolve_for_render(None if offline else _engine, spec, catalog, wheels=wheels, on_line=out.step).plan
    for note in plan.notes:
        out.step(f"note: {note}")
    context = write_context(plan, output)
    how = f"docker build -t {plan.tag} {context.directory}"
    if context.pruned_base:  # the base first, then the image on it
        how = (f"docker build -t pruned-base {context.pruned_base} && "
               f"docker build --build-arg PRUNED_BASE=pruned-base -t {plan.tag} {context.directory}")
    out.result(
        {"dockerfile": str(context.dockerfile), "context": str(context.directory), "tag": plan.tag,
         "pruned_base_context": str(context.pruned_base) if context.pruned_base else None,
         "composition": plan.record()},
        f"wrote {context.dockerfile} (build with: {how})",
    )


@app.command("smoke-test")
@reports_errors
@spec_options(SMOKE)
def smoke_test_command(
    given: dict,
    image_ref: str = typer.Argument(..., metavar="IMAGE", help="The image to smoke-test."),
    as_json: bool = JsonOpt,
) -> None:
    """Serve the samples (or your models) from IMAGE and check the answers."""
    out = Printer(as_json)
    problem = check_reference(image_ref) if not is_image_id(image_ref) else None
    if problem:
        raise UsageError(f"IMAGE {printable(image_ref[:200])}: {problem}")
    spec = validate(CompositionSpec().with_fields(given), SMOKE)
    engine = _engine()
    info = engine.require_image(image_ref, on_line=out.step)
    plan, record = image_smoke_plan(engine, info, image_ref, spec.selection.backends, spec.result)
    report = smoke_test(engine, info.id, plan, on_line=out.step, record=record)
    if not report.passed:
        out.smoke_failure(report, report.log_tail)
        failed = ", ".join(r.subject for r in report.failures())
        raise SmokeTestFailed(f"smoke test of {image_ref} failed ({failed})", report=report)
    out.result(report.to_dict(), smoke_table(report))


@app.command()
@reports_errors
@spec_options(BACKENDS)
def backends(given: dict, as_json: bool = JsonOpt) -> None:
    """List what a full image offers (backends, repo agents, caches) with their sizes."""
    out = Printer(as_json)
    catalog = Catalog.load()
    spec = validate(CompositionSpec().with_fields(given), BACKENDS)
    engine = _engine()
    targets = resolve_targets(spec, catalog, engine)
    require_full(engine, targets, out.step)
    full_ref, contents = targets.full, probe(engine, targets.full, out.step)
    rows = [("KIND", "NAME", "SIZE", "NOTE")]
    payload = {"image": full_ref, "core_size": contents.core_size, "components": []}
    for c in contents.components:
        need_bytes = sum(n.size for n in c.needs)
        note = "python-based" if c.python_based else ""
        providers = tuple(p for p in c.providers if p != Providers.SHARED)
        if providers:  # ONNX Runtime's execution providers, for --ort-provider
            note = f"providers: {', '.join(Providers.listing(providers))} (--ort-provider)"
        rows.append((c.kind, c.name, human_size(c.size), note))
        payload["components"].append(
            {"kind": c.kind, "name": c.name, "size": c.size, "python_based": c.python_based,
             "needs_bytes": need_bytes, **({"ort_providers": Providers.listing(providers)} if providers else {})}
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    table = "\n".join(f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].rjust(widths[2])}  {r[3]}" for r in rows)
    out.result(payload, f"{full_ref}: core {human_size(contents.core_size)}\n{table}")


@app.command()
@reports_errors
@spec_options(WHEELS)
def wheels(
    given: dict,
    output: Path = typer.Option(..., "--output", "-o", help="Folder to fill with wheels (the wheelhouse)."),
    set_files: List[str] = SetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Download on this machine the wheels a build's packages need, so the build runs offline."""
    out = Printer(as_json)
    catalog = Catalog.load()
    if not set_files and "selection.backends" not in given:
        given = {**given, "selection.backends": ("python",)}
    spec = _one_spec(WHEELS, set_files, given)
    if not spec.packages and not (spec.selection.model_envs or spec.selection.bake_models):
        raise UsageError("name the packages with --pip SPEC or --requirements FILE (or models with --model-env "
                         "MODEL=REQUIREMENTS or --bake-models DIR)")
    check_wheelhouse_output(output)
    engine = _engine()
    targets = resolve_targets(spec, catalog, engine)
    contents = inspect_images(engine, targets, out.step).contents
    target = python_target(contents)
    files = fetch_wheels(target, spec.packages, targets.release, output, out.step) if spec.packages else []
    files = sorted(set(files) | set(fetch_model_env_wheels(spec, targets.release, contents, output, out.step)))
    out.result(
        {"wheelhouse": str(output), "python": target.version, "platform": target.platform,
         "wheels": [f.name for f in files]},
        f"{len(files)} wheels in {output} (build with --wheelhouse {output})",
    )


# -- composer cache: what the composer keeps on the engine (composer.assembly.cache) ---------------

cache_app = typer.Typer(help="What the composer keeps on the engine: pruned bases, and what runs left.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("list")
@reports_errors
def cache_list(as_json: bool = JsonOpt) -> None:
    """List the pruned bases (sizes, last use, the tagged images using them) and what runs left."""
    from composer.assembly.cache import listing

    entries = listing(_engine())
    text = "\n".join(e.line() for e in entries) or "nothing: no pruned base and no leftover on the engine"
    Printer(as_json).result({"entries": [e.to_dict() for e in entries]}, text)


@cache_app.command("clear")
@reports_errors
def cache_clear(
    older_than: Optional[float] = typer.Option(None, "--older-than", metavar="DAYS", min=0,
                                               help="Also remove pruned bases unused for DAYS days."),
    everything: bool = typer.Option(False, "--all", help="Also remove every pruned base no tagged image uses."),
    as_json: bool = JsonOpt,
) -> None:
    """Remove what runs that ended left on the engine (and, when asked, pruned bases): never an image
    a tag uses, nor anything a build at work holds."""
    from composer.assembly.cache import clear

    out = Printer(as_json)
    done = clear(_engine(), older_than_days=older_than, everything=everything, on_line=out.step)
    out.result(done.to_dict(), f"removed {len(done.removed)} images and {done.containers} containers, "
                               f"freed {human_size(done.freed)}; kept {len(done.kept)}")


@app.command("version")
@reports_errors
def version_command() -> None:
    """Print the composer's version."""
    typer.echo(__version__)


@app.callback(invoke_without_command=True)
def main_options(
    ctx: typer.Context,
    show_version: bool = typer.Option(False, "--version", help="Print the composer's version and exit."),
) -> None:
    if show_version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def main(argv: list[str] | None = None) -> None:
    run_app(app, "composer", argv)


def run_app(typer_app: typer.Typer, prog_name: str, argv: list[str] | None = None) -> None:
    """Run a command of `typer_app`; the command-line library's own usage errors become one line
    (and JSON under --json), exit 2, like every other refusal of bad input. Shared with the
    stand-ins' command (triton-standin), which refuses bad input the same way."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    command = typer.main.get_command(typer_app)
    try:
        _check_arguments(command, args)
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except (_cli_errors.UsageError, UsageError) as error:
        message = redact(error.format_message() if isinstance(error, _cli_errors.UsageError) else error.message)
        message = printable(" ".join(message.split()))
        if as_json:
            typer.echo(json.dumps({"error": message, "exit_code": 2}, indent=2, sort_keys=True))
        typer.secho(f"error: {message}", err=True, fg="red")
        sys.exit(2)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def _check_arguments(command, args: list[str]) -> None:
    """Refuse what the command-line library would take silently or choke on: an argument that is
    not UTF-8 (named by the option or argument it is the value of), and a single-valued option
    given twice with different values (the last would win)."""
    name = next((a for a in args if not a.startswith("-")), None)
    sub = getattr(command, "commands", {}).get(name) if name and _is_text(name) else None
    owners = _owners(sub if sub is not None else command, args, args.index(name) + 1 if sub is not None else 0)
    for number, arg in enumerate(args, 1):
        if not _is_text(arg):
            owner = owners.get(number - 1)
            raise UsageError(f"{owner}: the argument is not UTF-8 text" if owner else
                             f"argument {number} is not UTF-8 text")
    if sub is None:
        return
    seen: dict[str, tuple[str, str]] = {}
    for index, (flag, param) in sorted(_values(sub, args, args.index(name) + 1).items()):
        if param.multiple or param.is_flag:
            continue
        value = args[index].partition("=")[2] if args[index].startswith(flag + "=") else args[index]
        first = seen.setdefault(param.name, (flag, value))
        if first[1] != value:
            raise UsageError(f"{flag} is given twice ({printable(redact(first[1]))[:80]} and "
                             f"{printable(redact(value))[:80]}): give it once")


def _is_text(arg: str) -> bool:
    try:
        arg.encode("utf-8")  # a byte that is not UTF-8 arrives as a lone surrogate
    except UnicodeEncodeError:
        return False
    return True


def _values(command, args: list[str], start: int) -> dict[int, tuple[str, Any]]:
    """Index of each argument that is an option's value (or `--opt=value`) -> (the option, its
    parameter), as the command-line library will read them."""
    options = {opt: param for param in command.params if param.param_type_name == "option"
               for opt in param.opts + param.secondary_opts}
    found: dict[int, tuple[str, Any]] = {}
    index = start
    while index < len(args):
        token = args[index]
        if token == "--":
            break
        flag, eq, _ = token.partition("=") if token.startswith("--") else (token, "", "")
        param = options.get(flag)
        if param is not None and not param.is_flag:
            if eq:
                found[index] = (flag, param)
            elif index + 1 < len(args):
                found[index + 1] = (flag, param)
                index += 1
        index += 1
    return found


def _owners(command, args: list[str], start: int) -> dict[int, str]:
    """Index -> the name an argument is given for: its option, or the positional argument it fills."""
    owners = {index: flag for index, (flag, _) in _values(command, args, start).items()}
    positional = [p for p in command.params if p.param_type_name == "argument"]
    filled, ended = 0, False
    for index in range(start, len(args)):
        token = args[index]
        if index in owners or (token.startswith("-") and not ended and token != "--"):
            continue
        if token == "--" and not ended:
            ended = True
            continue
        if filled < len(positional):
            owners[index] = (positional[filled].metavar or positional[filled].name.upper()).split()[0]
            filled += 0 if positional[filled].nargs == -1 else 1
    return owners
