"""Shared engines, at small scale on the real engine: three `composer build` runs at once (two of one
selection on a pruned base, one on the min base) all pass with their tags, the pruned base made
once; each run removes its own stages and no other's; `composer cache list` shows the base and the
images using it, and `cache clear` never takes an image a tag uses; a run killed in the middle of
its build leaves stages the next run removes; and on a second engine whose data root is a 5 GB
loop-mounted filesystem, a build that cannot fit is refused before work, one that fills the disk
anyway ends in one line naming it and moves no tag, and the next one, with room, passes.

Each run's state (locks, run records) is in a folder of the test's own (COMPOSER_STATE_DIR), so
runs of other checkouts on this engine are neither waited for nor cleaned after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from composer.assembly import records
from composer.assembly.cache import clear
from composer.assembly.pruning import STAGE_LABEL, run_of
from composer.engine import locks
from composer.engine.interface import Engine
from composer.resolve.plan_types import RUN_LABEL
from composer.resolve.plan_types import STAGE_LABEL as PLAN_STAGE_LABEL
from tests.conftest import TEST_LABEL_KEY, TEST_RUN
from tests.cli import image_json
from tests.integration.conftest import bases_made

pytestmark = pytest.mark.integration
# One worker runs this file and the others making small pruned bases (WORKER_GROUPS, tests/conftest.py).

REGISTRY = "localhost/standin"
SMALL = ("--registry", REGISTRY, "--version", "24.09", "-b", "python", "--label", f"{TEST_LABEL_KEY}={TEST_RUN}")
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("composer-state")


def _env(state: Path, **more: str) -> dict:
    return {**os.environ, "COMPOSER_STATE_DIR": str(state), **more}


def _start(state: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "composer", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env or _env(state))


def _stage_images(engine: Engine, label: str) -> dict[str, dict]:
    """Every image (intermediate ones too) carrying `label`: id -> labels."""
    found = engine._api.images(all=True, filters={"label": label})
    return {img["Id"]: img.get("Labels") or {} for img in found}


def _runs_of(engine: Engine) -> dict[str, str | None]:
    """Every stage or run-labelled image on the engine -> the run its labels name."""
    images = {}
    for label in (STAGE_LABEL, PLAN_STAGE_LABEL, RUN_LABEL):
        images.update({i: run_of(labels) for i, labels in _stage_images(engine, label).items()})
    return images


class _Runs(threading.Thread):
    """The run ids recorded in the state folder while the builds work."""

    def __init__(self, state: Path):
        super().__init__(daemon=True)
        self.state, self.seen, self.done = state, set(), threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.seen |= {p.stem for p in (self.state / "runs").glob("*.json")} if (self.state / "runs").is_dir() else set()
            time.sleep(0.1)


@pytest.fixture(scope="module")
def three(engine, standin_images, state):
    """Three builds at once: A and B of one selection on a pruned base, C on the min base."""
    tags = {name: f"triton-composer-test/tritonserver:shared-{name}-{uuid.uuid4().hex[:8]}" for name in "abc"}
    before = _runs_of(engine)
    every_before = set(engine.image_graph())
    bases_before = {name for name in engine.image_names() if name.startswith("triton-composer/pruned-base:")}
    watch = _Runs(state)
    watch.start()
    started = time.monotonic()
    # identity+python: a selection no other test puts on a pruned base, so its base is this test's
    # to make even while other tests build at the same time (pytest -n).
    runs = {"a": _start(state, "build", *SMALL, "-b", "identity", "--base", "pruned", "--tag", tags["a"], "--json"),
            "b": _start(state, "build", *SMALL, "-b", "identity", "--base", "pruned", "--tag", tags["b"], "--json"),
            "c": _start(state, "build", *SMALL, "--tag", tags["c"], "--json")}
    outputs, results = {}, {}
    try:
        for name, process in runs.items():
            out, err = process.communicate(timeout=1800)
            outputs[name] = (process.returncode, out, err)
        TIMES["three builds at once"] = time.monotonic() - started
        watch.done.set()
        watch.join()
        results = {name: image_json(out) if code == 0 else None for name, (code, out, _) in outputs.items()}
        described = {name: _describe(r["image_id"]) for name, r in results.items() if r}
        yield {"described": described, "tags": tags, "outputs": outputs, "results": results, "before": before, "runs": watch.seen,
               "bases_before": bases_before, "every_before": every_before}
    finally:
        watch.done.set()
        for process in runs.values():
            if process.poll() is None:
                process.kill()
        bases = {r["pruned_base"]["tag"] for r in results.values() if r and r.get("pruned_base")}
        for tag in tags.values():
            engine.remove_image(tag, force=True)
        for base in bases - bases_before:  # made by this branch's templates in this test: not another run's
            engine.remove_image(base, force=True)


def test_three_builds_at_once_pass_with_their_tags_and_the_pruned_base_is_made_once(engine, three):
    for name, (code, _out, err) in three["outputs"].items():
        assert code == 0, (name, err[-3000:])
    results = three["results"]
    for name, tag in three["tags"].items():
        assert results[name]["tag"] == tag and engine.image(tag).id == results[name]["image_id"]
        assert results[name]["smoke_test"] is not None  # exit 0: it passed
    a, b = results["a"]["pruned_base"], results["b"]["pruned_base"]
    assert a["tag"] == b["tag"] and a["image"] == b["image"] == engine.image(a["tag"]).id
    assert results["c"]["pruned_base"] is None
    if a["tag"] in three["bases_before"]:  # made before this test (a benchmark's, kept): both reuse it
        assert a["reused"] and b["reused"]
        return
    assert sorted([a["reused"], b["reused"]]) == [False, True]  # made once, by one of them
    made_by = "a" if not a["reused"] else "b"
    other = "b" if made_by == "a" else "a"
    assert f"pruned base: making {a['tag']}" in three["outputs"][made_by][2]
    assert f"pruned base: making {a['tag']}" not in three["outputs"][other][2]
    waited = f"pruned base: waiting for another run making {a['tag']}" in three["outputs"][other][2]
    TIMES["the second pruned run waited for the first"] = float(waited)
    print(f"three builds at once: {TIMES['three builds at once']:.0f} s; the second waited: {waited}")


def test_every_run_removed_its_own_stages_and_left_its_record_behind_none(engine, three, state):
    assert len(three["runs"]) == 3, three["runs"]  # each run was on record while it worked
    assert not list((state / "runs").glob("*.json"))  # and took its record away at the end
    assert _holds(engine, three["runs"]) == []  # and its hold on the image it made: the tag holds it now
    left = {image: run for image, run in _runs_of(engine).items()
            if image not in three["before"] and run in three["runs"]}
    assert left == {}, left


def test_making_the_pruned_base_leaves_no_step_every_run_shares(engine, three):
    """The base's stages name their run from their first step: an `ARG COMPOSER_RUN` step before the
    label was an image every run shares that no label finds, so no run or `cache clear` removed it,
    and the decide and collect stages under it (the full image's tree) stayed after `cache clear --all`."""
    assert any(r and not r["pruned_base"]["reused"] for r in three["results"].values()), three["results"]
    made = sorted(set(engine.image_graph()) - three["every_before"])
    steps = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}} {{json .ContainerConfig.Cmd}}", *made],
                           capture_output=True, text=True, timeout=120).stdout.splitlines() if made else []
    assert [line for line in steps if "ARG COMPOSER_RUN" in line] == []


