"""Nodes of the benchmarks' and tests' own: an empty node simulated on this machine.

A fresh containerd (Debian's containerd and ctr, the runtime of most Kubernetes nodes) with its own
root, state and socket and no CRI plugin; a bandwidth-capping TCP proxy on 127.0.0.1 standing for
the link between a node and its registry; the per-layer arrival times of a pull and the peak disk
it took; the first answer of a server started on a node. The second Docker engine is
triton_standins.engines.Dockerd. Everything here stops only the processes it started, by their
PIDs, and removes the folders it made.

Servers on a node share this machine's network (ctr run --net-host, docker run --network host), so
they listen on 127.0.0.1 only, on ports chosen free.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from triton_standins.engines import unmount_under

CONTENT = "io.containerd.content.v1.content"
SNAPSHOTS = "io.containerd.snapshotter.v1.overlayfs"
# Plugins a node of ours does without: Kubernetes' CRI (it would claim the machine's CNI and
# streaming ports), and the opt plugin, which writes to /opt/containerd shared with the machine's containerd.
DISABLED_PLUGINS = ("io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt")
TRITONSERVER = "/opt/tritonserver/bin/tritonserver"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return not any(line.startswith("State:") and "Z" in line.split()[1] for line in status.splitlines())


def _end(process: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM to a process this module started (its group: it was started in a session of its
    own), then SIGKILL."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


class DiskPeak:
    """The most the filesystem holding `path` used above its use at the start (statvfs, sampled
    every `every` seconds on a thread): what a pull costs the node's disk at its worst."""

    def __init__(self, path: Path, every: float = 0.2):
        self.path, self.every = str(path), every
        self.start = self.peak = shutil.disk_usage(self.path).used
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        self.peak = max(self.peak, shutil.disk_usage(self.path).used)

    def __enter__(self) -> "DiskPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    @property
    def used(self) -> int:
        return max(0, self.peak - self.start)


class Arrivals:
    """When each blob landed in a containerd content store: a blob is committed under
    blobs/sha256/<hex> once its download is whole and verified, so the folder is polled."""

    def __init__(self, content_root: Path, every: float = 0.05):
        self.folder = content_root / "blobs" / "sha256"
        self.every = every
        self.seen: dict[str, float] = {}
        self.before = set(self._list())
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _list(self) -> list[str]:
        try:
            return os.listdir(self.folder)
        except FileNotFoundError:
            return []

    def poll(self) -> None:
        now = time.monotonic() - self.started
        for name in self._list():
            if name not in self.before and f"sha256:{name}" not in self.seen:
                self.seen[f"sha256:{name}"] = now

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.poll()

    def __enter__(self) -> "Arrivals":
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()


