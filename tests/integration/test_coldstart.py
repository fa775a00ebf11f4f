"""Cold start at small scale (issue 37): an image the composer pushes with zstd layers is pulled by
a fresh containerd (ctr) and by Podman, each of which serves the ONNX sample from it; gzip stays the
default and Debian 12's Docker 20.10 pulls it (and refuses zstd, which is why gzip stays the
default); an unknown compression is refused naming the choices.

Each node is the benchmark's own (triton_standins.nodes, engines): a containerd with its own root,
state and socket, a second dockerd with its own data root, a Podman service with its own storage.
Servers run in this machine's network (host networking) and listen on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from composer.engine.connect import connect
from composer.core.errors import ComposerError
from composer.verify.samples import load_samples
from tests.cli import composer
from tests.conftest import TEST_LABEL_KEY, TEST_RUN
from tests.integration.conftest import TestRegistry, _free_port, _need, _serve
from tests.integration.test_podman import PodmanService
from triton_standins.engines import Dockerd
from triton_standins.nodes import ContainerdNode, first_answer, free_port, server_args, wait_ready

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"
GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
SAMPLE = next(s for s in load_samples() if s.model == "onnx_affine")
DOCKERD_SLOT = 235  # the second dockerd's addresses (its servers run on the host's network)


def _required(tool: str, apt: str) -> None:
    if shutil.which(tool) is None:
        why = f"needs {tool} (apt-get install {apt}; scripts/bootstrap installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="module")
def cold_registry(engine, tmp_path_factory):
    _need("htpasswd", "docker-registry", "curl")
    yield from _serve(TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port()), engine)


@pytest.fixture(scope="module")
def pushed(engine, standin_images, cold_registry, tmp_path_factory):
    """The onnxruntime image built and pushed twice by `composer build --push`: without
    --compression (the default), and with --compression zstd. {compression: ref}."""
    name = uuid.uuid4().hex[:8]
    tag = f"triton-composer-test/coldstart:{name}"
    refs = {"default": f"{cold_registry.host}/composer-test/coldstart:default-{name}",
            "zstd": f"{cold_registry.host}/composer-test/coldstart:zstd-{name}"}
    env = {"COLDSTART_AUTH": f"{cold_registry.username}:{cold_registry.password}",
           "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache"))}  # the base's compressed blobs: the test's own
    try:
        for kind, ref in refs.items():
            run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "onnxruntime", "--tag", tag,
                           "--label", f"{TEST_LABEL_KEY}={TEST_RUN}", "--no-smoke-test", "--push", ref,
                           "--registry-auth", "env:COLDSTART_AUTH",
                           *(["--compression", kind] if kind != "default" else []), env=env)
            assert run.returncode == 0, run.stderr[-2000:]
        yield refs
    finally:
        engine.remove_image(tag, force=True)


def _layers(registry: TestRegistry, ref: str) -> tuple[str, list[dict]]:
    """The manifest's digest and its layers, as the registry serves them."""
    name, tag = ref.split("/", 1)[1].rsplit(":", 1)
    answer = registry.manifest(name, tag)
    assert answer.status_code == 200, answer.text
    return answer.headers["Docker-Content-Digest"], answer.json()["layers"]


@pytest.fixture
def models(tmp_path) -> Path:
    """A model repository holding the ONNX sample alone, readable by any user of an image."""
    folder = tmp_path / "models"
    shutil.copytree(SAMPLE.path, folder / SAMPLE.model)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _serve_with_docker_cli(host: str, ref: str, models: Path) -> str | None:
    """Run tritonserver from `ref` on an engine speaking Docker's API (host network, 127.0.0.1
    only), send the sample's request; None when the answer is right, else what went wrong."""
    http, grpc = free_port(), free_port()
    name = f"coldstart-{uuid.uuid4().hex[:8]}"
    args = server_args("/models", http, grpc)
    docker = ["docker", "-H", host]
    started = subprocess.run([*docker, "run", "-d", "--name", name, "--network", "host", "--label",
                              f"{TEST_LABEL_KEY}={TEST_RUN}", "-v", f"{models}:/models:ro", "--entrypoint", args[0],
                              ref, *args[1:]], capture_output=True, text=True, timeout=300)
    try:
        if started.returncode != 0:
            return f"docker run: {started.stderr.strip()[-300:]}"

        def alive() -> bool:
            done = subprocess.run([*docker, "inspect", "-f", "{{.State.Running}}", name], capture_output=True,
                                  text=True, timeout=60)
            return done.stdout.strip() == "true"

        url = f"http://127.0.0.1:{http}"
        if not wait_ready(url, 120, alive):
            logs = subprocess.run([*docker, "logs", "--tail", "5", name], capture_output=True, text=True, timeout=60)
            return f"not ready: {(logs.stderr or logs.stdout).strip()[-300:]}"
        return first_answer(url, SAMPLE)
    finally:
        subprocess.run([*docker, "rm", "-f", name], capture_output=True, timeout=120)


