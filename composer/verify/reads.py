"""The files a server opens while the smoke test serves it: the prefetch list of an eStargz push.

A lazily pulling node (stargz-snapshotter) fetches a layer's prefetched files before the container
starts, the rest on first read. The smoke test knows what the server reads to answer the user's
models: it watches the container's root filesystem with fanotify (a mark on the overlay's
superblock, so the container's own mount of it reports too), from the moment the server's process
starts to its last checked answer. The container starts waiting for a file the composer puts in
once the mark is set (a shell loop of builtins only, so the wait opens nothing), then the image's
own entrypoint runs as it would on a node.

It needs what fanotify needs: Linux, CAP_SYS_ADMIN (root) and an engine whose containers' root
filesystems are mounted on this machine (a local Docker or Podman with the overlay driver). Where
that is missing, `unavailable()` says why, and the push goes without a prefetch list.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import threading
from pathlib import Path

GO = "/.composer-reads-go"  # the file the waiting container starts on
WAIT = 'while [ ! -e /.composer-reads-go ]; do :; done; exec "$@"'

_FAN_CLASS_NOTIF, _FAN_CLOEXEC, _FAN_NONBLOCK, _FAN_UNLIMITED_QUEUE = 0x0, 0x1, 0x2, 0x10
_FAN_MARK_ADD, _FAN_MARK_FILESYSTEM = 0x1, 0x100
_FAN_OPEN, _FAN_OPEN_EXEC, _FAN_Q_OVERFLOW = 0x20, 0x1000, 0x4000
_AT_FDCWD = -100
_EVENT = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata


def wait_entrypoint(entrypoint: tuple[str, ...]) -> list[str]:
    """The container's entrypoint: wait for GO, then the image's own entrypoint with its command."""
    return ["/bin/sh", "-c", WAIT, "composer-reads", *entrypoint]


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def unavailable() -> str | None:
    """Why this machine cannot watch a container's reads, or None when it can."""
    if not hasattr(os, "O_LARGEFILE") or not Path("/proc/self/fd").is_dir():
        return "watching a server's reads needs Linux (fanotify)"
    if os.geteuid() != 0:
        return "watching a server's reads needs root (fanotify on the container's filesystem)"
    try:
        fd = _libc().fanotify_init(_FAN_CLASS_NOTIF | _FAN_CLOEXEC, os.O_RDONLY)
    except (OSError, AttributeError) as error:
        return f"fanotify is not available here ({error})"
    if fd < 0:
        return f"fanotify is not available here ({os.strerror(ctypes.get_errno())})"
    os.close(fd)
    return None


class Reads:
    """The files opened under one filesystem, as paths inside it, in the order first opened."""

    def __init__(self, root: Path):
        libc = _libc()
        self._fd = libc.fanotify_init(_FAN_CLASS_NOTIF | _FAN_CLOEXEC | _FAN_NONBLOCK | _FAN_UNLIMITED_QUEUE,
                                      os.O_RDONLY | os.O_LARGEFILE)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), f"fanotify_init: {os.strerror(ctypes.get_errno())}")
        if libc.fanotify_mark(self._fd, _FAN_MARK_ADD | _FAN_MARK_FILESYSTEM, ctypes.c_uint64(_FAN_OPEN | _FAN_OPEN_EXEC),
                              _AT_FDCWD, str(root).encode()) != 0:
            error = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(error, f"fanotify_mark {root}: {os.strerror(error)}")
        self.root = str(root).rstrip("/")
        self.paths: dict[str, None] = {}
        self.overflowed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reads", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if select.select([self._fd], [], [], 0.1)[0]:
                self._drain()
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                length, _, _, _, mask, fd, _ = _EVENT.unpack_from(data, offset)
                offset += length or _EVENT.size
                if mask & _FAN_Q_OVERFLOW:
                    self.overflowed = True
                if fd < 0:
                    continue
                try:
                    path = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    path = ""
                finally:
                    os.close(fd)
                path = self._inside(path)
                if path and path != GO:
                    self.paths.setdefault(path)

    def _inside(self, path: str) -> str:
        """A path as the container sees it: the kernel names a file opened through the container's
        own mount by its path there, one opened through this machine's view with `root` before it."""
        if path.startswith(self.root + "/"):
            path = path[len(self.root):]
        return path if path.startswith("/") and not path.endswith(" (deleted)") else ""

    def stop(self) -> tuple[str, ...]:
        self._stop.set()
        self._thread.join()
        os.close(self._fd)
        return tuple(self.paths)
