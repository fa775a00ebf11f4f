"""A run's sets over several builders (composer.core.workers): each builder takes the next set it may
build when it is free; one that fails a set and stops answering takes no more; an interrupt waits
for the sets at work."""

from __future__ import annotations

import threading
import time

import pytest

from composer.core import interrupts
from composer.core.workers import Shared


def _shared(items, workers, work, answers=lambda w: True, may=lambda w, i: True, gone=None):
    return Shared(items, workers, may=may, work=work, failed=lambda r: r.startswith("failed"),
                  answers=answers, orphaned=lambda item, left: f"orphaned {item} by {','.join(left)}",
                  on_gone=(gone.append if gone is not None else lambda w: None))


def test_every_item_is_done_once_in_order_and_both_workers_work_at_once():
    at_once, busy, lock = [], set(), threading.Lock()

    def work(worker, item):
        with lock:
            busy.add(worker)
            at_once.append(len(busy))
        time.sleep(0.05)
        with lock:
            busy.discard(worker)
        return f"{item} by {worker}"

    results = _shared(["a", "b", "c", "d"], ["x", "y"], work).run()
    assert [r.split(" by ")[0] for r in results] == ["a", "b", "c", "d"]
    assert {r.split(" by ")[1] for r in results} == {"x", "y"} and max(at_once) == 2


def test_an_item_goes_only_to_a_worker_that_may_take_it():
    results = _shared(["for-x", "for-y", "any"], ["x", "y"], lambda w, i: f"{i} by {w}",
                      may=lambda w, i: i == "any" or i == f"for-{w}").run()
    assert results[:2] == ["for-x by x", "for-y by y"] and results[2].startswith("any by ")


def test_a_worker_that_fails_and_stops_answering_takes_no_more_and_its_own_items_are_orphaned():
    gone, order = [], []

    def work(worker, item):
        order.append((worker, item))
        if worker == "x":
            return f"failed {item}"
        time.sleep(0.05)
        return f"{item} by {worker}"

    results = _shared(["1", "2", "3", "only-x"], ["x", "y"], work, answers=lambda w: w != "x", gone=gone,
                      may=lambda w, i: i != "only-x" or w == "x").run()
    assert gone == ["x"] and sum(1 for w, _ in order if w == "x") == 1  # one failure, then nothing more
    assert results[3] == "orphaned only-x by x"
    assert sum(r.startswith("failed") for r in results) == 1 and sum(" by y" in r for r in results) == 2


def test_a_failure_on_a_worker_that_still_answers_is_that_items_alone():
    results = _shared(["1", "2", "3"], ["x"], lambda w, i: "failed 1" if i == "1" else f"{i} by {w}").run()
    assert results == ["failed 1", "2 by x", "3 by x"]


def test_an_interrupt_lets_the_items_at_work_end_and_starts_no_other():
    started, ended = [], []
    main_stop = threading.Event()

    def work(worker, item):
        started.append(item)
        main_stop.set()
        while not interrupts.STOPPING.is_set():
            time.sleep(0.01)
        time.sleep(0.05)  # its cleanup
        ended.append(item)
        return item

    shared = _shared(["1", "2", "3", "4"], ["x", "y"], work)
    interrupts.STOPPING.clear()
    try:
        timer = threading.Timer(0.2, lambda: interrupts.STOPPING.set())
        timer.start()
        results = shared.run()
    finally:
        interrupts.STOPPING.clear()
    # The stop came from outside (as the signal handler sets it): the two at work end, the others never start.
    assert sorted(started) == sorted(ended) == ["1", "2"]
    assert results[2].startswith("orphaned") and results[3].startswith("orphaned")


def test_a_worker_thread_sees_the_stop_as_an_interrupt_the_main_thread_does_not():
    caught = []

    def worker():
        try:
            interrupts.check()
        except interrupts.Interrupted as stop:
            caught.append(stop.signum)

    interrupts.STOPPING.set()
    try:
        interrupts.check()  # the main thread: its signal handler raises, not this
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    finally:
        interrupts.STOPPING.clear()
    assert len(caught) == 1


def test_an_error_in_a_worker_reaches_the_caller():
    def work(worker, item):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        _shared(["1"], ["x"], work).run()
    interrupts.STOPPING.clear()


def test_the_composers_records_in_a_builders_cache_are_its_stages_steps_and_the_images_it_handed():
    from composer.engine.buildkit import CacheRecord, composers
    from composer.render.render import stage_names

    def record(description: str) -> CacheRecord:
        return CacheRecord(description, description, 1, False, "", None)

    found = composers([record("[collect 2/3] RUN python3 /composer/collect.py"), record("[layer-cuda 1/2] COPY x /"),
                       record("[builder 1/2] RUN make"), record("[2/2] COPY note.txt /note.txt"),
                       record("pulled from localhost/standin/tritonserver:24.09-py3@sha256:aa"),
                       record("pulled from docker.io/library/debian:12@sha256:bb"), record("local source for context")],
                      stage_names(), {"sha256:aa"})
    assert [r.id for r in found] == ["[collect 2/3] RUN python3 /composer/collect.py", "[layer-cuda 1/2] COPY x /",
                                     "pulled from localhost/standin/tritonserver:24.09-py3@sha256:aa"]
