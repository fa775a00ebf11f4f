"""Interrupts: a real `composer build` stopped by SIGINT in each phase (probe, engine build, smoke test,
push): exit 130, one line naming the phase, no tag moved, nothing of the run left on the engine or
in the temporary folder, and a re-run that passes.

Each build runs in a subprocess from this checkout with a temporary folder of its own (TMPDIR), so
what it leaves there is its alone; the engine is shared, so what it leaves there is found by the
run's own marks: the run id its progress names (its stages carry RUN_LABEL / STAGE_LABEL) and the
composed image's id (the smoke test's container runs it).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from composer.assembly.records import hold_tag
from composer.resolve.plan_types import RUN_LABEL, STAGE_LABEL
from composer.verify.smoke import SMOKE_LABEL
from tests.conftest import TEST_RUN

ROOT = Path(__file__).resolve().parents[2]
# --verbose: the engine's steps are the phases; a state folder of each build's own: every phase runs
# (no recorded image, probe or smoke test). FRESH (--no-cache) where the signal must find a build
# step at work, as on a machine's first build; the phases after the build take its steps from the
# engine's cache (they were five builds from scratch, about a minute of the machine's CPU for nothing).
BUILD = ["build", "--registry", "localhost/standin", "--version", "24.09", "-b", "python", "--verbose"]
FRESH = [*BUILD, "--no-cache"]


STARTED: list[subprocess.Popen] = []  # every build this module started: killed (by PID) if a test left one


@pytest.fixture(autouse=True)
def _no_build_left():
    yield
    for process in STARTED:
        if process.poll() is None:
            process.kill()
            process.wait()


class Build:
    """`composer build` in a subprocess; its stderr lines read as they come."""

    def __init__(self, args: list[str], tmp: Path):
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        state = tmp.parent / f"{tmp.name}.state"  # beside the folder, which must stay empty
        env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
               "COMPOSER_STATE_DIR": str(state)}
        self._stdout = open(tmp.parent / f"{tmp.name}.stdout", "w+")  # beside the folder: it must stay empty
        self.process = subprocess.Popen([sys.executable, "-m", "composer", *args], cwd=ROOT, env=env,
                                        stdout=self._stdout, stderr=subprocess.PIPE, text=True)
        STARTED.append(self.process)
        self.lines: list[str] = []
        self._queue: "queue.Queue[str | None]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.stdout = ""

    def _read(self) -> None:
        for line in self.process.stderr:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float = 600) -> str:
        """The first stderr line matching `pattern` (the process still running)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the build ended before {pattern!r}:\n" + "\n".join(self.lines[-30:]))
            self.lines.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no {pattern!r} in {timeout} s:\n" + "\n".join(self.lines[-30:]))

    def finish(self, timeout: float = 600) -> int:
        self.process.wait(timeout=timeout)
        self._stdout.seek(0)
        self.stdout = self._stdout.read()
        self._stdout.close()
        while True:
            line = self._queue.get(timeout=10)
            if line is None:
                break
            self.lines.append(line)
        return self.process.returncode

    @property
    def run_id(self) -> str | None:
        for line in self.lines:
            found = re.search(r"\(run ([0-9a-f]{16}):", line)
            if found:
                return found.group(1)
        return None

    @property
    def composed(self) -> str | None:
        for line in self.lines:
            found = re.match(r"composed (sha256:[0-9a-f]+)", line.strip())
            if found:
                return found.group(1)
        return None


def _left_by(engine, build: Build) -> list[str]:
    """What of the run the engine still holds: its stage images, the images marking its stages, the
    containers of its build steps, the smoke test's container of its image."""
    left = []
    run = build.run_id
    if run:
        left += [f"image {i[:19]} ({RUN_LABEL})" for i in engine.images_labelled(f"{RUN_LABEL}={run}", untagged=True)]
        for image in engine.images_labelled(STAGE_LABEL, untagged=True):
            info = engine.image(image)
            if info is not None and info.labels.get(STAGE_LABEL, "").endswith(f" {run}"):
                left.append(f"image {image[:19]} ({STAGE_LABEL} of run {run})")
        if engine.image(hold_tag(run)) is not None:  # its hold on the image it made
            left.append(f"hold {hold_tag(run)}")
    for line in build.lines:  # a build step's container: the engine removes it when it cancels the build
        found = re.search(r"---> Running in ([0-9a-f]{12})", line)
        if found and engine._api.containers(all=True, filters={"id": found.group(1)}):
            left.append(f"build container {found.group(1)}")
    composed = build.composed
    if composed:
        for cid in engine.containers_labelled(SMOKE_LABEL):
            if engine._api.inspect_container(cid)["Image"] == composed:
                left.append(f"smoke-test container {cid[:12]}")
    return left