@dataclass
class ContainerdNode:
    """A containerd of its own: root (content, snapshots, metadata) under `root`, state and socket
    under /run/tc-ctd-<name> (a unix socket's path is short), no CRI. Images live in one namespace."""

    root: Path
    name: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    namespace: str = "node"
    process: subprocess.Popen | None = None

    @property
    def state(self) -> Path:
        return Path("/run") / f"tc-ctd-{self.name}"

    @property
    def socket(self) -> Path:
        return self.state / "containerd.sock"

    @property
    def data(self) -> Path:
        return self.root / "root"

    @property
    def content(self) -> Path:
        return self.data / CONTENT

    def start(self, timeout: float = 60) -> "ContainerdNode":
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "config.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{self.data}"\nstate = "{self.state}"\n'
            f"disabled_plugins = [{', '.join(repr(p).replace(chr(39), chr(34)) for p in DISABLED_PLUGINS)}]\n"
            f'[grpc]\n  address = "{self.socket}"\n'
            f'[ttrpc]\n  address = "{self.socket}.ttrpc"\n'
            '[debug]\n  address = ""\n[metrics]\n  address = ""\n')
        log = open(self.root / "containerd.log", "ab")
        self.process = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"containerd exited: {self.log_tail()}")
            if self.socket.exists() and self.ctr("version", timeout=20).returncode == 0:
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"containerd did not answer in {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, lines: int = 10) -> str:
        try:
            return "\n".join((self.root / "containerd.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def ctr(self, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "-a", str(self.socket), "-n", self.namespace, *args], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def _checked(self, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
        done = self.ctr(*args, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args[:3])}: {(done.stderr or done.stdout).strip()[-400:]}")
        return done

    def fetch(self, ref: str, *, plain_http: bool = True, user: str | None = None) -> tuple[float, dict[str, float]]:
        """Download every blob of `ref` into the content store, nothing unpacked (ctr content
        fetch): its seconds and when each new blob arrived (seconds from the start)."""
        started = time.monotonic()
        with Arrivals(self.content) as arrivals:
            self._checked("content", "fetch", *self._remote(plain_http, user), ref)
        return time.monotonic() - started, dict(arrivals.seen)

    def unpack(self, ref: str, *, plain_http: bool = True, user: str | None = None) -> float:
        """Unpack `ref` into snapshots (ctr images pull, its content already here): its seconds."""
        started = time.monotonic()
        self._checked("images", "pull", *self._remote(plain_http, user), ref)
        return time.monotonic() - started

    def pull(self, ref: str, *, plain_http: bool = True, user: str | None = None) -> tuple[float, dict[str, float]]:
        """Download and unpack as one (ctr images pull: each layer is unpacked once it and those
        under it arrived, as a kubelet's pull does): its seconds, and when each new blob arrived."""
        started = time.monotonic()
        with Arrivals(self.content) as arrivals:
            self._checked("images", "pull", *self._remote(plain_http, user), ref)
        return time.monotonic() - started, dict(arrivals.seen)

    @staticmethod
    def _remote(plain_http: bool, user: str | None) -> list[str]:
        return [*(["--plain-http"] if plain_http else []), *(["--user", user] if user else [])]

    def import_archive(self, archive: Path) -> tuple[float, dict[str, float]]:
        """Import an OCI archive (ctr images import: its blobs copied into the content store, then
        unpacked): its seconds, and when each new blob landed (seconds from the start)."""
        started = time.monotonic()
        with Arrivals(self.content) as arrivals:
            self._checked("images", "import", str(archive))
        return time.monotonic() - started, dict(arrivals.seen)

    def blob_sizes(self) -> dict[str, int]:
        """Every blob the content store holds, by digest (read from its folder)."""
        folder = self.content / "blobs" / "sha256"
        return {f"sha256:{p.name}": p.stat().st_size for p in folder.iterdir()} if folder.is_dir() else {}

    def run(self, ref: str, task: str, args: list[str], *, mounts: tuple[tuple[Path, str], ...] = (),
            log: Path | None = None) -> None:
        """Start `args` from `ref` as task `task`, detached, in this machine's network namespace."""
        mount_args = [f"--mount=type=bind,src={src},dst={dst},options=rbind:ro" for src, dst in mounts]
        log_args = [f"--log-uri=file://{log}"] if log else []
        self._checked("run", "-d", "--net-host", *mount_args, *log_args, ref, task, *args, timeout=300)

    def running(self, task: str) -> bool:
        done = self.ctr("tasks", "ls")
        return any(line.split()[:1] == [task] and "RUNNING" in line for line in done.stdout.splitlines())

    def remove_task(self, task: str) -> None:
        """Kill the task and remove it and its container."""
        self.ctr("tasks", "kill", "-s", "SIGKILL", task, timeout=60)
        for _ in range(100):
            if not self.running(task):
                break
            time.sleep(0.1)
        self.ctr("tasks", "delete", "-f", task, timeout=60)
        self.ctr("containers", "delete", task, timeout=60)

    def stop(self) -> None:
        """Remove its tasks and containers, stop it by its PID, end any shim it left (found by this
        node's socket on their command line), and remove its root and state."""
        if self.process is not None and self.process.poll() is None:
            for line in self.ctr("containers", "ls", "-q", timeout=60).stdout.split():
                self.remove_task(line)
            _end(self.process)
        for pid in self._shims():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        unmount_under(self.state, self.root)
        for path in (self.state, self.root):
            shutil.rmtree(path, ignore_errors=True)

    def _shims(self) -> list[int]:
        mine = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(self.socket).encode() in argv:
                mine.append(int(proc.name))
        return mine


# The link: a proxy on 127.0.0.1 that moves at most `rate` bytes a second each way.

BANDWIDTHS = {"gbit": 1e9 / 8, "mbit": 1e6 / 8}


def parse_bandwidth(text: str) -> float | None:
    """'none' (no cap), or e.g. '1gbit', '10gbit', '500mbit': bytes a second."""
    value = text.strip().lower()
    if value == "none":
        return None
    for unit, factor in BANDWIDTHS.items():
        number = value.removesuffix(unit)
        if number != value:
            try:
                rate = float(number) * factor
            except ValueError:
                break
            if rate > 0:
                return rate
            break
    raise ValueError(f"'{text}' is not a bandwidth: give none, or a number and gbit or mbit (1gbit, 500mbit)")


class _Pacer:
    """A shared budget of bytes a second: each chunk waits for its turn on the link."""

    def __init__(self, rate: float):
        self.rate = rate
        self.lock = threading.Lock()
        self.free_at = time.monotonic()

    def take(self, n: int) -> None:
        """Wait until the link would have carried these `n` bytes (after every chunk before them)."""
        with self.lock:
            now = time.monotonic()
            self.free_at = max(now, self.free_at) + n / self.rate
            done = self.free_at
        if done > now:
            time.sleep(done - now)


PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = 1031


def _pump(source: socket.socket, sink: socket.socket, pacer: _Pacer | None) -> None:
    """Move bytes from one socket to the other through a pipe (splice: no copy through Python)."""
    read_end, write_end = os.pipe()
    try:
        try:
            import fcntl

            fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass
        while True:
            n = os.splice(source.fileno(), write_end, PIPE_SIZE)
            if n == 0:
                break
            if pacer is not None:
                pacer.take(n)
            left = n
            while left:
                left -= os.splice(read_end, sink.fileno(), left)
    except OSError:
        pass
    finally:
        os.close(read_end)
        os.close(write_end)
        for sock in (sink, source):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve_proxy(listen_port: int, target: tuple[str, int], rate: float | None,
                ready: Callable[[], None] = lambda: None) -> None:
    """Accept on 127.0.0.1:listen_port and relay to `target`, each direction capped at `rate`."""
    down, up = (_Pacer(rate), _Pacer(rate)) if rate else (None, None)
    server = socket.create_server(("127.0.0.1", listen_port), backlog=64)
    ready()
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection(target)
        except OSError:
            client.close()
            continue
        for a, b, pacer in ((client, upstream, up), (upstream, client, down)):
            threading.Thread(target=_pump, args=(a, b, pacer), daemon=True).start()


@dataclass
class BandwidthProxy:
    """The proxy above as a process of its own (python -m triton_standins.nodes proxy), so the
    link's pace does not share an interpreter with the one measuring it."""

    target: tuple[str, int]
    rate: float | None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> "BandwidthProxy":
        self.process = subprocess.Popen(
            [sys.executable, "-m", "triton_standins.nodes", "proxy", str(self.port), f"{self.target[0]}:{self.target[1]}",
             str(self.rate or 0)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"the bandwidth proxy did not start (it said {line[:200]!r})")
        return self

    def stop(self) -> None:
        if self.process is not None:
            _end(self.process, timeout=10)
            self.process.stdout.close()

    def __enter__(self) -> "BandwidthProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# The server on a node, and its first answer.

def server_args(models: str, http_port: int, grpc_port: int) -> list[str]:
    """tritonserver on 127.0.0.1 only (the node shares this machine's network), metrics off."""
    return [TRITONSERVER, f"--model-repository={models}", "--http-address=127.0.0.1", f"--http-port={http_port}",
            "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}", "--allow-metrics=false"]


def wait_ready(url: str, timeout: float, alive: Callable[[], bool], every: float = 0.05) -> bool:
    """Poll GET /v2/health/ready until 200 (every model loaded); False once `alive()` says the
    server is gone or the time is up."""
    import requests

    session = requests.Session()
    session.trust_env = False  # only ever a server on this machine
    deadline = time.monotonic() + timeout
    checks = 0
    while time.monotonic() < deadline:
        try:
            if session.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        checks += 1
        if checks % 20 == 0 and not alive():
            return False
        time.sleep(every)
    return False


def first_answer(url: str, sample) -> str | None:
    """Send `sample`'s request (composer.verify.samples.Sample) and check the answer against its
    expected values: None when correct, else what was wrong."""
    from composer.core.errors import ComposerError
    from composer.verify.triton_client import TritonHTTP

    try:
        return sample.check(TritonHTTP(url, timeout=60).infer(sample.model, list(sample.inputs)))
    except ComposerError as error:
        return error.message


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m triton_standins.nodes")
    sub = parser.add_subparsers(dest="command", required=True)
    proxy = sub.add_parser("proxy", help="relay 127.0.0.1:PORT to HOST:PORT, each way at most RATE bytes/s (0: no cap)")
    proxy.add_argument("port", type=int)
    proxy.add_argument("target")
    proxy.add_argument("rate", type=float)
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    if host not in ("127.0.0.1", "localhost"):
        parser.error("the proxy relays to this machine only (127.0.0.1)")

    def ready() -> None:
        print("ready", flush=True)

    serve_proxy(args.port, (host, int(port)), args.rate or None, ready)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
