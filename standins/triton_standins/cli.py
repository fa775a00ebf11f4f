"""The `triton-standin` command: build (or reuse) the local stand-ins of NGC's full and min images.

Bad input is refused before any work: one line on stderr, exit 2, no traceback (--json answers
with a JSON document too), as the composer's own commands do.
"""

from __future__ import annotations

import typer

from composer.cli.main import reports_errors, run_app
from composer.cli.output import Printer
from composer.core.errors import UsageError
from composer.spec.catalog import Catalog

SCALES = ("small", "ngc")

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
@reports_errors
def standin(
    version: str = typer.Option("24.09", "--version", "-v", help="Release to stand in for (24.07 ... 24.10, and the Ubuntu 24.04 generation, 24.11 on)."),
    scale: str = typer.Option(
        "small", "--scale", help="small: fast stand-ins for tests; ngc: NGC's size, real CUDA libraries (24.09: CUDA 12; 26.07: CUDA 13)."
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
    run_app(app, "triton-standin", argv)


if __name__ == "__main__":  # pragma: no cover
    main()
