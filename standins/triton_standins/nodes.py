"""Nodes of the benchmarks' and tests' own: an empty node simulated on this machine.

A fresh containerd (Debian's containerd and ctr, the runtime of most Kubernetes nodes) with its own
root, state and socket and no CRI plugin, or containerd v2 with stargz-snapshotter pulling eStargz
layers lazily (scripts/go-tools builds both); a bandwidth-capping TCP proxy on 127.0.0.1 standing for
the link between a node and its registry (it counts the bytes it relays, BandwidthProxy.moved());
the per-layer arrival times of a pull and the peak disk it took; the first answer of a server
started on a node. The second Docker engine is triton_standins.engines.Dockerd. Everything here stops only the processes it started, by their
PIDs, and removes the folders it made.

Servers on a node share this machine's network (ctr run --net-host, docker run --network host), so
they listen on 127.0.0.1 only, on ports chosen free.
"""

from __future__ import annotations

import argparse
import base64
import json
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
from typing import Callable, ClassVar

from triton_standins.engines import unmount_under
from triton_standins.host import cache_dir

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

    config_version: ClassVar[int] = 2
    disabled_plugins: ClassVar[tuple[str, ...]] = DISABLED_PLUGINS

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

    def _binary(self, name: str) -> str:
        """containerd, ctr: Debian's, from PATH (Containerd2Node's are scripts/go-tools')."""
        return name

    def _env(self) -> dict[str, str] | None:
        return None

    def _config(self) -> str:
        return (f"version = {self.config_version}\n"
                f'root = "{self.data}"\nstate = "{self.state}"\n'
                f"disabled_plugins = [{', '.join(json.dumps(p) for p in self.disabled_plugins)}]\n"
                f'[grpc]\n  address = "{self.socket}"\n'
                f'[ttrpc]\n  address = "{self.socket}.ttrpc"\n'
                '[debug]\n  address = ""\n[metrics]\n  address = ""\n')

    def start(self, timeout: float = 60) -> "ContainerdNode":
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "config.toml"
        config.write_text(self._config())
        log = open(self.root / "containerd.log", "ab")
        self.process = subprocess.Popen([self._binary("containerd"), "--config", str(config)], stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                        env=self._env())
        log.close()
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
        return subprocess.run([self._binary("ctr"), "-a", str(self.socket), "-n", self.namespace, *args],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

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
        self._checked("run", "-d", "--net-host", *self._run_args(), *mount_args, *log_args, ref, task, *args,
                      timeout=300)

    def _run_args(self) -> list[str]:
        return []

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
        self._stop_services()
        for pid in self._shims():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        unmount_under(self.state, self.root)
        for path in (self.state, self.root):
            shutil.rmtree(path, ignore_errors=True)

    def _stop_services(self) -> None:
        """What runs beside containerd (Containerd2Node's snapshotter), ended after it."""

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


# containerd v2 and stargz-snapshotter, built by scripts/go-tools into the machine's cache (folder: binary).
GO_TOOLS = {"containerd": "containerd2-v2.4.2", "ctr": "ctr2-v2.4.2",
            "containerd-shim-runc-v2": "containerd-shim2-v2.4.2",
            "containerd-stargz-grpc": "containerd-stargz-grpc-v0.18.2", "ctr-remote": "ctr-remote-v0.18.2"}
# containerd v2's CRI is three plugins (and a sandbox controller needing them); its NRI would listen
# on /var/run/nri, shared with the machine's containerd.
DISABLED_PLUGINS_V2 = (*DISABLED_PLUGINS, "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime",
                       "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.nri.v1.nri")
STARGZ = "stargz"
# The field of the snapshotter's log line for each layer it was asked to mount from the registry:
# "prepared remote snapshot" (true) or "failed to prepare remote snapshot" (false, containerd then
# fetches and unpacks the layer whole); stargz-snapshotter v0.18.2, snapshot/snapshot.go.
REMOTE_SNAPSHOT = "remote-snapshot-prepared"


def go_tool(binary: str) -> str:
    """A binary scripts/go-tools built (PATH holds Debian's containerd 1.6, not these)."""
    path = cache_dir() / "tools" / GO_TOOLS[binary] / binary
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is missing: run scripts/go-tools {GO_TOOLS[binary].rsplit('-v', 1)[0]}")
    return str(path)


@dataclass
class Containerd2Node(ContainerdNode):
    """containerd v2 laid out as ContainerdNode. With `lazy`, stargz-snapshotter runs beside it as
    the proxy snapshotter `stargz` (root under this root, socket under the state folder), so an
    eStargz image's layers are mounted from the registry and read on demand, not fetched whole
    before the server starts: the cold start the issue measures."""

    lazy: bool = False
    plain_http_hosts: tuple[str, ...] = ()  # for the snapshotter (it reaches 127.0.0.1 over http anyway)
    background_fetch: bool = True  # the snapshotter's default: once mounted, a layer is fetched whole behind
    metrics_port: int = field(default_factory=free_port)
    snapshotter: subprocess.Popen | None = None

    config_version: ClassVar[int] = 3
    disabled_plugins: ClassVar[tuple[str, ...]] = DISABLED_PLUGINS_V2

    def _binary(self, name: str) -> str:
        return go_tool(name)

    def _env(self) -> dict[str, str]:
        """Its own shim first on PATH: containerd v2 looks the shim up there, and Debian's 1.6 shim
        cannot start its tasks."""
        shims = Path(go_tool("containerd-shim-runc-v2")).parent
        return {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}

    @property
    def stargz_root(self) -> Path:
        return self.root / STARGZ

    @property
    def stargz_socket(self) -> Path:
        return self.state / STARGZ / "stargz.sock"

    @property
    def stargz_log(self) -> Path:
        return self.root / "stargz.log"

    @property
    def docker_config(self) -> Path:
        """The snapshotter's DOCKER_CONFIG: it reads the credentials there each time it needs them."""
        return self.root / "docker"

    def _config(self) -> str:
        if not self.lazy:
            return super()._config()
        # The annotations let containerd's transfer service (plain ctr pull --snapshotter stargz) pull lazily too.
        return (super()._config() + f'[proxy_plugins.{STARGZ}]\n  type = "snapshot"\n'
                f'  address = "{self.stargz_socket}"\n'
                f'  [proxy_plugins.{STARGZ}.exports]\n    root = "{self.stargz_root}"\n'
                '    enable_remote_snapshot_annotations = "true"\n')

    def start(self, timeout: float = 60) -> "Containerd2Node":
        try:
            if self.lazy:
                self._start_snapshotter(timeout)
            return super().start(timeout)
        except BaseException:
            self.stop()  # the snapshotter too, whichever failed
            raise

    def _start_snapshotter(self, timeout: float) -> None:
        self.docker_config.mkdir(parents=True, exist_ok=True)
        config = self.root / "stargz.toml"
        config.write_text(
            f'metrics_address = "127.0.0.1:{self.metrics_port}"\n'
            f"no_background_fetch = {'false' if self.background_fetch else 'true'}\n"
            + "".join(f'[[resolver.host."{host}".mirrors]]\n  host = "{host}"\n  insecure = true\n'
                      for host in self.plain_http_hosts))
        with open(self.stargz_log, "ab") as log:
            self.snapshotter = subprocess.Popen(
                [go_tool("containerd-stargz-grpc"), "-root", str(self.stargz_root), "-address", str(self.stargz_socket),
                 "-config", str(config), "-log-level", "debug"],  # debug: the remote-snapshot lines
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "DOCKER_CONFIG": str(self.docker_config)})
        deadline = time.monotonic() + timeout
        while not self.stargz_socket.exists():
            if self.snapshotter.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd-stargz-grpc did not start: {_tail(self.stargz_log)}")
            time.sleep(0.1)

    def _credentials(self, host: str, user: str) -> None:
        path = self.docker_config / "config.json"
        config = json.loads(path.read_text()) if path.exists() else {}
        config.setdefault("auths", {})[host] = {"auth": base64.b64encode(user.encode()).decode()}
        path.write_text(json.dumps(config))
        path.chmod(0o600)

    def rpull(self, ref: str, *, plain_http: bool = True, user: str | None = None) -> float:
        """Pull `ref` with ctr-remote images rpull (stargz-snapshotter's handler on containerd's
        pull): containerd fetches the index, manifest and config; the snapshotter mounts each eStargz
        layer from the registry (a layer it cannot is fetched whole). Its seconds. `user`
        (USER:PASSWORD) goes to ctr-remote and, for the layers, to the snapshotter's docker config."""
        if not self.lazy:
            raise RuntimeError("rpull needs the stargz snapshotter: Containerd2Node(..., lazy=True)")
        if user:
            self._credentials(ref.split("/", 1)[0], user)
        started = time.monotonic()
        done = subprocess.run([go_tool("ctr-remote"), "-a", str(self.socket), "-n", self.namespace, "images", "rpull",
                               *self._remote(plain_http, user), ref], capture_output=True, text=True, timeout=3600,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"ctr-remote images rpull: {(done.stderr or done.stdout).strip()[-400:]}")
        return time.monotonic() - started

    def _run_args(self) -> list[str]:
        return ["--snapshotter", STARGZ] if self.lazy else []

    def remote_snapshots(self) -> tuple[int, int]:
        """How many layers the snapshotter mounted from the registry, and how many it could not
        (those containerd fetched whole): its log's remote-snapshot-prepared lines, the evidence
        stargz-snapshotter's own tests read."""
        counts = {"true": 0, "false": 0}
        for line in _lines(self.stargz_log):
            try:
                value = json.loads(line).get(REMOTE_SNAPSHOT)
            except (ValueError, AttributeError):
                continue
            if value in counts:
                counts[value] += 1
        return counts["true"], counts["false"]

    def fetched_bytes(self) -> dict[str, tuple[int, int]]:
        """Each layer mounted now, by digest: the bytes the snapshotter has fetched of it from the
        registry (prefetch, reads, background fetch) and its size, from its Prometheus metrics."""
        import requests

        session = requests.Session()
        session.trust_env = False  # the snapshotter's metrics on 127.0.0.1
        text = session.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        found: dict[str, dict[str, int]] = {}
        for line in text.splitlines():
            name, _, rest = line.partition("{")
            if name in ("stargz_fs_layer_fetched_size_bytes", "stargz_fs_layer_size_bytes"):
                digest = rest.split('digest="', 1)[1].split('"', 1)[0]
                found.setdefault(digest, {})[name] = int(float(rest.rsplit(" ", 1)[1]))
        return {d: (v.get("stargz_fs_layer_fetched_size_bytes", 0), v.get("stargz_fs_layer_size_bytes", 0))
                for d, v in found.items()}

    def _stop_services(self) -> None:
        if self.snapshotter is not None:
            _end(self.snapshotter)  # SIGTERM: it unmounts its FUSE layers on the way out


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _tail(path: Path, lines: int = 10) -> str:
    return "\n".join(_lines(path)[-lines:])


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


