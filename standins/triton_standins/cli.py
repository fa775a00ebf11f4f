"""The `triton-standin` command: build (or reuse) the local stand-ins of NGC's full and min images.

Bad input is refused before any work: one line on stderr, exit 2, no traceback (--json answers
with a JSON document too), as the composer's own commands do.
"""

from __future__ import annotations

import json
import sys

import typer

from composer.cli.main import reports_errors
from composer.cli.output import Printer
from composer.core.errors import UsageError
from composer.core.files import printable
from composer.core.redaction import redact
from composer.spec.catalog import Catalog

try:  # the command-line library under typer: vendored by newer typers, click itself before
    from typer._click import exceptions as _cli_errors
except ImportError:  # pragma: no cover
    import click.exceptions as _cli_errors

SCALES = ("small", "ngc")

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
@reports_errors
def standin(
    version: str = typer.Option("24.09", "--version", "-v", help="Release to stand in for (24.07 ... 24.10)."),
    scale: str = typer.Option(
        "small", "--scale", help="small: fast stand-ins for tests; ngc: NGC's size, real CUDA libraries (24.09)."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the images are present."),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable result on stdout."),
) -> None:
    """Build local stand-ins of NGC's full and min images, with a real Triton server inside."""
    from composer.engine.engine import Engine
    from triton_standins import build_standins, ngc

    out = Printer(as_json)
    if scale not in SCALES:
        raise UsageError(f"--scale {scale!r} is not a stand-in scale; use small or ngc")
    release = Catalog.load().release(version)
    build = ngc.build_standins if scale == "ngc" else build_standins
    if scale == "ngc":
        ngc.check_ngc_scale_release(release)
    engine = Engine.connect()
    result = build(engine, release, force=force, on_line=out.build_line)
    payload = {"full": result.full_ref, "min": result.min_ref}
    out.result(payload, f"{result.full_ref}\n{result.min_ref}")


def main(argv: list[str] | None = None) -> None:
    """Run the command; the command-line library's own usage errors become one line (and JSON
    under --json), exit 2, like every other refusal of bad input."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="triton-standin", standalone_mode=False)
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


if __name__ == "__main__":  # pragma: no cover
    main()