def _describe(image_id: str) -> list[str]:
    """What an image id is made of, line by line: its history, its layers, its configuration."""
    history = subprocess.run(["docker", "history", "--no-trunc", "--format", "{{.CreatedAt}} {{.CreatedBy}} {{.Size}}",
                              image_id], capture_output=True, text=True, timeout=60).stdout.splitlines()
    inspect = subprocess.run(["docker", "image", "inspect", "--format",
                              "{{json .RootFS.Layers}}\n{{json .Config}}\n{{.Created}}", image_id],
                             capture_output=True, text=True, timeout=60).stdout.splitlines()
    return history + inspect


def _holds(engine: Engine, runs: set[str]) -> list[str]:
    """The holds of `runs` on the engine (other tests' runs, at work beside these, hold their own)."""
    return [name for name in engine.image_names()
            if records.is_hold(name) and name.rpartition(":")[2].split("-")[0] in runs]


def test_three_builds_at_once_again_and_again_pass_share_their_stages_and_hold_nothing_after(engine, three, state):
    """Issue 44: the same three at once, twice more, their images removed between rounds so each
    round composes again from the build cache the first round left: two runs of one selection load
    the very same image id at once, and a run's end (or a discard) never takes an image another run
    holds. Nothing of a run stays: no hold, no record, no run-labelled image."""
    started = time.monotonic()
    assert _holds(engine, three["runs"]) == [] and not list((state / "runs").glob("*.json"))
    ids = {name: three["results"][name]["image_id"] for name in "abc"}
    for round_ in range(2):
        for tag in three["tags"].values():
            engine.remove_image(tag, force=True)
        watch = _Runs(state)
        watch.start()
        runs = {name: _start(state, "build", *SMALL, *(("-b", "identity", "--base", "pruned") if name != "c" else ()),
                             "--tag", three["tags"][name], "--json") for name in "abc"}
        outputs = {name: process.communicate(timeout=1800) for name, process in runs.items()}
        watch.done.set()
        watch.join()
        for name, process in runs.items():
            assert process.returncode == 0, (round_, name, outputs[name][1][-3000:])
            result = image_json(outputs[name][0])
            if result["image_id"] != ids[name]:  # the same inputs, the same image; else what differs
                then, now = three["described"][name], _describe(result["image_id"])
                assert result["image_id"] == ids[name], (round_, name, [(a, b) for a, b in zip(then, now) if a != b][:4],
                                                         len(then), len(now), outputs[name][1][-2500:])
            assert result["smoke_test"]["recorded_at"], (round_, name)  # its PASS recorded by the first round
        assert watch.seen and _holds(engine, watch.seen) == [], round_
        assert not list((state / "runs").glob("*.json")), round_
        # This round's runs: another file's build at work beside it (pytest -n) labels its own stages.
        assert {i: r for i, r in _runs_of(engine).items() if i not in three["before"] and r in watch.seen} == {}
    TIMES["three at once, twice more"] = time.monotonic() - started