def test_zstd_push_changes_every_layer_and_the_digest(cold_registry, pushed):
    default_digest, default_layers = _layers(cold_registry, pushed["default"])
    zstd_digest, zstd_layers = _layers(cold_registry, pushed["zstd"])
    assert {layer["mediaType"] for layer in default_layers} == {GZIP}  # gzip stays the default
    assert {layer["mediaType"] for layer in zstd_layers} == {ZSTD}  # the base's layers too, not only its own
    assert len(zstd_layers) == len(default_layers)
    assert zstd_digest != default_digest
    assert not {l["digest"] for l in zstd_layers} & {l["digest"] for l in default_layers}


def test_a_fresh_containerd_pulls_the_zstd_image_and_serves(cold_registry, pushed, models, tmp_path):
    _required("containerd", "containerd")
    _, layers = _layers(cold_registry, pushed["zstd"])
    node = ContainerdNode(tmp_path / "node").start()
    task = f"coldstart-{uuid.uuid4().hex[:8]}"
    user = f"{cold_registry.username}:{cold_registry.password}"
    try:
        _, arrived = node.fetch(pushed["zstd"], user=user)
        assert {l["digest"] for l in layers} <= set(arrived)  # every zstd blob downloaded, as stored
        node.unpack(pushed["zstd"], user=user)
        http, grpc = free_port(), free_port()
        node.run(pushed["zstd"], task, server_args("/models", http, grpc), mounts=((models, "/models"),),
                 log=tmp_path / "server.log")
        url = f"http://127.0.0.1:{http}"
        assert wait_ready(url, 120, lambda: node.running(task)), (tmp_path / "server.log").read_text()[-1000:]
        assert first_answer(url, SAMPLE) is None
    finally:
        node.stop()
    assert not node.root.exists() and not node.state.exists()
    assert node.process.poll() is not None


def test_podman_pulls_the_zstd_image_and_serves(cold_registry, pushed, models, tmp_path):
    _required("podman", "podman")
    # Podman refuses a run root of more than 50 characters: a short folder of the test's own.
    service = PodmanService(Path(tempfile.mkdtemp(prefix="coldstart-podman-")))
    try:
        try:
            service.start(cold_registry.host)  # plain http, as Docker assumes for 127.0.0.0/8
        except RuntimeError as exc:
            if os.environ.get("CI"):
                pytest.fail(f"CI is set and the podman service cannot start: {exc}", pytrace=False)
            pytest.skip(f"the podman service cannot start: {exc}")
        assert service.engine.is_podman
        service.engine.pull(pushed["zstd"], auth={"username": cold_registry.username,
                                                  "password": cold_registry.password})
        assert _serve_with_docker_cli(service.host, pushed["zstd"], models) is None
    finally:
        service.stop()
        subprocess.run(["podman", "--root", str(service.folder / "storage"), "--runroot", str(service.folder / "run"),
                        "system", "reset", "--force"], capture_output=True, timeout=300)
        shutil.rmtree(service.folder, ignore_errors=True)


def test_docker_20_10_refuses_zstd_and_pulls_the_default_gzip_image_and_serves(cold_registry, pushed, models,
                                                                                tmp_path):
    """The zstd image first, on the empty data root: once a node holds the same layers from the
    gzip image, Docker 20.10 accepts the zstd one too, without decompressing anything."""
    _required("dockerd", "docker.io")
    dockerd = Dockerd(tmp_path / "dockerd", slot=DOCKERD_SLOT).start()
    auth = {"username": cold_registry.username, "password": cold_registry.password}
    try:
        second = connect(timeout=600, host=dockerd.host)
        version = dockerd.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
        if int(version.split(".")[0]) < 23:  # Debian 12's 20.10: zstd layers came with Docker 23
            with pytest.raises(ComposerError) as refused:
                second.pull(pushed["zstd"], auth=auth)
            # It downloads every layer, then cannot read the first as a tar.
            assert "failed to register layer" in refused.value.message, refused.value.message
            assert second.image(pushed["zstd"]) is None
        second.pull(pushed["default"], auth=auth)
        assert _serve_with_docker_cli(dockerd.host, pushed["default"], models) is None
    finally:
        dockerd.stop()
    assert not dockerd.data_root.exists()


def test_an_unknown_compression_is_refused_naming_the_choices(engine, standin_images):
    before = set(engine.images_labelled(f"{TEST_LABEL_KEY}={TEST_RUN}"))
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "onnxruntime",
                   "--push", "127.0.0.1:9/composer-test/coldstart:x", "--compression", "lz4")
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "lz4" in lines[0] and all(choice in lines[0] for choice in ("gzip", "zstd", "none")), lines[0]
    assert set(engine.images_labelled(f"{TEST_LABEL_KEY}={TEST_RUN}")) <= before  # refused before any work (others come and go)
