"""Engines of the tests' and benchmarks' own: a second Docker engine beside the machine's, clean
(its own data root, exec root, socket and containerd namespaces), and gone with everything it held
when stopped. It shares the first engine's bridge (docker0) with an address range of its own: a
second engine started with --bridge=none would delete docker0 under the first.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# Address ranges for second engines inside docker0's 172.17.0.0/16: one a /24 each, by a slot.
FIXED_CIDR = "172.17.{slot}.0/24"


@dataclass
class Dockerd:
    """A dockerd of its own, started and stopped by this process (by its PID, never by name)."""

    root: Path  # holds its data root, exec root, socket and log
    slot: int = 240  # its addresses: 172.17.<slot>.0/24
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    extra: tuple[str, ...] = ()
    process: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    def start(self, timeout: float = 60) -> "Dockerd":
        self.root.mkdir(parents=True, exist_ok=True)
        exec_root = Path("/run") / f"tc-dockerd-{self.name}"  # short: unix socket paths are limited
        command = ["dockerd", f"--data-root={self.data_root}", f"--exec-root={exec_root}",
                   f"--pidfile={self.root / 'dockerd.pid'}", f"--host={self.host}",
                   "--bridge=docker0", f"--fixed-cidr={FIXED_CIDR.format(slot=self.slot)}", "--iptables=false",
                   f"--containerd-namespace=tc-{self.name}", f"--containerd-plugins-namespace=tc-{self.name}-plugins",
                   *self.extra]
        self._exec_root = exec_root
        log = open(self.root / "dockerd.log", "ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the second dockerd exited: {self.log_tail()}")
            done = subprocess.run(["docker", "-H", self.host, "info", "--format", "{{.ServerVersion}}"],
                                  capture_output=True, text=True, timeout=20)
            if done.returncode == 0:
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the second dockerd did not answer in {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join((self.root / "dockerd.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def docker(self, *args: str, timeout: float = 900, input_file=None) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True, timeout=timeout,
                              stdin=input_file)

    def load_from(self, source_host: str | None, refs: list[str], timeout: float = 1800) -> None:
        """Copy images from another engine into this one (docker save | docker load, streamed)."""
        save = subprocess.Popen(["docker", *(["-H", source_host] if source_host else []), "save", *refs],
                                stdout=subprocess.PIPE)
        try:
            load = subprocess.run(["docker", "-H", self.host, "load"], stdin=save.stdout, capture_output=True,
                                  text=True, timeout=timeout)
        finally:
            save.stdout.close()
            save.wait(timeout=60)
        if load.returncode != 0 or save.returncode != 0:
            raise RuntimeError(f"cannot copy {refs} into the second engine: {load.stderr[-500:]}")

    def load(self, archive: Path, timeout: float = 1800) -> None:
        """Load a `docker save` archive written before (one archive, several engines)."""
        with open(archive, "rb") as source:
            load = subprocess.run(["docker", "-H", self.host, "load"], stdin=source, capture_output=True, text=True,
                                  timeout=timeout)
        if load.returncode != 0:
            raise RuntimeError(f"cannot load {archive} into the second engine: {load.stderr[-500:]}")

    def restart(self, pause: float = 3.0, timeout: float = 60) -> "Dockerd":
        """Stop the process (as a host's service manager does) and start it again on the same data
        root after `pause` s: an engine restart, its images kept."""
        self._halt()
        time.sleep(pause)
        return self.start(timeout=timeout)

    def _halt(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop it (SIGTERM to its PID, then SIGKILL) and remove everything it held."""
        self._halt()
        exec_root = getattr(self, "_exec_root", None)
        for path in (self.data_root, exec_root):
            if path is not None and Path(path).exists():
                unmount_under(Path(path))  # overlay mounts left over, and the network namespace's (netns/default)
                shutil.rmtree(path, ignore_errors=True)


def unmount_under(*paths: Path) -> None:
    """Lazily unmount whatever is mounted at or under `paths`, deepest first (`umount -R` refuses a
    folder that is not itself a mount point, and so left the exec root's netns/default behind)."""
    roots = [str(p.resolve()) for p in paths if p.exists()]
    if not roots:
        return
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    inside = [m for m in mounts if any(m == r or m.startswith(r + "/") for r in roots)]
    for target in sorted(set(inside), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
