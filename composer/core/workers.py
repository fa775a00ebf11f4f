"""Items of work shared among workers that each take the next item they may do when they are free:
a run's sets over several builders (composer.pipeline.compose_all).

A worker whose item failed and that no longer answers (`answers`) takes nothing more; the items
left that only it could do fail with `orphaned`. An interrupt in the main thread stops the workers
taking new items (composer.core.interrupts.STOPPING) and waits for the ones at work: each worker's
own cleanup runs before the interrupt goes on.
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, Hashable, Sequence, TypeVar

from composer.core import interrupts

Item = TypeVar("Item")
Result = TypeVar("Result")
Worker = TypeVar("Worker", bound=Hashable)


class Shared(Generic[Item, Result, Worker]):
    """`items` done by `workers`: `may(worker, item)` says who may take what; `work(worker, item)`
    returns the item's result (failures included: `failed(result)` says so)."""

    def __init__(self, items: Sequence[Item], workers: Sequence[Worker], *,
                 may: Callable[[Worker, Item], bool], work: Callable[[Worker, Item], Result],
                 failed: Callable[[Result], bool], answers: Callable[[Worker], bool],
                 orphaned: Callable[[Item, list[Worker]], Result], on_gone: Callable[[Worker], None] = lambda w: None):
        self.items, self.workers = list(items), list(dict.fromkeys(workers))
        self.may, self.work, self.failed, self.answers = may, work, failed, answers
        self.orphaned, self.on_gone = orphaned, on_gone
        self._lock = threading.Lock()
        self._pending = list(range(len(self.items)))
        self._results: dict[int, Result] = {}
        self._gone: list[Worker] = []
        self._errors: list[BaseException] = []

    def run(self) -> list[Result]:
        """Every item's result, in the items' order."""
        threads = [threading.Thread(target=self._serve, args=(worker,), name=f"worker-{n}", daemon=True)
                   for n, worker in enumerate(self.workers)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except BaseException:  # an interrupt: no new item; the ones at work end (and clean up) first
            interrupts.STOPPING.set()
            for thread in threads:
                thread.join()
            raise
        if self._errors:
            raise self._errors[0]
        for index in self._pending:  # only workers that went could have done these
            self._results[index] = self.orphaned(self.items[index], list(self._gone))
        return [self._results[index] for index in range(len(self.items))]

    def _next(self, worker: Worker) -> int | None:
        with self._lock:
            for index in self._pending:
                if self.may(worker, self.items[index]):
                    self._pending.remove(index)
                    return index
        return None

    def _serve(self, worker: Worker) -> None:
        try:
            while not interrupts.STOPPING.is_set():
                index = self._next(worker)
                if index is None:
                    return
                result = self.work(worker, self.items[index])
                self._results[index] = result
                if self.failed(result) and not self.answers(worker):
                    with self._lock:
                        self._gone.append(worker)
                    self.on_gone(worker)
                    return
        except BaseException as error:  # noqa: BLE001 (an interrupt seen here, or a bug: the main thread raises it)
            self._errors.append(error)
            interrupts.STOPPING.set()
