"""Progress reporting: long steps take an `on_line` callable and say what they do through it.

Nothing below the CLI prints; the CLI decides where lines go (stderr, or nowhere).
"""

import threading
import time
from typing import Callable

LineSink = Callable[[str], None]


def quiet(_line: str) -> None:
    """The default sink: say nothing."""


class Heartbeat:
    """Keeps a long, silent step from looking hung: when no line came for `every` seconds it
    says how long the step has run and, when `measure` can tell, the bytes done so far."""

    def __init__(self, on_line: LineSink, what: str, measure: Callable[[], int | None] = lambda: None, every: float = 10.0,
                 describe: Callable[[int], str] | None = None):
        self._sink = on_line
        self.what = what
        self.measure = measure
        self.every = every
        # How the bytes done since the start are said (default: what the engine's disk gained).
        self.describe = describe or (lambda done: f"{done / 1e9:+.2f} GB on the engine's disk since it began")
        self._last = self._started = time.monotonic()
        self._start_bytes = measure()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def on_line(self, line: str) -> None:
        """The sink to give the step: its own lines count as signs of life."""
        self._last = time.monotonic()
        self._sink(line)

    def __enter__(self) -> "Heartbeat":
        if self._sink is not quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            now = time.monotonic()
            if now - self._last < self.every:
                continue
            done = self.measure()
            amount = ""
            if done is not None and self._start_bytes is not None:
                amount = ", " + self.describe(done - self._start_bytes)
            self._last = now
            self._sink(f"{self.what}: still working ({now - self._started:.0f} s{amount})")
