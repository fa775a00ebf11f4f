"""eStargz layers written by the composer, read by the reference implementation: stargz-snapshotter's
estargz package (v0.18.2, tests/integration/tools/estargz-check, built from the module proxy by
scripts/go-tools). It opens the blob by its footer, checks the TOC against the digest the layer's
descriptor will carry, and every chunk of every file against its chunkDigest, as the snapshotter
does when it mounts a layer lazily."""

from __future__ import annotations

import json
import uuid
import subprocess
import tarfile
from pathlib import Path

import pytest

from composer.registry import estargz
from tests.cli import composer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MIN_STANDIN = "localhost/standin/tritonserver:24.09-py3-min"


@pytest.fixture(scope="module")
def check() -> str:
    done = subprocess.run([str(ROOT / "scripts" / "go-tools"), "estargz-check"], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"scripts/go-tools estargz-check failed: {done.stderr[-2000:]}", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def layer(engine, standin_images, tmp_path_factory) -> Path:
    """The min stand-in's largest layer (its Debian root, 120 MB), as the engine saves it."""
    folder = tmp_path_factory.mktemp("saved")
    saved = subprocess.run(f"docker save {MIN_STANDIN} | tar -x -C {folder}", shell=True, capture_output=True,
                           text=True, timeout=600)
    assert saved.returncode == 0, saved.stderr
    layers = json.loads((folder / "manifest.json").read_text())[0]["Layers"]
    return max((folder / name for name in layers), key=lambda path: path.stat().st_size)


def _regular_files(path: Path) -> tuple[int, int]:
    """The regular files a reader finds by name, and their bytes: a hard link is one more name of its
    target's contents."""
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    size = {m.name: m.size for m in members if m.isreg()}
    links = [size[m.linkname] for m in members if m.islnk() and m.linkname in size]
    return len(size) + len(links), sum(size.values()) + sum(links)


def test_the_reference_reader_verifies_every_chunk_and_finds_the_prefetched_files_first(check, layer, tmp_path):
    prefetch = ["/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/etc/passwd", "/usr/bin/not-there"]
    blob = tmp_path / "layer.esgz"
    with open(blob, "wb") as out:
        converted = estargz.convert(layer, out, prefetch)
    read = subprocess.run([check, str(blob), converted.toc_digest], capture_output=True, text=True, timeout=600)
    assert read.returncode == 0, read.stderr
    seen = json.loads(read.stdout)
    files, size = _regular_files(layer)
    assert seen["toc_digest"] == converted.toc_digest
    assert seen["files"] == files + 1 and seen["bytes"] == size + 1  # and the landmark
    assert seen["landmark"] == ".prefetch.landmark"
    assert seen["prefetched"] == ["etc/passwd", "usr/bin/bash", "usr/lib/x86_64-linux-gnu/libc.so.6"]
    # A TOC digest that is not the blob's is refused: the check is real.
    wrong = subprocess.run([check, str(blob), "sha256:" + "0" * 64], capture_output=True, text=True, timeout=600)
    assert wrong.returncode == 1 and "TOC" in wrong.stderr


def test_the_same_layer_gives_the_same_blob_and_none_prefetched_says_so(check, layer, tmp_path):
    converted = []
    for n in (1, 2):
        with open(tmp_path / f"{n}.esgz", "wb") as out:
            converted.append(estargz.convert(layer, out))
    assert converted[0] == converted[1]
    read = subprocess.run([check, str(tmp_path / "2.esgz"), converted[1].toc_digest], capture_output=True, text=True,
                          timeout=600)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["landmark"] == ".no.prefetch.landmark"


@pytest.fixture(scope="module")
def esgz_registry(engine, tmp_path_factory):
    from tests.integration.conftest import TestRegistry, _free_port, _need, _serve

    _need("htpasswd", "docker-registry", "curl")
    yield from _serve(TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port()), engine)


def test_an_estargz_push_the_reference_reads_layer_by_layer_and_docker_pulls_and_serves_as_gzip(
        engine, standin_images, check, esgz_registry, tmp_path):
    """composer build --push --compression estargz: each layer's blob, fetched from the registry,
    passes the reference reader against its descriptor's TOC digest; a second push gives the same
    digest; Docker pulls the image as plain gzip and it answers the ONNX sample."""
    import requests

    from tests.cli import image_json
    from tests.conftest import TEST_LABEL_KEY, TEST_RUN
    from tests.integration.test_coldstart import SAMPLE, _serve_with_docker_cli

    reg = esgz_registry
    name = uuid.uuid4().hex[:8]
    tag = f"triton-composer-test/estargz:{name}"
    refs = [f"{reg.host}/composer-test/esgz:{n}-{name}" for n in ("one", "two")]
    env = {"ESGZ_AUTH": f"{reg.username}:{reg.password}"}
    digests = []
    try:
        for ref in refs:
            run = composer("build", "--registry", "localhost/standin", "--version", "24.09", "-b", "onnxruntime",
                           "--tag", tag, "--label", f"{TEST_LABEL_KEY}={TEST_RUN}", "--no-smoke-test", "--push", ref,
                           "--registry-auth", "env:ESGZ_AUTH", "--compression", "estargz", "--json", env=env)
            assert run.returncode == 0, run.stderr[-2000:]
            digests.append(image_json(run.stdout)["pushed"]["digest"])
        assert digests[0] == digests[1]
        answer = reg.manifest("composer-test/esgz", digests[0])
        assert answer.status_code == 200
        layers = answer.json()["layers"]
        assert len(layers) >= 3
        for n, layer in enumerate(layers):
            blob = requests.get(f"{reg.url}/v2/composer-test/esgz/blobs/{layer['digest']}",
                                auth=(reg.username, reg.password), timeout=120)
            assert blob.status_code == 200
            path = tmp_path / f"layer{n}"
            path.write_bytes(blob.content)
            toc = layer["annotations"]["containerd.io/snapshot/stargz/toc.digest"]
            read = subprocess.run([check, str(path), toc], capture_output=True, text=True, timeout=600)
            assert read.returncode == 0, (layer, read.stderr)
            assert json.loads(read.stdout)["landmark"] == ".no.prefetch.landmark"
        models = tmp_path / "models"
        import shutil

        shutil.copytree(SAMPLE.path, models / SAMPLE.model)
        for path in [models, *models.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        by_digest = f"{reg.host}/composer-test/esgz@{digests[0]}"
        pulled = engine.pull(by_digest, auth=reg.auth.as_config())
        assert pulled.id != engine.image(tag).id  # the tars inside carry the TOC: a config of its own
        problem = _serve_with_docker_cli("unix:///var/run/docker.sock", by_digest, models)
        assert problem is None, problem
    finally:
        subprocess.run(["docker", "image", "rm", tag], capture_output=True)