def test_cache_list_shows_the_pruned_base_and_clear_never_takes_a_tagged_image(engine, three, state):
    started = time.monotonic()
    listed = subprocess.run([sys.executable, "-m", "composer", "cache", "list", "--json"], capture_output=True,
                            text=True, env=_env(state), timeout=600)
    assert listed.returncode == 0, listed.stderr
    base = three["results"]["a"]["pruned_base"]
    entries = {e["image"]: e for e in json.loads(listed.stdout)["entries"]}
    entry = entries[base["image"]]
    assert entry["kind"] == "pruned base" and base["tag"] in entry["tags"] and entry["size"] > 0
    assert set(entry["used_by"]) >= {three["tags"]["a"], three["tags"]["b"]}
    assert three["tags"]["c"] not in entry["used_by"] and entry["last_used"]
    cached = [e for e in entries.values() if e["kind"] == "cached stage"]  # the build cache the three share
    assert cached and all(e["key"] and e["unique_size"] is not None for e in cached), cached
    # Clear in the state the other tests' builds use (the default), the build cache held as a build at
    # work holds it: the other tests' stages stay theirs (cleared, the next builds of the session would
    # make the full image's collected tree again).
    default = {k: v for k, v in os.environ.items() if k != "COMPOSER_STATE_DIR"}
    with locks.using_host(engine.identity(), records.CACHE_LOCK):
        cleared = subprocess.run([sys.executable, "-m", "composer", "cache", "clear", "--json"], capture_output=True,
                                 text=True, env=default, timeout=600)
    assert not [e for e in json.loads(cleared.stdout)["removed"] if e["kind"] == "cached stage"], cleared.stdout[-2000:]
    assert cleared.returncode == 0, cleared.stderr
    for tag in [*three["tags"].values(), base["tag"]]:
        assert engine.image(tag) is not None, tag
    # --all, for this base only (the engine is shared): kept while a tag uses it, removed once none does.
    only = lambda e: e.image == base["image"]  # noqa: E731
    done = clear(engine, everything=True, only=only)
    assert not done.removed and len(done.kept) == 1
    why = done.kept[0][1]
    assert why.startswith("used by ") and three["tags"]["a"] in why and three["tags"]["b"] in why, why
    # Bases of other selections on the engine may stand on this one's family layers: kept for them.
    others = [n for n in why[len("used by "):].split(", ") if n.startswith("triton-composer/pruned-base:")]
    engine.remove_image(three["tags"]["a"])
    engine.remove_image(three["tags"]["b"])
    done = clear(engine, everything=True, only=only)
    if others:
        assert not done.removed and engine.image(base["tag"]) is not None, others
    elif not done.removed:  # another file's build (pytest -n) took it up meanwhile: kept for that user, not a or b
        why = done.kept[0][1] if done.kept else ""
        users = set(why[len("used by "):].split(", ")) if why.startswith("used by ") else set()
        assert why in ("a build is using it", "changed while clearing: used by a tagged image") or (
            users and not users & {three["tags"]["a"], three["tags"]["b"]}), (why, done.kept)
        assert engine.image(base["tag"]) is not None
    else:
        assert [e.image for e in done.removed] == [base["image"]] and engine.image(base["tag"]) is None
    assert engine.image(three["tags"]["c"]) is not None
    TIMES["cache list and clear"] = time.monotonic() - started


