"""The image pipeline against a real registry: mirror, build from the mirror and push, bundle
across an "air gap" (registry stopped), and nothing pushed for an image that does not serve.

One mirror of upstream (the stand-ins as NGC serves them, copied registry to registry) serves the
file's tests: the first asserts what mirroring it moved; the lock test moves a tag and mirrors it
back; the air-gap test, last, stops the registry."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass

import pytest

from composer.publish.push import push_image
from tests.cli import composer, image_json

pytestmark = pytest.mark.integration


def _login(*registries, folder) -> dict[str, str]:
    """A docker config holding the registries' credentials: the engine's own, as after docker login."""
    folder.mkdir()
    auths = {registry.host: {"auth": base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()}
             for registry in registries}
    (folder / "config.json").write_text(json.dumps({"auths": auths}))
    return {"DOCKER_CONFIG": str(folder)}


@pytest.fixture
def login(registry, tmp_path):
    return _login(registry, folder=tmp_path / "docker-config")


@dataclass
class Mirrored:
    registry: object
    login: dict[str, str]
    mirror: str
    first: dict  # what the first `composer mirror --json` printed
    upstream: object


@pytest.fixture(scope="module")
def mirrored(engine, upstream, tmp_path_factory):
    """One registry with the 24.09 stand-ins mirrored into it from upstream, for the file's tests."""
    from tests.integration.conftest import TestRegistry, _free_port, _need, _serve

    _need("htpasswd", "docker-registry", "curl")
    served = _serve(TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port()), engine)
    registry = next(served)
    try:
        login = _login(registry, upstream.registry, folder=tmp_path_factory.mktemp("login") / "docker-config")
        mirror = f"{registry.host}/nvidia"
        run = _mirror(upstream, mirror, login)
        assert run.returncode == 0, run.stderr
        yield Mirrored(registry, login, mirror, json.loads(run.stdout), upstream)
    finally:
        served.close()  # the registry stops, its local names go


def _mirror(upstream, mirror: str, login: dict[str, str]):
    """`composer mirror` from upstream to `mirror`, registry to registry (both logins in the docker config)."""
    return composer("mirror", "--version", "24.09", "--registry", upstream.prefix, "--to", mirror, "--json", env=login)


def forget(engine, ref: str) -> None:
    """Remove a local name so the next use must reach the registry (the image keeps other names)."""
    engine.remove_image(ref, force=False)


def test_mirror_build_from_mirror_and_push(engine, mirrored):
    registry, login, mirror = mirrored.registry, mirrored.login, mirrored.mirror
    assert all(i["moved"] for i in mirrored.first["images"])
    again = _mirror(mirrored.upstream, mirror, login)
    assert again.returncode == 0, again.stderr
    assert not any(i["moved"] for i in json.loads(again.stdout)["images"])

    for suffix in ("-py3", "-py3-min"):  # copied registry to registry: the build must pull from the mirror
        assert engine.image(f"{mirror}/tritonserver:24.09{suffix}") is None
    target = f"{registry.host}/team/triton:onnx-{uuid.uuid4().hex[:6]}"
    build = composer("build", "--registry", mirror, "--version", "24.09", "-b", "onnxruntime", "-b", "python",
                     "--tag", "triton-composer-test/pipeline:onnx", "--push", target,
                     "--registry-auth", "env:TEST_REGISTRY_AUTH", "--json",
                     env={**login, "TEST_REGISTRY_AUTH": f"{registry.username}:{registry.password}"})
    try:
        assert build.returncode == 0, build.stderr
        payload = image_json(build.stdout)
        digest = payload["pushed"]["digest"]
        assert payload["smoke_test"]["passed"]
        assert registry.manifest(target.split("/", 1)[1].split(":")[0], digest).status_code == 200
        assert registry.password not in build.stdout + build.stderr
        assert payload["base_images"]["full"]["digest"].startswith("sha256:")  # pulled, so pinned by digest

        forget(engine, target)
        repo = target.rsplit(":", 1)[0]
        pulled = engine.pull(f"{repo}@{digest}", auth=registry.auth.as_config())
        assert pulled.id == engine.image("triton-composer-test/pipeline:onnx").id
    finally:
        engine.remove_image("triton-composer-test/pipeline:onnx", force=True)


