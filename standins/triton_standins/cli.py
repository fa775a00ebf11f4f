"""The `triton-standin` command: build (or reuse) the local stand-ins of NGC's full and min images.

Bad input is refused before any work: one line on stderr, exit 2, no traceback (--json answers
with a JSON document too), as the composer's own commands do.
"""

from __future__ import annotations

import typer

from composer.cli.main import reports_errors, run_app
from composer.cli.output import Printer
from composer.core.errors import UsageError
from composer.catalog.catalog import Catalog

SCALES = ("small", "ngc")
FLAVOURS = ("py3", "vllm")  # py3: the full and min images; vllm: NGC's YY.MM-vllm-python-py3 (at NGC scale)

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
@reports_errors
def standin(
    version: str = typer.Option("24.09", "--version", "-v", help="Release to stand in for (24.07 ... 24.10, and the Ubuntu 24.04 generation, 24.11 on)."),
    scale: str = typer.Option(
        "small", "--scale", help="small: fast stand-ins for tests; ngc: NGC's size, real CUDA libraries (24.09: CUDA 12; 26.07: CUDA 13)."
    ),
    flavour: str = typer.Option(
        "py3", "--flavour", help="py3: the full and min images; vllm (with --scale ngc): the vLLM image, on the min image."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the images are present."),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable result on stdout."),
) -> None:
    """Build local stand-ins of NGC's full and min images, with a real Triton server inside."""
    from composer.engine.connect import connect
    from triton_standins import build_standins, ngc, ngc_vllm

    out = Printer(as_json, verbose=True)  # the stand-ins' builds: the engine's lines are the progress
    if scale not in SCALES:
        raise UsageError(f"--scale {scale!r} is not a stand-in scale; use small or ngc")
    if flavour not in FLAVOURS:
        raise UsageError(f"--flavour {flavour!r} is not a stand-in flavour; use {' or '.join(FLAVOURS)}")
    if flavour != "py3" and scale != "ngc":
        raise UsageError(f"--flavour {flavour} is built at NGC scale only: add --scale ngc")
    release = Catalog.load().release(version)
    build = ngc.build_standins if scale == "ngc" else build_standins
    if scale == "ngc":
        ngc.check_ngc_scale_release(release)
    if flavour == "vllm":
        ngc_vllm.check_release(release)
    engine = connect()
    result = build(engine, release, force=force, on_line=out.build_line)
    payload = {"full": result.full_ref, "min": result.min_ref}
    if flavour == "vllm":
        min_info = engine.image(result.min_ref)
        assert min_info is not None
        vllm, _built = ngc_vllm.build_vllm(engine, release, min_info, force=force, on_line=out.build_line)
        payload["vllm"] = ngc_vllm.flavour_ref(release)
    out.result(payload, "\n".join(payload.values()))


def main(argv: list[str] | None = None) -> None:
    run_app(app, "triton-standin", argv)


if __name__ == "__main__":  # pragma: no cover
    main()
