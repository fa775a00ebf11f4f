"""Stand-ins of both generations and what a composer meets in them: the Ubuntu 24.04 traits,
NGC's numpy layout, the identity backend in C, configless ONNX models, and composing them.

Every image and container made here carries TEST_LABEL; composed tags are removed. Stand-ins
are used by image id: another checkout sharing the engine may retag them with its own recipe.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.cli import composer, image_json

from composer.resolve.contents import probe_files
from composer.verify.samples import load_samples, models_dir
from composer.config.cases import TensorData
from composer.verify.triton_client import TritonHTTP
from tests.conftest import GENERATION_2404_RELEASES, TEST_LABEL

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"
SERVER_INSIDE = {"24.09": "2.50.0", "25.01": "2.51.0", "26.07": "2.51.0"}  # what each stand-in carries
SITE = "/usr/local/lib/python3.11/dist-packages/"


def sh(engine, image: str, script: str, **kwargs) -> str:
    result = engine.run_once(image, ["sh", "-c", script], entrypoint=[], labels=TEST_LABEL, **kwargs)
    assert result.exit_code == 0, result.output
    return result.output


def images_of(release, standins, standin_images):
    return standin_images if release == "24.09" else standins(release)


@pytest.fixture
def test_tag(engine):
    """A tag of this test's own; whatever it names at the end is removed."""
    tag = f"triton-composer-test/tritonserver:{uuid.uuid4().hex[:10]}"
    yield tag
    engine.remove_image(tag, force=True)


