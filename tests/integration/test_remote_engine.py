"""A remote engine for real: a Docker engine in a container, reached over TCP at 127.0.0.2.

Its API and every port it publishes sit on 127.0.0.2 only, so a smoke test that assumed
127.0.0.1 would fail here. The engine container (and its storage) goes when the module ends,
whatever became of the tests.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from composer.engine.connect import connect
from composer.engine.interface import ContainerEngine
from composer.core.errors import ComposerError
from composer.resolve.plan_types import RUN_LABEL
from tests.conftest import TEST_LABEL, TEST_LABEL_KEY, TEST_RUN
from tests.integration.test_build import REGISTRY, composer
from tests.cli import image_json

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "engine-in-container"
ADDRESS = "127.0.0.2"
STANDINS = ("localhost/standin/tritonserver:24.09-py3", "localhost/standin/tritonserver:24.09-py3-min")
PORTS = 8  # the inner engine's ephemeral range: host ports its containers may be given


@dataclass(frozen=True)
class InnerEngine:
    host: str  # the DOCKER_HOST value, tcp://127.0.0.2:PORT
    engine: ContainerEngine

    def containers(self) -> list[str]:
        """Every container on the inner engine, ours or not (the docker CLI, as a user would)."""
        done = subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True,
                              env={**os.environ, "DOCKER_HOST": self.host}, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()


def _events(host: str | None, since: int, label: str) -> list[dict]:
    """The container events an engine (this machine's when `host` is None) recorded since `since` for containers labelled `label`."""
    env = {**os.environ, **({"DOCKER_HOST": host} if host else {})}
    done = subprocess.run(["docker", "events", "--since", str(since), "--until", str(int(time.time()) + 1),
                           "--filter", "type=container", "--filter", f"label={label}", "--format", "{{json .}}"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((ADDRESS, port))
        except OSError:
            return False
    return True


def _free_block(count: int) -> int:
    """The first of `count` consecutive ports free on ADDRESS."""
    for _ in range(200):
        first = random.randrange(42000, 58000)
        if all(_bindable(p) for p in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports on {ADDRESS}")


def _unavailable(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and the engine in a container cannot start: {why}", pytrace=False)
    pytest.skip(f"no engine in a container: {why}")


@pytest.fixture(scope="module")
def inner(standins_archive):
    """The engine in a container, holding the 24.09 stand-ins (moved through the engines' APIs)."""
    if shutil.which("docker") is None:
        _unavailable("the docker CLI is not installed")
    name = f"triton-composer-engine-{TEST_RUN}-{uuid.uuid4().hex[:6]}"
    first = _free_block(PORTS + 1)
    api, low, high = first, first + 1, first + PORTS
    try:
        done = subprocess.run([str(SCRIPT), "start", name, str(api), str(low), str(high),
                               f"{TEST_LABEL_KEY}={TEST_RUN}"], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            _unavailable(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "the script failed")
        host = done.stdout.strip()
        assert host == f"tcp://{ADDRESS}:{api}"
        remote = connect(timeout=600, host=host)
        remote.load(standins_archive)
        yield InnerEngine(host, remote)
    finally:
        subprocess.run([str(SCRIPT), "stop", name], capture_output=True, timeout=300)


def test_ports_are_reached_where_the_remote_engine_publishes_them(inner):
    container = inner.engine.start(STANDINS[0], ["python3", "-m", "http.server", "8000"], ports=[8000],
                                   labels=TEST_LABEL)
    try:
        assert container.host == ADDRESS
        port = container.host_port(8000)
        deadline = time.monotonic() + 60
        answer = None
        while time.monotonic() < deadline and answer is None:
            try:
                answer = requests.get(container.url(8000), timeout=2)
            except requests.ConnectionError:
                time.sleep(0.3)
        assert answer is not None and answer.status_code == 200
        with pytest.raises(OSError):  # nothing of it on 127.0.0.1
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        container.remove()
    assert container.id not in inner.containers()


def test_build_smoke_test_and_tag_through_the_engine_in_a_container(engine, inner):
    tag = f"triton-composer-test/remote:{uuid.uuid4().hex[:10]}"
    since = int(time.time()) - 1
    try:
        run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", "--tag", tag, "--json",
                       env={"DOCKER_HOST": inner.host})
        assert run.returncode == 0, run.stderr
        smoke = image_json(run.stdout)["smoke_test"]
        assert smoke["passed"] and smoke["gpus"] == "none"
        assert {(r["subject"], r["status"]) for r in smoke["rows"]} >= {("python", "PASS"), ("server", "PASS")}
        assert inner.engine.image(tag) is not None  # tagged on the inner engine...
        assert engine.image(tag) is None  # ...and nothing of it on this machine's
        assert inner.containers() == []  # no probe, collect or smoke container left behind
        # Nothing of this run ever on this machine's engine: no container it made, even one made and
        # removed meanwhile (other tests' come and go; the run's own carry its id).
        found = re.search(r"\(run (\S+):", run.stderr)
        assert found, run.stderr
        label = f"{RUN_LABEL}={found.group(1)}"
        assert _events(None, since, label) == []
        assert engine.containers_labelled(label) == [] and engine.images_labelled(label, untagged=True) == []
        assert _events(inner.host, since, label), "the run's own containers are seen on the inner engine"
    finally:
        try:
            inner.engine.remove_image(tag, force=True)
        except ComposerError:
            pass
