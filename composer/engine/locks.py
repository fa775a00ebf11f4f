"""What runs on this host share about an engine: locks on what they make once, and who is working.

Two `composer build` runs on one engine may need the same pruned base at once. The base is made
once: the first run holds the base's *make* lock (an exclusive fcntl lock on a file) while it
finds or makes it; the second waits for that lock and then finds the base made. Every run that
builds on the base holds its *use* lock shared until it is done, so `composer cache clear` (which
takes it exclusively, without waiting) never removes a base a build is standing on.

A run also leaves a record (its id, pid and start) while it works, so a later run, or `composer
cache clear`, can tell the leftovers of a run that died (an engine restart, a killed process) from
the images of one still working. Locks are fcntl locks: the kernel drops them when the process
dies, so a crash leaves no stale lock, only a file.

All of it lives under the state folder: $XDG_STATE_HOME/triton-composer (else
~/.local/state/triton-composer), or $COMPOSER_STATE_DIR when set.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from composer.core.errors import ComposerError, EngineUnavailable
from composer.core.files import write_file

RECORD_FORMAT = 1


def state_dir() -> Path:
    """Where the composer keeps what runs on this host share (locks, run records)."""
    given = os.environ.get("COMPOSER_STATE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "triton-composer"


def cache_dir() -> Path:
    """Where the composer keeps what it can always make again, shared by every state folder of this
    machine (BuildKit's copies of the engine's images, tools): COMPOSER_CACHE_DIR, else
    $XDG_CACHE_HOME/triton-composer (~/.cache/triton-composer)."""
    given = os.environ.get("COMPOSER_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "triton-composer"


def _folder(name: str) -> Path:
    folder = state_dir() / name
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as error:
        raise ComposerError(f"cannot make the composer's state folder {folder}: {error.strerror} "
                            "(set COMPOSER_STATE_DIR to a writable folder)") from None
    return folder


def write_record(kind: str, key: str, record: dict) -> None:
    """Keep `record` (JSON) under the state folder as `kind`'s entry for `key` (any text: hashed),
    written whole or not at all (core.files.write_file): what a later run may reuse."""
    write_file(_folder(kind) / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json",
               json.dumps(record, sort_keys=True).encode(), 0o600)


def read_record(kind: str, key: str) -> dict | None:
    """`kind`'s entry for `key`, or None when there is none or it cannot be read."""
    path = state_dir() / kind / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def lock_path(engine_id: str, key: str, kind: str) -> Path:
    """The lock file of `key` (e.g. a pruned base's tag) on one engine; `kind` is make or use."""
    name = hashlib.sha256(f"{engine_id}\n{key}".encode()).hexdigest()[:32]
    return _folder("locks") / f"{name}.{kind}.lock"


HOST_LOCKS = "/var/tmp/triton-composer-locks"  # every process of the host, whatever its state folder


def _host_folder() -> Path:
    folder = Path(os.environ.get("COMPOSER_HOST_LOCKS") or HOST_LOCKS)
    if not folder.is_dir():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o1777)  # as /tmp: any user's composer locks here, none removes another's file
        except OSError as error:
            raise ComposerError(f"cannot make the host's lock folder {folder}: {error.strerror} "
                                "(set COMPOSER_HOST_LOCKS to a folder every user can write)") from None
    return folder


def host_lock_path(engine_id: str, key: str) -> Path:
    """A lock every composer on this host sees, whatever its COMPOSER_STATE_DIR: the engine's build
    cache is one, and a `cache clear` run with another state folder must still see each build."""
    folder = _host_folder()
    name = hashlib.sha256(f"{engine_id}\n{key}".encode()).hexdigest()[:32]
    path = folder / f"{name}.lock"
    if not path.exists():
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o666))
            os.chmod(path, 0o666)  # past the umask: another user's composer takes it too
    return path


def using_host(engine_id: str, key: str):
    """Held (shared) while a build uses the host-wide `key` (the engine's build cache)."""
    return _flock(host_lock_path(engine_id, key), fcntl.LOCK_SH, wait=True)


def making_host(engine_id: str, key: str):
    """Held while one process of this host writes what every state folder shares (`key`); others wait."""
    return _flock(host_lock_path(engine_id, key), fcntl.LOCK_EX, wait=True)


def removable_host(engine_id: str, key: str):
    """True when no build on this host holds `key`, False at once otherwise (`cache clear`)."""
    return _flock(host_lock_path(engine_id, key), fcntl.LOCK_EX, wait=False)


