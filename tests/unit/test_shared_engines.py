"""Shared engines: host locks and run records, the disk-space estimate and refusal, and which
leftovers and pruned bases `composer cache clear` takes (composer.engine.locks, composer.assembly.space,
composer.assembly.cache)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from collections import namedtuple

import pytest

from composer.assembly import space
from composer.assembly.cache import DAY, Entry, select
from composer.core.errors import EngineError, EngineUnavailable, NoSpace
from composer.engine import locks

Usage = namedtuple("Usage", "total used free")


def _hold(path_env: str, key: str, ready, release) -> None:
    os.environ["COMPOSER_STATE_DIR"] = path_env
    with locks.making("engine", key):
        ready.set()
        release.wait(10)


def test_a_second_run_waits_for_the_first_making_the_same_base_and_says_so(tmp_path):
    context = multiprocessing.get_context("fork")
    ready, release = context.Event(), context.Event()
    holder = context.Process(target=_hold, args=(os.environ["COMPOSER_STATE_DIR"], "base:1", ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        said = []
        started = time.monotonic()
        context.Process(target=lambda: (time.sleep(0.5), release.set())).start()
        with locks.making("engine", "base:1", on_wait=lambda: said.append("waiting")) as held:
            waited = time.monotonic() - started
        assert held and said == ["waiting"] and waited >= 0.4
        with locks.making("engine", "base:2", on_wait=lambda: said.append("again")):  # another base: no wait
            pass
        with locks.making("another engine", "base:1", on_wait=lambda: said.append("again")):
            pass
        assert said == ["waiting"]
    finally:
        release.set()
        holder.join(10)


def test_a_base_in_use_is_not_removable_and_a_dead_holder_drops_its_lock(tmp_path):
    with locks.using("engine", "base:1"), locks.using("engine", "base:1"):  # many users at once
        with locks.removable("engine", "base:1") as free:
            assert free is False
    with locks.removable("engine", "base:1") as free:
        assert free is True
    # A process killed while it holds the lock leaves none (the kernel drops fcntl locks).
    code = ("import os,sys,time; os.environ['COMPOSER_STATE_DIR']=sys.argv[1]\n"
            "from composer.engine import locks\n"
            "with locks.using('engine','base:9'):\n print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, os.environ["COMPOSER_STATE_DIR"]], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with locks.removable("engine", "base:9") as free:
            assert free is False
        child.kill()
        child.wait(10)
        with locks.removable("engine", "base:9") as free:
            assert free is True
    finally:
        child.kill()


def test_a_run_is_on_record_while_it_works_and_a_dead_ones_record_says_dead():
    with locks.run_record("r1", "engine") as record:
        assert record.alive and locks.live_runs() == {"r1"}
    assert locks.run_records() == []
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = locks.RunRecord("r2", child.pid, "1", time.time(), "engine")
    (locks.state_dir() / "runs" / "r2.json").write_text(__import__("json").dumps(dead.to_dict()))
    assert [r.run for r in locks.run_records()] == ["r2"] and not locks.run_records()[0].alive
    reused = locks.RunRecord("r3", os.getpid(), "not this process's start", time.time(), "engine")
    assert not reused.alive  # a live pid that another process took is not the run
    locks.forget("r2")
    assert locks.run_records() == []


def test_a_run_of_another_state_folder_is_at_work_for_this_one_and_a_killed_runs_lock_goes(tmp_path, monkeypatch):
    """A sweep (a test's, `cache clear`) run with another COMPOSER_STATE_DIR must see a run at work
    (its stages in use): the run holds a lock in the host's lock folder too, which a killed run's
    process lets go of, and the next look removes."""
    script = ("import sys, time; from composer.engine import locks\n"
              "with locks.run_record('far', 'engine'):\n    print('at work', flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "COMPOSER_STATE_DIR": str(tmp_path / "other")})
    try:
        assert child.stdout.readline().strip() == "at work"
        assert locks.run_records() == [] and locks.live_runs() == {"far"}  # not on this folder's record
        child.kill()
        child.wait(10)
        lock = Path(os.environ["COMPOSER_HOST_LOCKS"]) / "run-far.lock"
        assert lock.exists() and locks.live_runs() == set() and not lock.exists()
    finally:
        child.kill()
    with locks.run_record("near", "engine"):
        assert locks.live_runs() == {"near"}
    assert locks.runs_at_work_on_host() == set() and not list(Path(os.environ["COMPOSER_HOST_LOCKS"]).glob("run-*"))


def test_a_run_that_lost_its_engine_stays_on_record_and_any_other_failure_does_not():
    with pytest.raises(EngineUnavailable):
        with locks.run_record("lost", "engine"):
            raise EngineUnavailable("lost the engine")
    assert [r.run for r in locks.run_records()] == ["lost"]  # for the next run on the engine to clean
    with pytest.raises(NoSpace):
        with locks.run_record("full", "engine"):
            raise NoSpace("no space")
    assert [r.run for r in locks.run_records()] == ["lost"]  # it cleaned after itself
    with pytest.raises(EngineError):  # its cleanup failed (Podman's image list, found by two runs at once)
        with locks.run_record("half", "engine"):
            locks.cleanup_unfinished("half")
            raise EngineError("cannot list images")
    assert [r.run for r in locks.run_records()] == ["half", "lost"]
    with locks.run_record("half-again", "engine"):
        pass  # a later run of this process is not held back by the earlier one's flag
    assert [r.run for r in locks.run_records()] == ["half", "lost"]
    locks.forget("lost")
    locks.forget("half")


def test_a_runs_temporary_folders_are_on_its_record_and_a_dead_runs_are_removed(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(locks.tempfile, "tempdir", str(tmp_path))
    with locks.temporary_folder("layers") as early:  # made before the run started: on its record too
        with locks.run_record("r4", "engine"):
            late = locks.make_folder("context")
            raw = json.loads((locks.state_dir() / "runs" / "r4.json").read_text())
            assert raw["folders"] == [str(early), str(late)]
            locks.drop_folder(late)
            assert json.loads((locks.state_dir() / "runs" / "r4.json").read_text())["folders"] == [str(early)]
        assert not late.exists() and early.is_dir()
    assert not early.exists() and locks.run_records() == []
    # A dead run's folders go; anything its record names that this module did not make stays.
    made = locks.make_folder("context")
    (made / "Dockerfile").write_text("FROM x\n")
    other = tmp_path / "mine"
    other.mkdir()
    dead = locks.RunRecord("r5", 1, "", time.time(), "engine", (str(made), str(other), str(tmp_path / "gone")))
    assert locks.remove_folders(dead) == [str(made)] and not made.exists() and other.is_dir()
    locks.drop_folder(made)


def test_the_state_folder_follows_xdg_state_home(monkeypatch, tmp_path):
    monkeypatch.delenv("COMPOSER_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert locks.state_dir() == tmp_path / "triton-composer"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert locks.state_dir() == tmp_path / "home" / ".local" / "state" / "triton-composer"


class _Engine:
    def __init__(self, free: int | None, sizes: dict):
        self.free, self.sizes = free, sizes
        self.endpoint = namedtuple("E", "url")("unix:///var/run/docker.sock")

    def storage(self):
        return None if self.free is None else ("/var/lib/docker", Usage(10 ** 12, 0, self.free))

    def identity(self):
        return "ID"

    def image(self, ref):
        size = self.sizes.get(ref)
        return None if size is None else namedtuple("I", "size")(size)


def test_the_estimate_counts_the_parts_the_context_and_a_base_to_make(ngc_plan, tmp_path):
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    engine = _Engine(None, {plan.full.id: 20 * 10 ** 9, plan.min.id: 8 * 10 ** 9})
    (tmp_path / "wheel.whl").write_bytes(b"x" * 1000)
    guess = space.estimate(engine, plan, None, tmp_path, base_to_make=True)  # no probe: full less min
    assert (guess.parts, guess.context, guess.base) == (12 * 10 ** 9, 1000, 8 * 10 ** 9)
    assert guess.needed == 12 * 10 ** 9 + 2000 + 8 * 10 ** 9 // 3 + space.MARGIN
    assert space.estimate(engine, plan, None, None, base_to_make=False).base == 0


def test_a_build_that_cannot_fit_is_refused_in_one_line_naming_the_disk(ngc_plan):
    guess = space.Estimate(parts=2 * 10 ** 9, context=0, base=0)
    with pytest.raises(NoSpace) as refused:
        space.check(_Engine(1 * 10 ** 9, {}), guess)
    message = refused.value.message
    assert "\n" not in message and message.startswith(f"{guess.needed / 1e9:.1f} GB needed, 1.0 GB free at /var/lib/docker")
    assert "(engine unix:///var/run/docker.sock): free some space (composer cache list) and run again" in message
    assert space.check(_Engine(100 * 10 ** 9, {}), guess).startswith("disk: about 2.5 GB needed, 100.0 GB free")
    assert space.check(_Engine(None, {}), guess).startswith("note: free space not checked")


def test_the_engines_no_space_error_is_told_apart():
    assert space.no_space("build failed", "write /var/lib/docker/x: No space left on device")
    assert not space.no_space("build failed", "exit code 1")
    line = space.disk_full(_Engine(5, {}), "localhost/x:1").message
    assert line.startswith("no space left on device at /var/lib/docker") and "localhost/x:1 was not moved" in line


def _entry(kind, name, *, used_by=(), alive=False, created=0.0, last_used=None):
    return Entry(kind, "sha256:" + name, (f"triton-composer/pruned-base:{name}",) if kind == "pruned base" else (),
                 1, 1, created, last_used, used_by=tuple(used_by), run="r" if kind != "pruned base" else None,
                 run_alive=alive)


def test_clear_never_takes_a_base_a_tag_uses_nor_a_live_runs_leftover():
    now = 100 * DAY
    entries = [_entry("pruned base", "used", used_by=["localhost/x:1"], last_used=0),
               _entry("pruned base", "old", last_used=now - 10 * DAY),
               _entry("pruned base", "new", last_used=now - DAY / 2),
               _entry("stage", "live", alive=True, created=0),
               _entry("stage", "unknown-recent", created=now - 3600),
               _entry("stage", "unknown-old", created=now - 2 * DAY)]
    chosen, kept = select(entries, older_than_days=None, everything=False, now=now)
    assert [e.image[7:] for e in chosen] == ["unknown-old"]
    chosen, _ = select(entries, older_than_days=7, everything=False, now=now)  # leftovers too: older than DAYS
    assert [e.image[7:] for e in chosen] == ["old"]
    chosen, _ = select(entries, older_than_days=1, everything=False, now=now)
    assert [e.image[7:] for e in chosen] == ["old", "unknown-old"]
    chosen, kept = select(entries, older_than_days=None, everything=True, now=now)
    assert [e.image[7:] for e in chosen] == ["old", "new", "unknown-recent", "unknown-old"]
    assert {e.image[7:]: why for e, why in kept} == {"used": "used by localhost/x:1", "live": "run r is at work"}


def test_an_old_base_goes_once_a_day_old_or_with_all_unless_a_tagged_image_stands_on_it():
    """An untagged pruned base (its tag moved to one made again) is found by no build, but a build
    that began on it (another host's, with locks of its own) may still be at work: it goes as an
    unrecorded run's leftovers do, never while a tagged image stands on it."""
    now = 100 * DAY
    entries = [_entry("old base", "orphan", created=now - 2 * DAY), _entry("old base", "recent", created=now - 60),
               _entry("old base", "held", used_by=["team/t:1"])]
    chosen, kept = select(entries, older_than_days=None, everything=False, now=now)
    assert [e.image[7:] for e in chosen] == ["orphan"]
    assert {e.image[7:]: why for e, why in kept} == {
        "held": "used by team/t:1", "recent": "made within 1 days (a build begun on it may be at work)"}
    chosen, _ = select(entries, older_than_days=None, everything=True, now=now)
    assert [e.image[7:] for e in chosen] == ["orphan", "recent"]
    assert "untagged (its tag moved)" in entries[0].line()


def test_a_pruned_bases_tag_is_found_as_builds_name_it_whatever_the_engine_prefixes():
    # Podman lists the base as localhost/...: `cache list` missed it, and `cache clear` would have
    # asked for the lock under a name no build holds.
    from composer.assembly.pruning import base_tag_in

    assert base_tag_in(["localhost/triton-composer/pruned-base:24.09-abc"]) == "triton-composer/pruned-base:24.09-abc"
    assert base_tag_in(["x:1", "triton-composer/pruned-base:24.09-abc"]) == "triton-composer/pruned-base:24.09-abc"
    assert base_tag_in(["localhost/triton-composer/pruned-base-x:1", "registry/triton-composer/pruned-base:1"]) is None


def test_clearing_an_old_base_takes_the_build_steps_under_it_as_its_tag_would_have():
    """An old base removed without prune left its unlabelled parent (~100 MB) dangling, seen by no
    listing; a run's leftover stage is still removed alone (its parents are other runs' cache)."""
    from composer.assembly.cache import _remove_untagged

    removed = []

    class Engine:
        def image(self, ref):
            return namedtuple("I", "tags")(())

        def remove_image(self, ref, *, force=False, prune=True):
            removed.append((ref, prune))

    assert _remove_untagged(Engine(), "sha256:old", prune=True) and _remove_untagged(Engine(), "sha256:stage")
    assert removed == [("sha256:old", True), ("sha256:stage", False)]


def test_a_compositions_first_steps_on_a_base_are_part_of_it_not_an_old_base():
    """After every --base pruned build, the composition's first steps on its base (ENV, ENTRYPOINT,
    ARG: no layer) stay as build cache; cache list called them an old base, and cache clear only
    untagged the base they stand on (freed nothing) until a second clear."""
    from composer.assembly.cache import _steps_of
    from composer.assembly.pruning import BASE_LABEL

    Info = namedtuple("Info", "id labels layers")
    base = Info("sha256:base", {BASE_LABEL: "k1"}, ("sha256:l1", "sha256:l2"))
    step = Info("sha256:step", {BASE_LABEL: "k1"}, ("sha256:l1", "sha256:l2"))
    other_key = Info("sha256:old", {BASE_LABEL: "k0"}, ("sha256:l1", "sha256:l2"))
    more_layers = Info("sha256:more", {BASE_LABEL: "k1"}, ("sha256:l1", "sha256:l2", "sha256:l3"))
    assert _steps_of(step, [base]) and not _steps_of(other_key, [base]) and not _steps_of(more_layers, [base])
    assert not _steps_of(step, [])  # its base untagged too: an old base, listed and cleared as one
