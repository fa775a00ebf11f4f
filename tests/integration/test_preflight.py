"""The preflight: what only a service can judge (a registry's answer to these credentials) is asked
before any work, so a wrong password fails in seconds with nothing pulled, built or tagged.

Real parts: the engine, the 24.09 stand-ins, and Debian's registry with htpasswd auth on loopback.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.cli import composer
from tests.integration.test_build import test_tag  # noqa: F401 (a fixture: a tag of the test's own, removed after)

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"


def test_a_wrong_registry_password_fails_before_any_work(engine, standin_images, registry, test_tag):
    target = f"{registry.host}/team/preflight:{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "python", "--tag", test_tag,
                   "--push", target, "--registry-auth", "env:PREFLIGHT_AUTH", "--json",
                   env={"PREFLIGHT_AUTH": f"{registry.username}:not-the-password"}, timeout=600)
    seconds = time.monotonic() - started
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert run.returncode == 1, run.stderr
    assert len(errors) == 1 and "--push" in errors[0] and "refused the credentials" in errors[0], run.stderr
    assert "not-the-password" not in run.stdout + run.stderr
    assert "build context" not in run.stderr and "composing" not in run.stderr  # no work began
    payload = json.loads(run.stdout)
    assert payload["command"] == "build" and payload["exit_code"] == 1 and payload["images"] == []
    assert engine.image(test_tag) is None and engine.image(target) is None  # no tag moved, here or there
    assert registry.tags("team/preflight") == []
    assert seconds < 60, f"{seconds:.1f} s: the preflight must answer long before a build would"  # a build takes more


def test_the_right_password_passes_the_preflight_and_the_push_is_checked_once(engine, standin_images, registry,
                                                                                test_tag):
    """The preflight's upload session is cancelled: the registry holds nothing but what the push put."""
    target = f"{registry.host}/team/preflight:{uuid.uuid4().hex[:8]}"
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "identity", "--tag", test_tag,
                   "--no-smoke-test", "--push", target, "--registry-auth", "env:PREFLIGHT_AUTH", "--json",
                   env={"PREFLIGHT_AUTH": f"{registry.username}:{registry.password}"}, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "takes a push with these credentials" in run.stderr
    payload = json.loads(run.stdout)
    assert payload["summary"] == {"images": 1, "failed": 0, "passed": 1}
    assert payload["images"][0]["status"] == "pushed"
    tags = registry.tags("team/preflight")  # the image's tag, and cosign's tags of what is beside it
    assert [t for t in tags if not t.startswith("sha256-")] == [target.rsplit(":", 1)[1]], tags