def test_failed_smoke_test_pushes_nothing(engine, standin_images, registry, login, tmp_path):
    broken = tmp_path / "identity"
    broken.mkdir()
    (broken / "model.py").write_text("class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    target = f"{registry.host}/team/triton:broken"
    run = composer("build", "--registry", "localhost/standin", "--version", "24.09", "-b", "python",
                   "--custom-backend", f"identity={broken}", "--tag", "triton-composer-test/pipeline:broken",
                   "--push", target, env=login)
    engine.remove_image("triton-composer-test/pipeline:broken", force=True)
    assert run.returncode != 0
    assert "smoke test failed" in run.stderr.strip().splitlines()[-1]
    assert registry.tags("team/triton") == []


def test_lock_against_a_registry_then_the_tag_moves(engine, standin_images, mirrored, tmp_path):
    registry, login, mirror = mirrored.registry, mirrored.login, mirrored.mirror
    path = tmp_path / "mirrored.yaml"
    path.write_text(f'version: "24.09"\nregistry: {mirror}\nbackends: [python]\n'
                    "tag: triton-composer-test/pipeline:locked\n")
    locked = composer("lock", "--set", str(path), "--json", env=login)
    assert locked.returncode == 0, locked.stderr
    images = json.loads(locked.stdout)["locks"][0]["images"]
    assert all(i["digest"].startswith("sha256:") and not i.get("local") for i in images)
    try:
        built = composer("build", "--set", str(path), "--locked", "--no-smoke-test", "--json", env=login)
        assert built.returncode == 0, built.stderr
        assert "@sha256:" in image_json(built.stdout)["base_images"]["full"]["ref"]  # built from the digest

        # Someone pushes another image under the full tag: --locked refuses, without pulling it.
        push_image(engine, standin_images.min_id, f"{mirror}/tritonserver:24.09-py3", auth=registry.auth)
        moved = composer("build", "--set", str(path), "--locked", env=login)
        assert moved.returncode != 0
        last = moved.stderr.strip().splitlines()[-1]
        assert f"{mirror}/tritonserver:24.09-py3 moved since the lock" in last
    finally:
        engine.remove_image("triton-composer-test/pipeline:locked", force=True)
        forget(engine, f"{mirror}/tritonserver:24.09-py3")  # the name that push left here, on the min image
        back = _mirror(mirrored.upstream, mirror, login)  # the tag as upstream has it
        assert back.returncode == 0, back.stderr


def test_bundle_then_build_with_the_registry_stopped(engine, mirrored, tmp_path):
    """Last in the file: it stops the mirror's registry."""
    registry, login, mirror = mirrored.registry, mirrored.login, mirrored.mirror
    archive = tmp_path / "python.tar"
    made = composer("bundle", "-o", str(archive), "--registry", mirror, "--version", "24.09", "-b", "python",
                    "--tag", "triton-composer-test/pipeline:bundled", env=login)
    assert made.returncode == 0, made.stderr

    registry.stop()
    for suffix in ("-py3", "-py3-min"):
        forget(engine, f"{mirror}/tritonserver:24.09{suffix}")
    without = composer("build", "--registry", mirror, "--version", "24.09", "-b", "python", env=login)
    assert without.returncode != 0 and "cannot pull" in without.stderr.strip().splitlines()[-1]

    try:
        built = composer("build", "--bundle", str(archive), "--json", env=login)
        assert built.returncode == 0, built.stderr
        payload = image_json(built.stdout)
        assert payload["tag"] == "triton-composer-test/pipeline:bundled" and payload["smoke_test"]["passed"]
    finally:
        engine.remove_image("triton-composer-test/pipeline:bundled", force=True)
