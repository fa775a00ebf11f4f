"""Registry loss: a real registry (the docker-registry binary) killed in the middle of the composer's
own push of a `composer build`. Started again within the tries: the push resumes and completes, and
every blob the pushed manifest names is in the registry. Down for good: one line, exit 1, and the
registry (started again to look) holds no tag."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import requests

from tests.conftest import TEST_RUN
from tests.integration.test_interrupts import BUILD, Build, _no_build_left  # noqa: F401 (a fixture)

REPOSITORY = "composer-test/loss"


def _kill(registry) -> None:
    """The registry dies (SIGKILL: no goodbye to the clients), keeping its storage."""
    pid, registry.pid = registry.pid, None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _auth_file(tmp_path: Path, registry) -> Path:
    auth = tmp_path / "auth"
    auth.write_text(f"{registry.username}:{registry.password}")
    return auth


def _blobs_present(registry, tag: str) -> list[str]:
    """The digests the manifest under `tag` names that the registry lacks."""
    answer = registry.manifest(REPOSITORY, tag)
    assert answer.status_code == 200, answer.text
    manifest = json.loads(answer.content)
    missing = []
    for digest in [manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])]:
        head = requests.head(f"{registry.url}/v2/{REPOSITORY}/blobs/{digest}",
                             auth=(registry.username, registry.password), timeout=10)
        if head.status_code != 200:
            missing.append(digest)
    return missing


def test_a_registry_killed_mid_push_and_started_again(engine, standin_images, registry, tmp_path, names):
    tag = f"triton-composer-test/loss:{TEST_RUN}"
    names.append(tag)
    pushed = f"{registry.host}/{REPOSITORY}:back-{TEST_RUN}"
    began = time.monotonic()
    build = Build([*BUILD, "--tag", tag, "--no-smoke-test", "--push", pushed, "--registry-auth",
                   f"file:{_auth_file(tmp_path, registry)}", "--registry-tries", "6", "--registry-backoff", "1"],
                  tmp_path / "tmp")
    build.wait_for(r"^pushing ")
    _kill(registry)
    build.wait_for(r"; try 2 of 6 in 1 s$")  # the push met the dead registry and waits to try again
    registry.start()
    code = build.finish()
    assert code == 0, "\n".join(build.lines[-30:])
    assert _blobs_present(registry, f"back-{TEST_RUN}") == []
    print(f"\nregistry killed mid-push, back once the push met it dead: build + push {time.monotonic() - began:.0f} s")


def test_a_registry_that_stays_down_is_one_line_and_no_tag(engine, standin_images, registry, tmp_path, names):
    tag = f"triton-composer-test/loss:{TEST_RUN}-down"
    names.append(tag)
    pushed = f"{registry.host}/{REPOSITORY}:down-{TEST_RUN}"
    began = time.monotonic()
    build = Build([*BUILD, "--tag", tag, "--no-smoke-test", "--push", pushed, "--registry-auth",
                   f"file:{_auth_file(tmp_path, registry)}", "--registry-tries", "3", "--registry-backoff", "0.2"],
                  tmp_path / "tmp")
    build.wait_for(r"^pushing ")
    _kill(registry)
    code = build.finish()
    assert code == 1, "\n".join(build.lines[-30:])
    last = build.lines[-1]
    assert last.startswith(f"error: {registry.host}: unreachable after 3 tries ("), "\n".join(build.lines[-30:])
    assert not any("Traceback" in line for line in build.lines)
    registry.start()
    assert registry.manifest(REPOSITORY, f"down-{TEST_RUN}").status_code == 404
    print(f"\nregistry down for good: build + failed push {time.monotonic() - began:.0f} s")
