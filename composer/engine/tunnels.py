"""ssh tunnels to the ports an ssh:// engine publishes on its own loopback.

The network rule keeps published ports on 127.0.0.1; for an engine on another machine that is
the remote's loopback, reached through one `ssh -L` per port, ended with the container.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from urllib.parse import urlsplit

from composer.core.errors import EngineUnavailable


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ssh_tunnel(url: str, remote_port: int) -> tuple[subprocess.Popen, int]:
    """Forward a local loopback port to `remote_port` on the ssh engine host's loopback."""
    if shutil.which("ssh") is None:
        raise EngineUnavailable("an ssh:// engine needs the ssh client to reach the ports it publishes")
    parts = urlsplit(url)
    local = _free_port()
    target = f"{parts.username}@{parts.hostname}" if parts.username else str(parts.hostname)
    argv = ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
            "-L", f"127.0.0.1:{local}:127.0.0.1:{remote_port}"]
    if parts.port:
        argv += ["-p", str(parts.port)]
    tunnel = subprocess.Popen(argv + [target], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if tunnel.poll() is not None:
            why = _first_line(tunnel.stderr.read().decode("utf-8", "replace")) if tunnel.stderr else ""
            raise EngineUnavailable(f"cannot tunnel to port {remote_port} on {parts.hostname}: {why or 'ssh exited'}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", local), timeout=1):
            return tunnel, local
        time.sleep(0.2)
    stop(tunnel)
    raise EngineUnavailable(f"cannot tunnel to port {remote_port} on {parts.hostname}: no answer in 15 s")


def stop(process: subprocess.Popen) -> None:
    """End the tunnel this module started (by its process), waiting until it is gone."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""
