"""The `composer` command: parse options, call the pipeline, print. Nothing else lives here.

Progress goes to stderr so that `--json` output on stdout stays machine-readable; every
ComposerError becomes one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from composer import __version__
from composer.app import compose, images
from composer.app.compose import Progress
from composer.app.results import Result, refusal
from composer.cli.output import PHASES, Printer, smoke_table
from composer.config.options import (BACKENDS, BUILD, BUNDLE, INSPECT, MIRROR, RENDER, SMOKE, VERIFY, WHEELS, Option,
                                     flags_for, given_on_command_line)
from composer.config.values import Flag, LocalPath, RequirementFiles
from composer.core import interrupts
from composer.core.errors import BuildFailed, ComposerError, SmokeTestFailed, UsageError
from composer.core.files import printable
from composer.core.redaction import redact
from composer.engine.connect import connect

try:  # the command-line library under typer: vendored by newer typers, click itself before
    from typer._click import exceptions as _cli_errors
except ImportError:  # pragma: no cover
    import click.exceptions as _cli_errors

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: words wrapped at the terminal's width, no boxes
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
            _interrupted(stop, kwargs.get("as_json"), _COMMANDS.get(command.__name__, command.__name__))
        except ComposerError as error:
            if isinstance(error, BuildFailed) and error.log_tail:  # the output first: the error is the last line
                typer.echo("--- build output (tail) ---\n" + redact(error.log_tail.rstrip()), err=True)
            if kwargs.get("as_json") and not getattr(error, "reported", False):
                _json_error(_COMMANDS.get(command.__name__, command.__name__), error)  # --json answers on every exit path
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


def _interrupted(stop: "interrupts.Interrupted", as_json: bool, command: str) -> None:
    """One line for a command a signal stopped, once its cleanup ran: what it was doing, and that
    no tag moved (a push's tag is put last, so an interrupted push moved none either)."""
    where = "the registry's tag was not moved" if stop.phase in ("pushing", "copying blobs") else "no tag moved"
    message = f"{stop.message}: {where}"
    if as_json:
        payload = refusal(command, ComposerError(message))
        payload["exit_code"] = stop.exit_code
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
    typer.echo(message, err=True)
    raise typer.Exit(stop.exit_code)


# The command each function is (its JSON names it).
_COMMANDS = {"inspect_command": "inspect", "smoke_test_command": "smoke-test", "cache_list": "cache list",
             "cache_clear": "cache clear", "version_command": "version"}


def _json_error(command: str, error: ComposerError) -> None:
    typer.echo(redact(json.dumps(refusal(command, error), indent=2, sort_keys=True)))


def _engine():
    return connect()


# -- spec options: declared once in composer.config.options, turned into typer parameters here ---------


def _typer_parameter(option: Option, command: str) -> inspect.Parameter:
    """The typer parameter of one declared flag (repeatable kinds become lists)."""
    names = [option.flag, *option.aliases] + ([option.short] if option.short else [])
    kind = option.kind
    if isinstance(kind, Flag):
        annotation, default = bool, False
    elif kind.repeatable or option.flag_key is not None:
        annotation, default = List[Path] if isinstance(kind, RequirementFiles) else List[str], []
    else:
        annotation, default = Optional[Path] if isinstance(kind, LocalPath) else Optional[str], None
    info = typer.Option(default, *names, help=option.help_for(command), envvar=option.envvar, show_envvar=False,
                        metavar=option.metavar or None)
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

        wrapper.__signature__ = inspect.Signature(own + [_typer_parameter(o, command) for o in flags])
        return wrapper

    return decorate


SetOpt = typer.Option([], "--set", "-s", metavar="SET", help="A backend set: YAML file or shipped preset name "
                      "(repeatable: one image per set).")
OneSetOpt = typer.Option([], "--set", "-s", metavar="SET", help="A backend set: YAML file or shipped preset name.")
JsonOpt = typer.Option(False, "--json", help="Print a machine-readable result on stdout.")
RegistryAuthOpt = typer.Option(
    None, "--registry-auth", metavar="SOURCE",
    help="Registry credentials: file:PATH or env:NAME holding user:password (default: docker login's).",
)


def _progress(out: Printer) -> Progress:
    def show_plan(plan) -> None:
        for note in plan.notes:
            out.step(f"note: {note}")
        out.step(f"composing {plan.tag}: backends {', '.join(plan.all_backends)}")

    return Progress(on_line=out.step, on_build_line=out.build_line, on_plan=show_plan)


def _show(out: Printer, result: Result) -> None:
    """Print a command's result (text, or its JSON), then fail the command with its error, if any."""
    if result.error is not None:
        result.error.reported = out.as_json  # the JSON printed below says it
    out.result(result.to_dict(), result.text)
    if result.error is not None:
        raise result.error


def _show_build(out: Printer, result: Result) -> None:
    """build's result: each image's smoke table, then its lines; a failed smoke test's rows and the
    server's last words on stderr."""
    for outcome in result.outcomes:
        if isinstance(outcome.error, SmokeTestFailed):
            out.smoke_failure(outcome.error.report, outcome.error.log_tail)
    texts = []
    for outcome, part in zip(result.outcomes, result.parts):
        smoke = outcome.result.smoke if outcome.result is not None else None
        texts.append("\n".join(([smoke_table(smoke)] if smoke else []) + [part]))
    if len(result.outcomes) > 1:
        for outcome in result.outcomes:
            if outcome.error is not None:
                typer.secho(f"error: {outcome.spec.name}: {redact(outcome.error.message)}", err=True, fg="red")
    result.text = "\n\n".join(texts)
    _show(out, result)


# -- commands -------------------------------------------------------------------


@app.command()
@reports_errors
@spec_options(BUILD)
def build(
    given: dict,
    set_files: List[str] = SetOpt,
    registry_auth: Optional[str] = RegistryAuthOpt,
    locked: bool = typer.Option(False, "--locked", help="Build from the digests in the set's lock file."),
    junit: Optional[Path] = typer.Option(None, "--junit", metavar="FILE",
                                         help="Write smoke-test results as JUnit XML."),
    bundle: Optional[Path] = typer.Option(
        None, "--bundle", metavar="FILE", help="Build from a bundle made by composer bundle: no registry, no network."
    ),
    explain: bool = typer.Option(False, "--explain", help="With --base pruned: list each package of the min image "
                                 "kept (and why) or dropped (and its size)."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the engine's own build lines (its steps) too."),
    as_json: bool = JsonOpt,
) -> None:
    """Compose, build and smoke-test a slim image; tag (and push) it only once it serves."""
    out = Printer(as_json, verbose=verbose, explain=explain)
    options = compose.BuildOptions(given, tuple(set_files), registry_auth, locked, junit, bundle, explain)
    _show_build(out, compose.build(options, _engine, _progress(out)))


@app.command()
@reports_errors
def lock(
    set_files: List[str] = typer.Option(..., "--set", "-s", metavar="SET",
                                        help="A backend set to lock (repeatable: each gets its lock file)."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Resolve a set's base images to digests into a lock file beside it (for --locked builds)."""
    out = Printer(as_json)
    _show(out, compose.lock(set_files, registry_auth, _engine, _progress(out)))


@app.command()
@reports_errors
@spec_options(MIRROR)
def mirror(
    given: dict,
    registry_auth: Optional[str] = RegistryAuthOpt,
    source_auth: Optional[str] = typer.Option(
        None, "--source-auth", metavar="SOURCE", help="Credentials for --registry: file:PATH or env:NAME (user:password)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Copy a release's full and min images into a private registry, registry to registry (every
    platform, their SBOMs); only what is missing moves. --to-engine copies through the engine."""
    out = Printer(as_json)
    _show(out, images.mirror(given, registry_auth, source_auth, _engine, _progress(out)))


@app.command("inspect")
@reports_errors
@spec_options(INSPECT)
def inspect_command(
    given: dict,
    refs: List[str] = typer.Argument(..., metavar="REF [REF]", hidden=True),
    remote: bool = typer.Option(False, "--remote", help="Read the registry even when the engine holds REF."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    as_json: bool = JsonOpt,
) -> None:
    """An image's versions, parts and SBOM without pulling it (from its registry, or the engine's copy).

    REF is an image reference or id; with a second REF, what differs between the two."""
    _show(Printer(as_json), images.inspect(given, refs, remote, registry_auth, _engine))


@app.command()
@reports_errors
@spec_options(VERIFY)
def verify(
    given: dict,
    image_ref: str = typer.Argument(..., metavar="REF", hidden=True),
    key: Optional[Path] = typer.Option(None, "--key", metavar="FILE", help="The PEM public key its signature and "
                                       "provenance must verify with (cosign's kind: ECDSA P-256)."),
    rebuild_it: bool = typer.Option(False, "--rebuild", help="Rebuild it here from its provenance and compare the "
                                    "digests (needs an engine)."),
    registry_auth: Optional[str] = RegistryAuthOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check a pushed image's signature and provenance from its registry, with no engine; --rebuild
    builds it again from its provenance and says whether the digest is the same.

    REF is the pushed image, by tag or digest reference."""
    out = Printer(as_json)
    _show(out, images.verify(given, image_ref, key, rebuild_it, registry_auth, _engine, _progress(out)))


@app.command()
@reports_errors
@spec_options(BUNDLE)
def bundle(
    given: dict,
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE", help="The bundle archive to write (.tar)."),
    set_files: List[str] = OneSetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write one archive with everything a build needs, for a machine that reaches no registry."""
    out = Printer(as_json)
    _show(out, compose.bundle(given, set_files, output, _engine, _progress(out)))


@app.command()
@reports_errors
@spec_options(RENDER)
def render(
    given: dict,
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR",
                                help="Folder for the Dockerfile and build context."),
    set_files: List[str] = OneSetOpt,
    offline: bool = typer.Option(
        False, "--offline", help="Do not ask an engine: check the selection against NGC's catalogued layout."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Write the Dockerfile and build context only (no build)."""
    out = Printer(as_json)
    _show(out, compose.render(given, set_files, output, offline, _engine, _progress(out)))


@app.command("smoke-test")
@reports_errors
@spec_options(SMOKE)
def smoke_test_command(
    given: dict,
    image_ref: str = typer.Argument(..., metavar="IMAGE", hidden=True),
    as_json: bool = JsonOpt,
) -> None:
    """Serve the samples (or your models) from IMAGE (a reference or an image id) and check the answers."""
    out = Printer(as_json)
    result = images.smoke_test(given, image_ref, _engine, _progress(out))
    report = result.outcomes[0]
    if result.error is not None:
        out.smoke_failure(report, report.log_tail)
    result.text = smoke_table(report)
    _show(out, result)


@app.command()
@reports_errors
@spec_options(BACKENDS)
def backends(given: dict, as_json: bool = JsonOpt) -> None:
    """List what a full image offers (backends, repo agents, caches) with their sizes."""
    out = Printer(as_json)
    _show(out, compose.backends(given, _engine, _progress(out)))


@app.command()
@reports_errors
@spec_options(WHEELS)
def wheels(
    given: dict,
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="Folder to fill with wheels (the wheelhouse)."),
    set_files: List[str] = OneSetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Download on this machine the wheels a build's packages need, so the build runs offline."""
    out = Printer(as_json)
    _show(out, compose.wheels(given, set_files, output, _engine, _progress(out)))


# -- composer cache: what the composer keeps on the engine (composer.assembly.cache) ---------------

cache_app = typer.Typer(help="What the composer keeps on the engine (pruned bases, build cache, what runs left) "
                             "and on this machine (compressed layers of pushes).",
                        rich_markup_mode=None)
app.add_typer(cache_app, name="cache")


@cache_app.callback(invoke_without_command=True)
def cache_command(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        raise UsageError("composer cache needs a command: list or clear (composer cache --help)")


_CACHE_BUILDERS = typer.Option([], "--builder", metavar="ADDR",
                               help="Also the composer's records in this BuildKit builder's cache (repeatable): "
                                    "buildkit, buildkit://unix:///PATH, buildkit://tcp://HOST:PORT or "
                                    "buildkit://docker-container://NAME.")
_CACHE_TLS = typer.Option(None, "--builder-tls", metavar="DIR",
                          help="The client's TLS files for a builder at tcp:// (as buildctl's --tlsdir).")


@cache_app.command("list")
@reports_errors
def cache_list(builders: List[str] = _CACHE_BUILDERS, tls: Optional[Path] = _CACHE_TLS,
               as_json: bool = JsonOpt) -> None:
    """List the pruned bases (sizes, last use, the tagged images using them), the build cache, what
    runs left, and this machine's blob cache."""
    _show(Printer(as_json), images.cache_list(_engine, builders, tls))


@cache_app.command("clear")
@reports_errors
def cache_clear(
    older_than: Optional[float] = typer.Option(None, "--older-than", metavar="DAYS", min=0,
                                               help="Also remove pruned bases, and the blob cache's compressed layers, "
                                                    "unused for DAYS days."),
    everything: bool = typer.Option(False, "--all", help="Also remove every pruned base no tagged image uses, and the "
                                                   "blob cache's compressed layers."),
    builders: List[str] = _CACHE_BUILDERS, tls: Optional[Path] = _CACHE_TLS,
    as_json: bool = JsonOpt,
) -> None:
    """Remove what runs that ended left on the engine (and, when asked, pruned bases): never an image
    a tag uses, nor anything a build at work holds."""
    out = Printer(as_json)
    _show(out, images.cache_clear(older_than, everything, _engine, _progress(out), builders, tls))


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
            typer.echo(json.dumps(refusal(_command_of(args), UsageError(message)), indent=2, sort_keys=True))
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


def _command_of(args: list[str]) -> str:
    """The command the arguments name (for the JSON of a refusal), or composer's own."""
    words = [a for a in args if not a.startswith("-")][:2]
    if words[:1] == ["cache"]:
        return " ".join(words)
    return words[0] if words and _is_text(words[0]) else "composer"


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
