"""Integration fixtures: a real registry (Debian's docker-registry) with htpasswd auth."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from composer.registry import MANIFEST_TYPES, RegistryAuth

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SCRIPT = REPO / "scripts" / "registry"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in fh)
    except FileNotFoundError:
        return False


@dataclass
class TestRegistry:
    """A docker-registry on 127.0.0.1:port that the test owns; stop()/start() keep its storage."""

    __test__ = False  # not a test class, despite the name

    root: Path
    port: int
    username: str = "composer"
    password: str = "not-a-real-secret-7f3b"
    pid: int | None = None
    _started: list[int] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def auth(self) -> RegistryAuth:
        return RegistryAuth(self.username, self.password)

    @property
    def config(self) -> Path:
        return self.root / "config.yml"

    def write_config(self) -> None:
        htpasswd = self.root / "htpasswd"
        line = subprocess.run(
            ["htpasswd", "-Bbn", self.username, self.password], check=True, capture_output=True, text=True
        ).stdout.strip()
        htpasswd.write_text(line + "\n")
        self.config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n"
            f"auth:\n  htpasswd:\n    realm: triton-composer-test\n    path: {htpasswd}\n"
        )

    def start(self) -> None:
        if self.pid is not None and _alive(self.pid):
            return
        done = subprocess.run(
            [str(REGISTRY_SCRIPT), str(self.port), str(self.config)], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/registry failed: {done.stderr.strip()}")
        self.pid = int(done.stdout.strip().splitlines()[-1])
        self._started.append(self.pid)

    def stop(self) -> None:
        """Stop the registry this fixture started (by its PID) and wait until it is gone."""
        pid, self.pid = self.pid, None
        if pid is None or not _alive(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

    def manifest(self, name: str, reference: str) -> requests.Response:
        """GET /v2/NAME/manifests/REFERENCE as the registry's user (for checks in tests)."""
        return requests.get(
            f"http://{self.host}/v2/{name}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
            auth=(self.username, self.password),
            timeout=10,
        )

    def tags(self, name: str) -> list[str]:
        response = requests.get(
            f"http://{self.host}/v2/{name}/tags/list", auth=(self.username, self.password), timeout=10
        )
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return response.json().get("tags") or []


@pytest.fixture
def registry(tmp_path_factory, engine):
    """A fresh authenticated registry on an ephemeral port; local tags naming it are removed after."""
    missing = [tool for tool in ("htpasswd", "docker-registry", "curl") if shutil.which(tool) is None]
    if missing:
        why = f"needs {', '.join(missing)} (apt: apache2-utils, docker-registry, curl): run scripts/bootstrap"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the registry tests cannot run: {why}", pytrace=False)
        pytest.skip(why)
    reg = TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port())
    reg.write_config()
    try:
        reg.start()
        yield reg
    finally:
        reg.stop()
        for pid in reg._started:  # a start() the test did after a stop() is ours too
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        _remove_local_names(engine, reg.host)
        shutil.rmtree(reg.root, ignore_errors=True)


def _remove_local_names(engine, host: str) -> None:
    """Remove every local tag or digest reference naming the test registry (never the images'
    other names: an image that keeps another name is only untagged)."""
    import docker.errors

    prefix = host + "/"
    for image in engine.client.api.images():
        names = [n for n in (image.get("RepoTags") or []) + (image.get("RepoDigests") or []) if n.startswith(prefix)]
        for name in names:
            try:
                engine.client.api.remove_image(name, force=False)
            except docker.errors.APIError:
                pass
