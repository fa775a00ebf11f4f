"""eStargz layers written by the composer, read by the reference implementation: stargz-snapshotter's
estargz package (v0.18.2, tests/integration/tools/estargz-check, built from the module proxy by
scripts/go-tools). It opens the blob by its footer, checks the TOC against the digest the layer's
descriptor will carry, and every chunk of every file against its chunkDigest, as the snapshotter
does when it mounts a layer lazily."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
import tarfile
from pathlib import Path

import pytest

from composer.registry import estargz
from tests.cli import composer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MIN_STANDIN = "localhost/standin/tritonserver:24.09-py3-min"
# A lazily pulling node: containerd v2.4.2 (its runc shim) and stargz-snapshotter v0.18.2.
STARGZ_NODE_TOOLS = ("containerd2", "ctr2", "containerd-shim2", "containerd-stargz-grpc", "ctr-remote")


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


def test_a_layer_with_nothing_to_prefetch_says_so_to_the_reference_reader(check, layer, tmp_path):
    """(The same layer and list give the same blob: tests/unit/test_estargz.py, and the pushes below.)"""
    with open(tmp_path / "layer.esgz", "wb") as out:
        converted = estargz.convert(layer, out)
    read = subprocess.run([check, str(tmp_path / "layer.esgz"), converted.toc_digest], capture_output=True, text=True,
                          timeout=600)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["landmark"] == ".no.prefetch.landmark"


@pytest.fixture(scope="module")
def esgz_registry(engine, tmp_path_factory):
    from tests.integration.conftest import TestRegistry, _free_port, _need, _serve

    _need("htpasswd", "docker-registry", "curl")
    yield from _serve(TestRegistry(root=tmp_path_factory.mktemp("registry"), port=_free_port()), engine)


@pytest.fixture(scope="module")
def pushed(engine, standin_images, esgz_registry, tmp_path_factory):
    """composer build --push --compression estargz with its smoke test serving only the ONNX sample
    (as the user's model: the identity backend is in the image and unused; the small stand-in's
    onnxruntime runs on the python backend), then the same build pushed to another repository (its
    layers written and converted again)."""
    from tests.cli import image_json
    from tests.conftest import TEST_LABEL_KEY, TEST_RUN
    from tests.integration.test_coldstart import SAMPLE

    reg = esgz_registry
    name = uuid.uuid4().hex[:8]
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(SAMPLE.path, models / SAMPLE.model)
    for path in [models, *models.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    tag = f"triton-composer-test/estargz:{name}"
    refs = [f"{reg.host}/composer-test/esgz:{name}", f"{reg.host}/composer-test/esgz-again:{name}"]
    env = {"ESGZ_AUTH": f"{reg.username}:{reg.password}"}
    runs = []
    try:
        for ref in refs:
            run = composer("build", "--registry", "localhost/standin", "--version", "24.09", "-b", "onnxruntime",
                           "-b", "python", "-b", "identity", "--no-samples", "--model-repository", str(models), "--tag", tag,
                           "--label", f"{TEST_LABEL_KEY}={TEST_RUN}", "--push", ref, "--registry-auth", "env:ESGZ_AUTH",
                           "--compression", "estargz", "--json", env=env)
            assert run.returncode == 0, run.stderr[-2000:]
            runs.append({"ref": ref, "result": image_json(run.stdout), "stderr": run.stderr})
        yield {"runs": runs, "tag": tag, "models": models, "registry": reg}
    finally:
        subprocess.run(["docker", "image", "rm", tag], capture_output=True)


def test_an_estargz_push_puts_first_what_the_server_opened_and_the_reference_reads_every_layer(
        pushed, check, tmp_path):
    """Each layer's blob, fetched from the registry, passes the reference reader against its
    descriptor's TOC digest; the prefetched files are those the smoke test saw the server open (its
    binary and the ONNX Runtime backend it served with, not the identity backend no model used); the
    build pushed to another repository has the same digest."""
    import requests

    reg = pushed["registry"]
    first, again = (run["result"] for run in pushed["runs"])
    assert first["smoke_test"]["passed"] and first["smoke_test"]["files_read"] > 20
    assert "the server opened" in pushed["runs"][0]["stderr"]
    assert first["pushed"]["digest"] == again["pushed"]["digest"]
    digest = first["pushed"]["digest"]
    answer = reg.manifest("composer-test/esgz", digest)
    assert answer.status_code == 200
    layers = answer.json()["layers"]
    assert len(layers) >= 3
    prefetched = []
    for n, layer in enumerate(layers):
        blob = requests.get(f"{reg.url}/v2/composer-test/esgz/blobs/{layer['digest']}",
                            auth=(reg.username, reg.password), timeout=120)
        assert blob.status_code == 200
        path = tmp_path / f"layer{n}"
        path.write_bytes(blob.content)
        toc = layer["annotations"]["containerd.io/snapshot/stargz/toc.digest"]
        read = subprocess.run([check, str(path), toc], capture_output=True, text=True, timeout=600)
        assert read.returncode == 0, (layer, read.stderr)
        seen = json.loads(read.stdout)
        said = int(layer["annotations"].get(estargz.PREFETCH_FILES_ANNOTATION, 0))
        names = seen["prefetched"] or []  # none: null in its JSON
        assert len(names) == said
        assert seen["landmark"] == (".prefetch.landmark" if said else ".no.prefetch.landmark")
        prefetched += names
    assert "opt/tritonserver/bin/tritonserver" in prefetched
    onnxruntime = [name for name in prefetched if name.startswith("opt/tritonserver/backends/onnxruntime/")]
    assert "opt/tritonserver/backends/onnxruntime/model.py" in onnxruntime
    assert [name for name in onnxruntime if name.endswith(".so")]  # its runtime's libraries
    assert "opt/tritonserver/backends/identity/libtriton_identity.so" not in prefetched
    assert not [name for name in prefetched if name.startswith("opt/tritonserver/backends/identity/")]
    shown = composer("inspect", f"{reg.host}/composer-test/esgz@{digest}", "--registry-auth", "env:ESGZ_AUTH",
                     env={"ESGZ_AUTH": f"{reg.username}:{reg.password}"})
    assert shown.returncode == 0, shown.stderr
    assert "prefetched" in shown.stdout and "file(s) before the container starts" in shown.stdout


def test_docker_pulls_the_estargz_image_as_gzip_and_it_serves(engine, pushed):
    from tests.integration.test_coldstart import _serve_with_docker_cli

    reg = pushed["registry"]
    digest = pushed["runs"][0]["result"]["pushed"]["digest"]
    by_digest = f"{reg.host}/composer-test/esgz@{digest}"
    try:
        pulled = engine.pull(by_digest, auth=reg.auth.as_config())
        assert pulled.id != engine.image(pushed["tag"]).id  # the tars inside carry the TOC: a config of its own
        problem = _serve_with_docker_cli("unix:///var/run/docker.sock", by_digest, pushed["models"])
        assert problem is None, problem
    finally:
        subprocess.run(["docker", "image", "rm", by_digest], capture_output=True)


def test_a_stargz_node_mounts_every_layer_from_the_registry_and_serves_having_fetched_part_of_the_image(
        pushed, tmp_path):
    """containerd v2 with stargz-snapshotter (both built from the module proxy by scripts/go-tools):
    every layer is mounted from the registry (the snapshotter's log says so per layer), none lands in
    the content store, the server answers the sample, and the snapshotter has fetched less than the
    image (no background fetch: only the prefetched files and what the server read)."""
    from tests.integration.test_coldstart import SAMPLE
    from triton_standins.nodes import Containerd2Node, first_answer, free_port, server_args, wait_ready

    tools = subprocess.run([str(ROOT / "scripts" / "go-tools"), *STARGZ_NODE_TOOLS], capture_output=True, text=True,
                           timeout=3600)
    assert tools.returncode == 0, tools.stderr[-2000:]
    reg = pushed["registry"]
    ref = pushed["runs"][0]["ref"]
    layers = reg.manifest("composer-test/esgz", pushed["runs"][0]["result"]["pushed"]["digest"]).json()["layers"]
    node = Containerd2Node(tmp_path / "node", lazy=True, background_fetch=False).start()
    task = f"esgz-{uuid.uuid4().hex[:8]}"
    try:
        node.rpull(ref, user=f"{reg.username}:{reg.password}")
        mounted, fetched_whole = node.remote_snapshots()
        assert (mounted, fetched_whole) == (len(layers), 0), node.stargz_log.read_text()[-2000:]
        assert not {layer["digest"] for layer in layers} & set(node.blob_sizes())
        http, grpc = free_port(), free_port()
        node.run(ref, task, server_args("/models", http, grpc), mounts=((pushed["models"], "/models"),),
                 log=tmp_path / "server.log")
        url = f"http://127.0.0.1:{http}"
        assert wait_ready(url, 120, lambda: node.running(task)), (tmp_path / "server.log").read_text()[-1000:]
        assert first_answer(url, SAMPLE) is None
        fetched = sum(done for done, _ in node.fetched_bytes().values())
        image = sum(int(layer["size"]) for layer in layers)
        assert 0 < fetched < image, (fetched, image)
    finally:
        node.stop()
    assert not node.root.exists() and not node.state.exists()