def _settled(engine, build: Build) -> list[str]:
    """What is left once the engine has finished cancelling (a cancelled step's container goes
    a moment after the client hung up)."""
    deadline = time.monotonic() + 20
    while True:
        left = _left_by(engine, build)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


PHASES = [  # (what to wait for, the phase the one line must name: the engine's build may have reached its
    # collect step by the time the signal lands, the build's arguments)
    (r"^looking inside ", "probing the base images", FRESH),
    (r"^\s*Step \d+/\d+ : ", "(building the image|collecting the backends' files)", FRESH),
    (r"^starting tritonserver ", "smoke-testing the image", BUILD),
]


@pytest.fixture
def tag(engine):
    name = f"triton-composer-test/interrupt:{TEST_RUN}"
    yield name
    for ref in (name,):
        if engine.image(ref) is not None:
            engine.remove_image(ref, force=True)


def _interrupt(engine, tmp: Path, args: list[str], wait: str, phase: str, moved: str) -> Build:
    build = Build(args, tmp)
    build.wait_for(wait)
    build.process.send_signal(signal.SIGINT)
    code = build.finish()
    last = build.lines[-1] if build.lines else ""
    assert code == 130, "\n".join(build.lines[-30:])
    assert re.fullmatch(f"interrupted \\(SIGINT\\) while {phase}: {moved}", last), "\n".join(build.lines[-30:])
    assert not any("Traceback" in line or line.startswith(("error:", "internal error:")) for line in build.lines)
    assert _settled(engine, build) == []
    assert sorted(os.listdir(tmp)) == [], "temporary files left"
    return build


def test_sigint_in_each_phase_moves_no_tag_and_leaves_nothing(engine, standin_images, tag, tmp_path, registry):
    started = time.monotonic()
    timings = {}
    assert engine.image(tag) is None
    for number, (wait, phase, build) in enumerate(PHASES):
        began = time.monotonic()
        _interrupt(engine, tmp_path / f"tmp-{number}", [*build, "--tag", tag], wait, phase, "no tag moved")
        assert engine.image(tag) is None, f"{phase}: the tag moved"
        timings[phase] = round(time.monotonic() - began, 1)

    # The push: the image was built and tagged (it served); the registry's tag must not move.
    pushed = f"{registry.host}/composer-test/interrupt:{TEST_RUN}"
    auth = tmp_path / "auth"
    auth.write_text(f"{registry.username}:{registry.password}")
    began = time.monotonic()
    _interrupt(engine, tmp_path / "tmp-push", [*BUILD, "--tag", tag, "--no-smoke-test", "--push", pushed,
                                                 "--registry-auth", f"file:{auth}"],
               r"^pushing ", "pushing", "the registry's tag was not moved")
    assert registry.manifest("composer-test/interrupt", TEST_RUN).status_code == 404
    timings["pushing"] = round(time.monotonic() - began, 1)
    engine.remove_image(tag)

    # A re-run starts clean and passes.
    began = time.monotonic()
    rerun = Build([*BUILD, "--tag", tag, "--push", pushed, "--registry-auth", f"file:{auth}"], tmp_path / "tmp-rerun")
    assert rerun.finish() == 0, "\n".join(rerun.lines[-30:])
    assert engine.image(tag) is not None
    assert registry.manifest("composer-test/interrupt", TEST_RUN).status_code == 200
    assert sorted(os.listdir(tmp_path / "tmp-rerun")) == []
    timings["re-run"] = round(time.monotonic() - began, 1)
    print(f"\ninterrupt timings (s): {timings}; total {time.monotonic() - started:.0f} s")


def test_sigterm_is_143(engine, standin_images, tag, tmp_path):
    build = Build([*FRESH, "--tag", tag], tmp_path / "tmp")
    build.wait_for(r"---> Running in [0-9a-f]{12}")  # a step's container is running: it must go
    build.process.send_signal(signal.SIGTERM)
    assert build.finish() == 143
    assert re.fullmatch(r"interrupted \(SIGTERM\) while (building the image|collecting the backends' files): "
                        "no tag moved", build.lines[-1]), build.lines[-30:]
    assert _settled(engine, build) == []
    assert engine.image(tag) is None
