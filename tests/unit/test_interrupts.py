"""SIGINT/SIGTERM handling (composer.core.interrupts) and the CLI's one line for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from composer.core import interrupts
from composer.core.errors import ComposerError
from composer.core.interrupts import Interrupted, Phases, handling, holding


@pytest.fixture(autouse=True)
def _restored():
    """A handled signal leaves its handlers installed and STOPPING set (the process is ending):
    put both back for the tests after."""
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    interrupts.STOPPING.clear()


def _kill(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs at the next bytecode of the main thread


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_raises_interrupted_naming_the_phase(signum, code):
    phases = Phases()
    phases.see("looking inside localhost/standin/tritonserver:24.09-py3")
    with pytest.raises(Interrupted) as raised:
        with handling(phases):
            _kill(signum)
    stop = raised.value
    assert stop.exit_code == code
    assert stop.message == f"interrupted ({signal.Signals(signum).name}) while probing the base images"
    assert not isinstance(stop, ComposerError)  # an `except ComposerError` that goes on never swallows it


def test_cleanup_runs_and_a_second_signal_does_not_cut_it_short():
    cleaned = []
    with pytest.raises(Interrupted):
        with handling(Phases()):
            try:
                _kill(signal.SIGINT)
            finally:
                _kill(signal.SIGTERM)  # while cleaning up: ignored
                cleaned.append(True)
    assert cleaned == [True]
    assert interrupts.STOPPING.is_set()


def test_handlers_come_back_when_no_signal_came():
    before = signal.getsignal(signal.SIGTERM)
    with handling(Phases()):
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_held_step_ends_before_the_interrupt():
    steps = []
    with pytest.raises(Interrupted):
        with handling(Phases()):
            with holding():
                _kill(signal.SIGINT)
                steps.append("finished")  # the step was not cut in two
            steps.append("after")  # never: the interrupt is raised as the step ends
    assert steps == ["finished"]
    assert interrupts._held.pending is None


@pytest.mark.parametrize("line, phase", [
    ("resolving localhost/standin/tritonserver:24.09-py3", "resolving the base images"),
    ("build context: /tmp/triton-composer-x", "building the image"),
    ('RUN ["python3", "/composer/collect.py", "--root"]', "collecting the backends' files"),
    ('RUN ["/bin/sh", "/composer-proof/prove.sh", "/composer-proof/required.txt"]', "proving the pruned base"),
    ("starting tritonserver from sha256:1 with 2 model(s), GPUs: none (no runtime)", "smoke-testing the image"),
    ("pushing 127.0.0.1:5000/x:1 through the composer's registry client (gzip)", "pushing"),
    ("saving 2 base image(s): a, b", "writing the bundle"),
])
def test_phases_follow_the_progress(line, phase):
    phases = Phases()
    phases.see(line)
    assert phases.now == phase
    phases.see("some line no rule knows")
    assert phases.now == phase


def test_writing_the_image_layers_is_not_a_bundle():
    phases = Phases()
    phases.see("built sha256:abc; writing the image's own layers")
    phases.see("writing something")
    assert phases.now == "writing the image's layers"


def test_the_cli_says_one_line_and_exits_128_plus_the_signal(tmp_path):
    """A command stopped by SIGTERM: its cleanup ran, one line, exit 143, no traceback."""
    script = tmp_path / "run.py"
    marker = tmp_path / "cleaned"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        import typer
        from composer.cli import main as cli
        from composer.cli.output import Printer

        app = typer.Typer()

        @app.command()
        @cli.reports_errors
        def slow(as_json: bool = typer.Option(False, "--json")) -> None:
            Printer().step("starting tritonserver from sha256:1 with 1 model(s)")
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os.kill(os.getpid(), signal.SIGINT)  # a second signal during cleanup: ignored
                time.sleep(0.1)
                open({str(marker)!r}, "w").close()

        @app.command()
        def other() -> None:
            pass

        cli.run_app(app, "t", sys.argv[1:])
    """))
    root = str(Path(__file__).resolve().parents[2])  # this checkout's composer, not an installed one
    done = subprocess.run([sys.executable, str(script), "slow"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 143, done.stderr
    assert marker.exists()
    lines = [line for line in done.stderr.splitlines() if not line.startswith("starting tritonserver")]
    assert lines == ["interrupted (SIGTERM) while smoke-testing the image: no tag moved"]
    assert "Traceback" not in done.stderr