def readable(folder: Path) -> Path:
    """Copied into containers as is: open it to the unprivileged users the tests run as."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


# -- traits of each generation ------------------------------------------------------------


@pytest.mark.parametrize("release", GENERATION_2404_RELEASES)
def test_ubuntu_24_04_generation_traits(engine, standins, release):
    images = standins(release)
    for ref in (images.min_id, images.full_id):
        users = sh(engine, ref, "id -u ubuntu; id -g ubuntu; getent group 1000 | cut -d: -f1; "
                                "id -u triton-server 2>/dev/null || echo no-triton-server")
        assert users.split() == ["1000", "1000", "ubuntu", "no-triton-server"], ref
    out = sh(engine, images.full_id,
             "python3 -c 'import numpy; print(numpy.__version__, numpy.__file__)'; "
             "ls /usr/lib/python3.11/EXTERNALLY-MANAGED; dpkg -s python3-numpy >/dev/null 2>&1 && echo debian-numpy; true")
    version, location, marker = out.split()[:3]
    assert version.startswith("1.") and location.startswith(SITE + "numpy/")
    assert marker == "/usr/lib/python3.11/EXTERNALLY-MANAGED"
    assert "debian-numpy" not in out
    info = engine.image(images.full_id)
    # Nothing lies: the env and labels state the server inside, and the release.
    assert info.env["TRITON_SERVER_VERSION"] == SERVER_INSIDE[release]
    assert info.env["NVIDIA_TRITON_SERVER_VERSION"] == release
    assert info.labels["com.nvidia.tritonserver.version"] == SERVER_INSIDE[release]
    assert info.env["PIP_BREAK_SYSTEM_PACKAGES"] == "1"  # as NGC sets it from 24.11
    assert engine.image(images.min_id).env["TRITON_SERVER_VERSION"] == SERVER_INSIDE[release]


def test_ubuntu_22_04_generation_traits(engine, standin_images):
    out = sh(engine, standin_images.full_id,
             "python3 -c 'import numpy; print(numpy.__version__, numpy.__file__)'; "
             "test -e /usr/lib/python3.11/EXTERNALLY-MANAGED && echo marker; id -u triton-server; "
             "id -u ubuntu 2>/dev/null || echo no-ubuntu; dpkg -s python3-numpy >/dev/null 2>&1 && echo debian-numpy; true")
    version, location, *rest = out.split()
    assert version.startswith("1.") and location.startswith(SITE + "numpy/")
    assert rest == ["1000", "no-ubuntu"]  # no marker: Ubuntu 22.04's python is not externally managed
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in engine.image(standin_images.full_id).env


@pytest.mark.parametrize("release, owner", [("25.01", "1000:1000"), ("26.07", "0:0")])
def test_triton_tree_ownership_follows_the_release(engine, standins, release, owner):
    uid = owner.split(":")[0]
    out = sh(engine, standins(release).full_id,
             "stat -c %u:%g /opt/tritonserver/bin/tritonserver /opt/tritonserver/backends/identity/libtriton_identity.so; "
             f"echo not-owned; find /opt/tritonserver -mindepth 1 ! -uid {uid} | head -3; "
             "echo writable; find /opt/tritonserver -mindepth 1 -perm /022 ! -type l | head -3")
    assert out.split() == [owner, owner, "not-owned", "writable"]


# -- the identity backend in C ------------------------------------------------------------

IDENTITY = "/opt/tritonserver/backends/identity"


@pytest.mark.parametrize("release", ["24.09", "25.01"])
def test_identity_backend_is_c_with_bundled_system_and_dlopened_libraries(engine, standins, standin_images, release):
    images = images_of(release, standins, standin_images)
    script = (
        "import json, os, sys; sys.path.insert(0, '/tmp'); import elfdeps as p; "
        f"d = '{IDENTITY}'; "
        "print(json.dumps({n: (lambda i: {'needed': i.needed, 'runpath': i.runpath})(p.read_elf(os.path.join(d, n))) "
        "for n in sorted(os.listdir(d))}))"
    )
    out = engine.run_once(images.full_id, ["python3", "-c", script], entrypoint=[], labels=TEST_LABEL,
                          files=probe_files())
    assert out.exit_code == 0, out.output
    elves = json.loads(out.output)
    assert sorted(elves) == ["libidentity_config.so", "libidentity_copy.so", "libtriton_identity.so"]  # no model.py
    backend = elves["libtriton_identity.so"]
    assert backend["runpath"] == ["$ORIGIN"]
    assert {"libidentity_config.so", "libgomp.so.1"} <= set(backend["needed"])
    assert "libidentity_copy.so" not in backend["needed"]  # loaded with dlopen
    # The min image lacks libgomp: a composer must bring it.
    assert "libgomp" not in sh(engine, images.min_id, "ldconfig -p")
    assert "libgomp.so.1" in sh(engine, images.full_id, "ldconfig -p")


def identity_repository(root: Path) -> Path:
    """The identity sample, a model pairing tensors by name and by position (BYTES and batching
    included), and one whose outputs outnumber its inputs (refused at load)."""
    import shutil

    shutil.copytree(models_dir() / "identity_int32", root / "identity_int32")
    (root / "mixed" / "1").mkdir(parents=True)
    (root / "mixed" / "config.pbtxt").write_text(
        'backend: "identity"\nmax_batch_size: 8\n'
        'input [ { name: "words" data_type: TYPE_STRING dims: [ -1 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 2 ] },'
        ' { name: "echo" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )
    (root / "lopsided" / "1").mkdir(parents=True)
    (root / "lopsided" / "config.pbtxt").write_text(
        'backend: "identity"\ninput [ { name: "INPUT0" data_type: TYPE_INT8 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT8 dims: [ 1 ] },'
        ' { name: "OUTPUT1" data_type: TYPE_INT8 dims: [ 1 ] } ]\n'
    )
    return readable(root)


def serve(engine, image: str, repository: Path, user: str | None = None):
    container = engine.start(
        image, ["tritonserver", "--model-repository=/models", "--exit-on-error=false", "--strict-readiness=false"],
        ports=[8000], files={"/models": repository}, labels=TEST_LABEL, shm_size="256m", user=user,
    )
    client = TritonHTTP(f"http://127.0.0.1:{container.host_port(8000)}")
    if not client.wait_ready(120, is_alive=container.running):
        logs = container.logs(tail=60)
        container.remove()
        pytest.fail("server not ready:\n" + logs)
    return container, client


@pytest.mark.parametrize("release, user", [("24.09", None), ("26.07", "1000")])
def test_identity_c_backend_serves_right_answers(engine, standins, standin_images, tmp_path, release, user):
    """From the full stand-in itself; on 26.07 as an unprivileged user, the tree being root's."""
    images = images_of(release, standins, standin_images)
    container, client = serve(engine, images.full_id, identity_repository(tmp_path / "models"), user=user)
    try:
        assert client.server_metadata()["version"] == SERVER_INSIDE[release]
        sample = next(s for s in load_samples() if s.model == "identity_int32")
        assert sample.check(client.infer(sample.model, sample.inputs)) is None
        words = TensorData("words", "BYTES", (2, 3), ("a", "bc", "", "déjà", "x", "yz"))
        values = TensorData("INPUT1", "FP32", (2, 2), (1.5, -2.0, 3.25, 4.0))
        answer = client.infer("mixed", [words, values])
        assert answer["OUTPUT1"] == TensorData("OUTPUT1", "FP32", (2, 2), values.data)
        assert answer["echo"] == TensorData("echo", "BYTES", (2, 3), words.data)
        index = {m["name"]: m for m in client.model_index()}
        assert index["lopsided"]["state"] == "UNAVAILABLE"
        assert "no input answers output OUTPUT1" in index["lopsided"]["reason"]
        assert "identity backend (triton-composer, C)" in container.logs()
    finally:
        container.remove()


# -- configless ONNX ----------------------------------------------------------------------


