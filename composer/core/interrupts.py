"""SIGINT and SIGTERM: one way to stop a command, whatever it is doing.

`handling()` makes both signals raise Interrupted in the main thread, so every `finally` and
`except BaseException` on the way out runs (the run's stages, containers and temporary folders
go, no tag moves), and a second signal while that cleanup runs is ignored rather than cutting it
short. Interrupted is a KeyboardInterrupt, not a ComposerError: the many places that catch a
ComposerError to go on (a missing report, the next set of a run) must never swallow an interrupt.
Only the CLI turns it into its one line and exit code (128 + the signal: 130, 143).

`Phases` says what the command was doing, read from the progress lines it already reports.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Set once a signal came: worker threads (a push's uploads) end their waits and retries on it, so
# the main thread's cleanup does not wait for a retry's back-off.
STOPPING = threading.Event()


_STOPPED_BY: list[int] = []  # the first signal, for worker threads' own Interrupted (check())


def pause(seconds: float) -> None:
    """time.sleep that ends early when the command is being interrupted."""
    STOPPING.wait(seconds)


def check() -> None:
    """In a worker thread (a set on its own builder, composer.core.workers), a long step ends here
    once the command is being stopped: the signal itself reaches only the main thread."""
    if STOPPING.is_set() and threading.current_thread() is not threading.main_thread():
        raise Interrupted(_STOPPED_BY[0] if _STOPPED_BY else signal.SIGINT, "working on another builder")


class Interrupted(KeyboardInterrupt):
    """The command was stopped by `signum`; `phase` is what it was doing then."""

    def __init__(self, signum: int, phase: str = ""):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.phase = phase

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        return f"interrupted ({self.name}) while {self.phase or 'starting'}"


# What a progress line says the command is doing: the first rule whose text the line starts with
# (or, for the engine's build output, holds) names the phase. Lines no rule knows keep the phase.
_STARTS = (
    ("resolving ", "resolving the base images"),
    ("full image:", "resolving the base images"),
    ("min image:", "resolving the base images"),
    ("looking inside ", "probing the base images"),
    ("fetching wheels", "fetching wheels"),
    ("wheelhouse:", "fetching wheels"),
    ("build context:", "building the image"),
    ("pruned base: making", "making the pruned base"),
    ("built ", "writing the image's layers"),
    ("writing layer", "writing the image's layers"),
    ("layer ", "writing the image's layers"),  # "layer 1 of 9: ...: the engine holds it already"
    ("unchanged:", "measuring the image"),
    ("SBOM:", "writing the image's layers"),
    ("composed ", "measuring the image"),
    ("starting tritonserver", "smoke-testing the image"),
    ("waiting for models", "smoke-testing the image"),
    ("smoke test: passed at", "tagging the image"),
    ("pushing ", "pushing"),
    ("compressing ", "pushing"),
    ("blob ", "copying blobs"),
    ("saving ", "writing the bundle"),
    ("writing ", "writing the bundle"),
    ("loading base images", "loading the bundle"),
    ("mirror ", "mirroring"),
    ("pulling ", "pulling"),
)
_HOLDS = (  # the engine's build output: which stage runs
    ("/composer/collect.py", "collecting the backends' files"),
    ("/composer/prune.py", "deciding what the pruned base keeps"),
    ("prove.sh", "proving the pruned base"),
)


class Phases:
    """What the command is doing now, as its progress lines say; `see` is a progress sink."""

    def __init__(self, first: str = "starting"):
        self.now = first
        self._lock = threading.Lock()

    def see(self, line: str) -> None:
        text = line.strip()
        for start, phase in _STARTS:
            if text.startswith(start):
                self._set(phase)
                return
        for part, phase in _HOLDS:
            if part in text:
                self._set(phase)
                return

    def set(self, phase: str) -> None:
        self._set(phase)

    def _set(self, phase: str) -> None:
        with self._lock:
            if phase == "writing the bundle" and self.now in ("writing the image's layers", "building the image"):
                return  # "writing ..." of the image's own layers is not a bundle
            self.now = phase


@contextlib.contextmanager
def handling(phases: Phases | None = None) -> Iterator[list[int]]:
    """SIGINT and SIGTERM raise Interrupted (naming `phases.now`) in the main thread while the
    block runs; the list yielded holds the signals received. After the first, further signals are
    ignored until the process ends (the cleanup on the way out finishes), so the handlers stay
    installed once one came; otherwise the previous ones come back when the block ends. Outside
    the main thread (where Python cannot set handlers) nothing changes."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum, _frame) -> None:
        received.append(signum)
        _STOPPED_BY[:] = _STOPPED_BY or [signum]
        STOPPING.set()
        if len(received) > 1:
            return  # a second signal while cleaning up: ignored, so the cleanup is not cut short
        stop = Interrupted(signum, phases.now if phases else "")
        if _held.depth:
            _held.pending = stop  # raised when the held block ends (holding())
            return
        raise stop

    STOPPING.clear()
    _STOPPED_BY.clear()
    previous = {signum: signal.signal(signum, on_signal) for signum in SIGNALS}
    try:
        yield received
    finally:
        if not received:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


class _Held:
    depth = 0
    pending: Interrupted | None = None


_held = _Held()


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """A short step an interrupt must not cut in two (a container created and not yet known to
    the code that removes it): a signal that comes meanwhile is raised when the step ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held.depth += 1
    try:
        yield
    finally:
        _held.depth -= 1
        if not _held.depth and _held.pending is not None:
            stop, _held.pending = _held.pending, None
            raise stop