@contextlib.contextmanager
def _flock(path: Path, mode: int, *, wait: bool, on_wait: Callable[[], None] | None = None) -> Iterator[bool]:
    """Hold an fcntl lock on `path` (LOCK_EX or LOCK_SH): yields True when held; with `wait`
    False, yields False at once when another process holds it otherwise."""
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            if not wait:
                yield False
                return
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, mode)
        yield True
    finally:
        os.close(handle)  # closing drops the lock


def making(engine_id: str, key: str, on_wait: Callable[[], None] | None = None):
    """Held while one run finds or makes `key`; a second run waits here (on_wait says so once)."""
    return _flock(lock_path(engine_id, key, "make"), fcntl.LOCK_EX, wait=True, on_wait=on_wait)


def using(engine_id: str, key: str):
    """Held (shared) while a run builds on `key`: many runs at once, and no remover."""
    return _flock(lock_path(engine_id, key, "use"), fcntl.LOCK_SH, wait=True)


def removable(engine_id: str, key: str):
    """Yields True when no run uses `key` (and none can start to while it is held), False at once
    otherwise: what `composer cache clear` holds while it removes a pruned base."""
    return _flock(lock_path(engine_id, key, "use"), fcntl.LOCK_EX, wait=False)


def mark_used(engine_id: str, key: str) -> None:
    """Note that a run used `key` now (`composer cache list` shows it; `clear --older-than` reads it)."""
    name = hashlib.sha256(f"{engine_id}\n{key}".encode()).hexdigest()[:32]
    path = _folder("used") / f"{name}.json"
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"engine": engine_id, "key": key, "used": time.time()}))
    os.replace(temporary, path)