def test_configless_onnx_model_is_completed_and_serves(engine, standin_images, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["x2"]), helper.make_node("Add", ["x2", "one"], ["y"])],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]), helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (tmp_path / "models" / "no_config" / "1").mkdir(parents=True)
    onnx.save(model, str(tmp_path / "models" / "no_config" / "1" / "model.onnx"))  # and no config.pbtxt
    container, client = serve(engine, standin_images.full_id, readable(tmp_path / "models"))
    try:
        config = client._json("GET", "/v2/models/no_config/config")
        assert config["backend"] == "onnxruntime" and config["max_batch_size"] == 4
        assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("x", "TYPE_FP32", [3])]
        assert [t["name"] for t in config["output"]] == ["y"]
        answer = client.infer("no_config", [TensorData("x", "FP32", (2, 3), (0.0, 1.0, 2.0, -1.0, 0.5, 10.0))])
        assert answer["y"] == TensorData("y", "FP32", (2, 3), (1.0, 3.0, 5.0, -1.0, 2.0, 21.0))
    finally:
        container.remove()


# -- composing ----------------------------------------------------------------------------


@pytest.mark.parametrize("release", GENERATION_2404_RELEASES)
def test_compose_ubuntu_24_04_generation_onnxruntime_python(engine, standins, release, test_tag):
    standins(release)
    run = composer("build", "--registry", REGISTRY, "--version", release, "-b", "onnxruntime", "-b", "python",
                   "--tag", test_tag, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    payload = image_json(run.stdout)
    assert payload["smoke_test"]["passed"] is True
    rows = {(r["subject"], r["status"]) for r in payload["smoke_test"]["rows"]}
    assert ("onnxruntime", "PASS") in rows and ("python", "PASS") in rows
    # The final stage of NGC's composition for this generation, read from the full image.
    assert payload["server_version"] == SERVER_INSIDE[release]  # the server inside, not the catalog's
    owner = "0:0" if release >= "26.06" else "1000:1000"
    facts = sh(engine, test_tag, "stat -c %u:%g /opt/tritonserver/bin/tritonserver /opt/tritonserver/backends/python; "
               "find /opt/tritonserver -perm /022 ! -type l | wc -l; echo $PIP_BREAK_SYSTEM_PACKAGES; id -u ubuntu "
               "2>/dev/null || echo no-ubuntu; id -u triton-server")
    assert facts.split() == [owner, owner, "0" if owner == "0:0" else facts.split()[2], "1", "no-ubuntu", "1000"]


def test_compose_identity_alone_has_no_python_and_reports_its_libraries(engine, standin_images, test_tag):
    run = composer("build", "--registry", REGISTRY, "--version", "24.09", "-b", "identity", "--tag", test_tag, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    payload = image_json(run.stdout)
    assert payload["smoke_test"]["passed"] is True  # the identity sample, through the C backend
    assert ("identity", "PASS") in {(r["subject"], r["status"]) for r in payload["smoke_test"]["rows"]}
    out = sh(engine, test_tag, "ls /usr/bin/python3* /usr/lib/python3* 2>/dev/null; echo ---; "
                               "ls /usr/lib/x86_64-linux-gnu/libgomp.so.1; cat /opt/tritonserver/collected.json")
    no_python, rest = out.split("---", 1)
    assert no_python.strip() == ""
    gomp, report_text = rest.strip().split("\n", 1)
    assert gomp == "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
    report = json.loads(report_text)
    assert [(e["soname"], e["package"]) for e in report["system"]] == [("libgomp.so.1", "libgomp1:amd64")]
    assert report["bundled"] == {"backend identity": [f"{IDENTITY}/libidentity_config.so"]}
    assert report["plugins"] == {"backend identity": [f"{IDENTITY}/libidentity_copy.so"]}
    assert report["python"] is None and report["missing"] == []


def test_compose_ubuntu_24_04_identity_replaces_the_ubuntu_user(engine, standins, tmp_path, test_tag):
    """uid 1000 belongs to `ubuntu` in the 24.04 generation's min image: the composed image
    gives it to triton-server, and serves the identity sample through the C backend."""
    standins("25.01")
    run = composer("build", "--registry", REGISTRY, "--version", "25.01", "-b", "identity", "--tag", test_tag,
                   "--no-smoke-test")
    assert run.returncode == 0, run.stderr[-3000:]
    out = sh(engine, test_tag, "id -u triton-server; id -g triton-server; id -u ubuntu 2>/dev/null || echo no-ubuntu; "
                               "getent group 1000 | cut -d: -f1; command -v python3 || echo no-python")
    assert out.split() == ["1000", "1000", "no-ubuntu", "triton-server", "no-python"]
    container, client = serve(engine, test_tag, identity_repository(tmp_path / "models"), user="1000")
    try:
        sample = next(s for s in load_samples() if s.model == "identity_int32")
        assert sample.check(client.infer(sample.model, sample.inputs)) is None
    finally:
        container.remove()