def test_a_run_killed_mid_build_leaves_stages_the_next_run_removes(engine, standin_images, state, tmp_path):
    """A build killed (SIGKILL: no clean-up of its own, as when the engine or the machine restarts)
    while it makes its pruned base leaves its stages and its record; the next run removes them."""
    started = time.monotonic()
    tag = f"triton-composer-test/tritonserver:killed-{uuid.uuid4().hex[:8]}"
    # A selection of its own (the onnxruntime backend too), so its pruned base is made, not found.
    log = tmp_path / "killed.log"  # a file, not a pipe: a pipe no one reads would stop the build when full
    temporary = tmp_path / "tmp"  # the killed run's temporary folders (its context, its layers) land here
    temporary.mkdir()
    with open(log, "w") as sink:
        killed = subprocess.Popen([sys.executable, "-m", "composer", "build", *SMALL, "-b", "onnxruntime", "--base",
                                   "pruned", "--tag", tag], stdout=sink, stderr=subprocess.STDOUT, text=True,
                                  env=_env(state, TMPDIR=str(temporary)))
    run, left = None, {}
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not left:
            records = list((state / "runs").glob("*.json")) if (state / "runs").is_dir() else []
            run = records[0].stem if records else None
            if run:
                left = {i: r for i, r in _runs_of(engine).items() if r == run}
            assert killed.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        time.sleep(3)  # a few more steps of its stages
        killed.send_signal(signal.SIGKILL)
        killed.wait(60)
        left = {i: r for i, r in _runs_of(engine).items() if r == run}
        assert left and (state / "runs" / f"{run}.json").is_file()
        folders = sorted(p.name for p in temporary.iterdir())
        assert any(name.startswith("triton-composer-context-") for name in folders), folders
        listed = subprocess.run([sys.executable, "-m", "composer", "cache", "list", "--json"], capture_output=True,
                                text=True, env=_env(state), timeout=600)
        leftovers = [e for e in json.loads(listed.stdout)["entries"] if e["run"] == run]
        assert leftovers and not any(e["run_alive"] for e in leftovers)
        nxt = subprocess.run([sys.executable, "-m", "composer", "build", *SMALL, "--tag", tag, "--no-smoke-test"],
                             capture_output=True, text=True, env=_env(state), timeout=1800)
        assert nxt.returncode == 0, nxt.stderr[-3000:]
        assert f"removed what run {run} left (its process {killed.pid} ended)" in nxt.stderr
        assert f"{len(folders)} temporary folder" in nxt.stderr and list(temporary.iterdir()) == [], nxt.stderr[-2000:]
        assert {i: r for i, r in _runs_of(engine).items() if r == run} == {}
        assert not (state / "runs" / f"{run}.json").exists()
    finally:
        if killed.poll() is None:
            killed.kill()
        engine.remove_image(tag, force=True)
        # The base the killed run was making: this test's. The engine may finish a build whose client
        # was killed and tag it after that (seen once: a base left tagged): removed until it stays gone.
        bases = bases_made(log.read_text())
        quiet_since = time.monotonic()
        while bases and time.monotonic() - quiet_since < 15:
            for base in bases:
                if engine.image(base) is not None:
                    engine.remove_image(base, force=True)
                    quiet_since = time.monotonic()
            time.sleep(1)
        TIMES["killed run and the next"] = time.monotonic() - started