def last_used(engine_id: str, key: str) -> float | None:
    """When a run last used `key` on this host (time.time()), or None."""
    name = hashlib.sha256(f"{engine_id}\n{key}".encode()).hexdigest()[:32]
    try:
        return float(json.loads((_folder("used") / f"{name}.json").read_text())["used"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- run records --------------------------------------------------------------------------


def _process_start(pid: int) -> str | None:
    """The start of process `pid` in clock ticks since boot (/proc/PID/stat field 22), which tells
    a live run from a new process that took a dead run's pid; None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (not Linux): only whether the pid lives
        except ProcessLookupError:
            return None
        except PermissionError:
            return ""
        return ""
    return text.rsplit(")", 1)[1].split()[19]


@dataclass(frozen=True)
class RunRecord:
    """A run at work: its id (the RUN_LABEL / stage labels' value), process and engine."""

    run: str
    pid: int
    process_start: str
    started: float  # time.time()
    engine: str
    folders: tuple[str, ...] = ()  # its process's temporary folders (temporary_folder), at the last write

    def to_dict(self) -> dict:
        return {"format": RECORD_FORMAT, "run": self.run, "pid": self.pid, "process_start": self.process_start,
                "started": self.started, "engine": self.engine, "folders": list(self.folders)}

    @classmethod
    def from_dict(cls, raw: dict) -> "RunRecord":
        folders = raw.get("folders") or []
        return cls(str(raw["run"]), int(raw["pid"]), str(raw.get("process_start") or ""), float(raw["started"]),
                   str(raw.get("engine") or ""), tuple(str(f) for f in folders if isinstance(f, str)))

    @property
    def alive(self) -> bool:
        """Whether its process still works (the same process, not one that took its pid)."""
        now = _process_start(self.pid)
        return now is not None and (not self.process_start or not now or now == self.process_start)


def _record_path(run: str) -> Path:
    return _folder("runs") / f"{run}.json"


_FOLDER_PREFIX = "triton-composer-"
_guard = threading.Lock()
_folders: list[str] = []  # this process's temporary folders, while they exist
_recording: dict[str, RunRecord] = {}  # this process's runs at work, by id
_unfinished: set[str] = set()  # runs whose own cleanup failed: their records stay for the next run


def _write(record: RunRecord) -> None:
    path = _record_path(record.run)
    temporary = path.with_suffix(f".{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(record.to_dict()))
    os.replace(temporary, path)


def _rewrite_records() -> None:
    """Each run of this process at work, recorded again with the process's folders of now."""
    for run, record in list(_recording.items()):
        record = RunRecord(record.run, record.pid, record.process_start, record.started, record.engine,
                           tuple(_folders))
        _recording[run] = record
        with contextlib.suppress(OSError):
            _write(record)


def make_folder(purpose: str) -> Path:
    """A temporary folder, named in the records of this process's runs at work (and of those that
    start while it exists): a run killed before it could remove its folders (at NGC scale,
    gigabytes of layers) leaves them for the next run to remove, as it does its images. The maker
    removes it with drop_folder."""
    path = tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{purpose}-")
    with _guard:
        _folders.append(path)
        _rewrite_records()
    return Path(path)


def drop_folder(path: Path) -> None:
    """Remove a folder make_folder made, and its name from the records."""
    shutil.rmtree(path, ignore_errors=True)
    with _guard:
        if str(path) in _folders:
            _folders.remove(str(path))
            _rewrite_records()


@contextlib.contextmanager
def temporary_folder(purpose: str) -> Iterator[Path]:
    """make_folder's folder for the block (tempfile.TemporaryDirectory's kind)."""
    path = make_folder(purpose)
    try:
        yield path
    finally:
        drop_folder(path)


def remove_folders(record: RunRecord) -> list[str]:
    """The temporary folders a dead run left, removed (only folders this module made: their name
    says so and the record named them); the ones that were there."""
    removed = []
    for folder in record.folders:
        path = Path(folder)
        if not path.name.startswith(_FOLDER_PREFIX) or not path.is_absolute() or path.is_symlink() \
                or not path.is_dir():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(folder)
    return removed


@contextlib.contextmanager
def run_record(run: str, engine_id: str) -> Iterator[RunRecord]:
    """Record `run` as at work while the block runs; the record goes at the end, unless the engine
    went away (EngineUnavailable): then nothing of the run could be removed from it, and the record
    stays, naming a dead run for the next run on that engine to clean (as a killed process's does)."""
    pid = os.getpid()
    path = _record_path(run)
    on_host = _hold_on_host(run)
    with _guard:
        record = RunRecord(run, pid, _process_start(pid) or "", time.time(), engine_id, tuple(_folders))
        _write(record)
        _recording[run] = record
    lost = False
    try:
        yield record
    except EngineUnavailable:
        lost = True
        raise
    finally:
        with _guard:
            _recording.pop(run, None)
            if not lost and run not in _unfinished:
                with contextlib.suppress(OSError):
                    path.unlink()
            _unfinished.discard(run)
        _release_on_host(run, on_host)


_HOST_RUN = "run-{}.lock"  # in the host's lock folder: held (shared) by the run's process while it works


def _hold_on_host(run: str) -> int | None:
    """The run's lock in the host's lock folder, held while it works: a run of another state folder
    (another user's, a test's) sees it at work, and so never sweeps its stages from under it."""
    for _ in range(5):
        try:
            path = _host_folder() / _HOST_RUN.format(run)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except (OSError, ComposerError):
            return None  # no host folder: the state folder's record still tells its own runs
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except OSError:
            pass
        os.close(fd)  # taken for a killed run's and removed between the open and the lock: again
    return None


def _release_on_host(run: str, fd: int | None) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        (_host_folder() / _HOST_RUN.format(run)).unlink()
    os.close(fd)


def runs_at_work_on_host() -> set[str]:
    """The runs whose process holds its lock in the host's lock folder; a lock no process holds (a
    killed run's) is removed."""
    folder = Path(os.environ.get("COMPOSER_HOST_LOCKS") or HOST_LOCKS)
    found = set()
    for path in folder.glob(_HOST_RUN.format("*")) if folder.is_dir() else ():
        run = path.name[len("run-"):-len(".lock")]
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            found.add(run)
        except OSError:
            continue
        else:
            with contextlib.suppress(OSError):
                path.unlink()  # held by no one: its run ended without removing it (killed)
        finally:
            os.close(fd)
    return found


def cleanup_unfinished(run: str) -> None:
    """`run` could not remove all it left (its engine failed the cleanup): its record stays, and
    the next run on that engine (or composer cache clear) removes the rest, as for a killed run."""
    with _guard:
        _unfinished.add(run)


def run_records() -> list[RunRecord]:
    """Every run record on this host (live and dead); unreadable ones are skipped."""
    records = []
    for path in sorted(_folder("runs").glob("*.json")):
        try:
            records.append(RunRecord.from_dict(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return records


def live_runs() -> set[str]:
    """The ids of runs whose process still works: recorded in this state folder, or holding their
    lock in the host's (a run of another state folder on this host)."""
    return {record.run for record in run_records() if record.alive} | runs_at_work_on_host()


def forget(run: str) -> None:
    """Drop a dead run's record, once what it left is removed (only a record this module wrote)."""
    with contextlib.suppress(OSError):
        _record_path(run).unlink()