class _Count:
    """Bytes a proxy moved one way, over all its connections."""

    def __init__(self):
        self.lock = threading.Lock()
        self.bytes = 0

    def add(self, n: int) -> None:
        with self.lock:
            self.bytes += n


def _pump(source: socket.socket, sink: socket.socket, pacer: _Pacer | None, count: _Count | None = None) -> None:
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
            if count is not None:
                count.add(n)  # once relayed: the bytes the far side was given
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
                ready: Callable[[], None] = lambda: None, counts: tuple[_Count, _Count] | None = None) -> None:
    """Accept on 127.0.0.1:listen_port and relay to `target`, each direction capped at `rate`;
    `counts` (down: target to client, up) add the bytes relayed each way."""
    down, up = (_Pacer(rate), _Pacer(rate)) if rate else (None, None)
    moved_down, moved_up = counts or (None, None)
    server = socket.create_server(("127.0.0.1", listen_port), backlog=64)
    ready()
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection(target)
        except OSError:
            client.close()
            continue
        for a, b, pacer, count in ((client, upstream, up, moved_up), (upstream, client, down, moved_down)):
            threading.Thread(target=_pump, args=(a, b, pacer, count), daemon=True).start()


def _answer_counts(counts: tuple[_Count, _Count]) -> None:
    """The proxy process's control: each line `count` on its stdin is answered on its stdout with
    the bytes relayed so far, down (registry to node) and up."""
    for line in sys.stdin:
        if line.strip() == "count":
            print(f"{counts[0].bytes} {counts[1].bytes}", flush=True)


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
             str(self.rate or 0)], stdout=subprocess.PIPE, stdin=subprocess.PIPE, start_new_session=True)
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"the bandwidth proxy did not start (it said {line[:200]!r})")
        return self

    def moved(self) -> tuple[int, int]:
        """The bytes relayed so far over every connection: down (target to client) and up. A chunk
        (at most 1 MiB) is counted once it was handed on."""
        self.process.stdin.write(b"count\n")
        self.process.stdin.flush()
        down, up = self.process.stdout.readline().split()
        return int(down), int(up)

    def stop(self) -> None:
        if self.process is not None:
            if self.process.stdin:
                self.process.stdin.close()
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

    counts = (_Count(), _Count())
    threading.Thread(target=_answer_counts, args=(counts,), daemon=True).start()
    serve_proxy(args.port, (host, int(port)), args.rate or None, ready, counts)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