# -- a disk of 5 GB (the stand-ins take 1.7): refused before work, full during the build, passes with room ------------------

DISK_SLOT = 247  # the second dockerd's addresses (172.17.247.0/24)


@pytest.fixture
def small_disk(standins_archive, tmp_path):
    """A second dockerd whose data root is on a 5 GB ext4 filesystem in a loop-mounted file, with
    the 24.09 small stand-ins loaded; stopped, unmounted and removed after."""
    from triton_standins.engines import Dockerd, unmount_under

    if os.geteuid() != 0:
        pytest.skip("a loop-mounted filesystem needs root")
    image, mount = tmp_path / "disk.ext4", tmp_path / "disk"
    subprocess.run(["truncate", "-s", "5G", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mount.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    dockerd = None
    try:
        dockerd = Dockerd(mount / "dockerd", slot=DISK_SLOT).start()
        dockerd.load(standins_archive)
        yield dockerd, mount
    finally:
        if dockerd is not None:
            dockerd.stop()
        unmount_under(mount)
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        image.unlink(missing_ok=True)


def test_a_small_disk_refuses_then_fills_then_passes_with_room(small_disk, state):
    dockerd, mount = small_disk
    started = time.monotonic()
    env = _env(state, DOCKER_HOST=dockerd.host)
    tag = f"triton-composer-test/tritonserver:disk-{uuid.uuid4().hex[:8]}"
    filler = mount / "filler"
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    # Leave 80 MB: less than any estimate (its margin alone is 512 MiB), less than the build writes.
    subprocess.run(["fallocate", "-l", str(free - 80 * 1000 ** 2), str(filler)], check=True)
    refused = subprocess.run([sys.executable, "-m", "composer", "build", *SMALL, "--tag", tag, "--verbose"],
                             capture_output=True,
                             text=True, env=env, timeout=1800)
    assert refused.returncode == 1, refused.stderr
    error = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and " needed, " in error[0] and f" free at {mount}/dockerd/data (engine {dockerd.host})" \
        in error[0] and error[0].endswith("free some space (composer cache list) and run again"), refused.stderr
    assert "Step " not in refused.stderr and "pruned base: making" not in refused.stderr  # before any work
    assert dockerd.docker("image", "inspect", tag).returncode != 0
    TIMES["refused for space"] = time.monotonic() - started

    # Past the check (the python API's check_space=False), the build fills the disk for real.
    step = time.monotonic()
    full = subprocess.run([sys.executable, "-c", _NO_CHECK, tag], capture_output=True, text=True, env=env,
                          timeout=1800)
    assert full.returncode == 3, (full.stdout, full.stderr[-3000:])
    line = full.stdout.strip()
    assert line.startswith(f"no space left on device at {mount}/dockerd/data (engine {dockerd.host})"), line
    assert f"{tag} was not moved" in line and "\n" not in line
    assert dockerd.docker("image", "inspect", tag).returncode != 0
    leftover = dockerd.docker("ps", "-aq").stdout.split()
    assert leftover == [], leftover
    TIMES["disk full during the build"] = time.monotonic() - step

    step = time.monotonic()
    filler.unlink()
    passed = subprocess.run([sys.executable, "-m", "composer", "build", *SMALL, "--tag", tag], capture_output=True,
                            text=True, env=env, timeout=1800)
    assert passed.returncode == 0, passed.stderr[-3000:]
    assert "disk: about " in passed.stderr and dockerd.docker("image", "inspect", tag).returncode == 0
    TIMES["the next build, with room"] = time.monotonic() - step


_NO_CHECK = """
import sys
from composer.catalog.catalog import Catalog
from composer.core.errors import NoSpace
from composer.engine.connect import connect
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from tests.specs import spec

engine = connect()
plan = resolve(engine, spec(backends=("python",), version="24.09", registry="localhost/standin", tag=sys.argv[1]),
               Catalog.load()).plan
try:
    build_image(engine, plan, check_space=False)
except NoSpace as error:
    print(error.message)
    sys.exit(3)
"""


def test_times():
    """The run time of each step above (pytest -s shows them)."""
    print(json.dumps({k: round(v, 1) for k, v in TIMES.items()}))
