"""The user's own models, end to end on the 24.09 stand-ins: one image with a repository baked in
(a TorchScript model with cases in the project's convention, a BLS python model calling it with
cases from a file, an ONNX model with a configuration and one without, checked by
a default request), served with nothing mounted; the
same image then smoke-tests a model that answers wrong on purpose and one whose config.pbtxt is
broken. Sizes are read from the image and must add up."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pytest
from dataclasses import replace

from composer.catalog.catalog import Catalog
from composer.core.errors import SmokeTestFailed
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.verify.samples import models_dir
from composer.verify.smoke_plan import SmokePlan
from composer.config.cases import TensorData
from composer.verify.triton_client import TritonHTTP
from tests.conftest import TEST_LABEL
from tests.specs import spec

pytestmark = pytest.mark.integration

REGISTRY = "localhost/standin"
BACKENDS = ("onnxruntime", "python", "pytorch")
TS_CONFIG = """name: "scaled_ts"
platform: "pytorch_libtorch"
max_batch_size: 0
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
BLS_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
BLS_MODEL = '''"""BLS: OUTPUT0 = 2 * scaled_ts(INPUT0)."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            call = pb_utils.InferenceRequest(model_name="scaled_ts", requested_output_names=["output__0"],
                                             inputs=[pb_utils.Tensor("input__0", x)])
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            y = pb_utils.get_output_tensor_by_name(answer, "output__0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (y * 2).astype(np.float32))]))
        return responses
'''
WRONG_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):  # should add one; adds two, on purpose
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 2)]) for r in requests]
'''


def tensor(name, data, datatype="FP32"):
    return {"name": name, "datatype": datatype, "shape": [len(data)], "data": data}


def onnx_plus_one(path: Path) -> None:
    """Y = X + 1 for X of shape [n, 3] (a variable first dimension)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])], "plus_one",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 3])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def good_repository(root: Path) -> Path:
    repo = root / "models"
    ts = repo / "scaled_ts"
    (ts / "1").mkdir(parents=True)
    shutil.copyfile(models_dir() / "torchscript_affine" / "1" / "model.pt", ts / "1" / "model.pt")
    (ts / "config.pbtxt").write_text(TS_CONFIG)
    (ts / "smoke_cases.json").write_text(json.dumps({"cases": [
        {"name": "affine", "inputs": [tensor("input__0", [0.0, 1.0, -2.0, 0.5])],
         "expected": [{**tensor("output__0", [-0.5, 2.5, -6.5, 1.0]), "tolerance": 1e-5}]},
        {"name": "shape only", "inputs": [tensor("input__0", [9.0, 9.0, 9.0, 9.0])],
         "expected": [{"name": "output__0", "datatype": "FP32", "shape": [4]}]},
    ]}))
    bls = repo / "bls_ts"
    (bls / "1").mkdir(parents=True)
    (bls / "config.pbtxt").write_text(BLS_CONFIG)
    (bls / "1" / "model.py").write_text(BLS_MODEL)
    onnx_plus_one(repo / "onnx_plus_one" / "1" / "model.onnx")
    (repo / "onnx_plus_one" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n')
    onnx_plus_one(repo / "onnx_noconf" / "1" / "model.onnx")  # no config.pbtxt: the backend completes one
    return repo


def bad_repository(root: Path) -> Path:
    repo = root / "bad-models"
    wrong = repo / "wrong"
    (wrong / "1").mkdir(parents=True)
    (wrong / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]\n')
    (wrong / "1" / "model.py").write_text(WRONG_MODEL)
    (wrong / "smoke_cases.yaml").write_text(
        "cases:\n  - name: adds one\n    inputs: [{name: X, datatype: FP32, shape: [2], data: [1, 2]}]\n"
        "    expected: [{name: Y, datatype: FP32, shape: [2], data: [2, 3]}]\n")
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    # Protobuf text the composer's syntax check takes, with a field Triton's configuration lacks: the
    # server refuses it, and its reason is the row's.
    (broken / "config.pbtxt").write_text('backend: "python"\nnot_a_field: 1\n')
    (broken / "1" / "model.py").write_text(WRONG_MODEL)
    return repo


@pytest.fixture(scope="module")
def baked(engine, standin_images, tmp_path_factory):
    """One image with the good repository baked in, built and smoke-tested once for the module."""
    root = tmp_path_factory.mktemp("user-models")
    repo = good_repository(root)
    cases = root / "bls-cases.yaml"
    cases.write_text("cases:\n  - model: bls_ts\n    name: doubles the affine\n"
                     "    inputs: [{name: INPUT0, datatype: FP32, shape: [4], data: [1, 1, 1, 1]}]\n"
                     "    expected: [{name: OUTPUT0, datatype: FP32, shape: [4], data: [5, 5, 5, 5]}]\n")
    tag = f"triton-composer-test/tritonserver:models-{uuid.uuid4().hex[:10]}"
    plan = resolve(engine, spec(backends=BACKENDS, version="24.09", registry=REGISTRY, tag=tag,
                   bake_models=repo, smoke_cases=cases), Catalog.load()).plan
    try:
        result = build_image(engine, plan, labels=TEST_LABEL)
        yield {"result": result, "tag": tag, "repo": repo, "root": root, "cases": cases, "plan": plan}
    finally:
        engine.remove_image(tag, force=True)


def test_baked_models_answer_their_cases_with_nothing_mounted(baked):
    report = baked["result"].smoke
    rows = {r.model: r for r in report.rows if r.subject == "model"}
    assert report.passed, [(r.model, r.detail) for r in report.failures()]
    assert (rows["scaled_ts"].status, rows["scaled_ts"].cases, rows["scaled_ts"].request) == ("PASS", "2/2", "2 cases")
    assert (rows["bls_ts"].status, rows["bls_ts"].cases) == ("PASS", "1/1")
    assert rows["onnx_plus_one"].status == "PASS"
    assert rows["onnx_plus_one"].request == "default: X FP32 [1, 3]"
    # Configless: served from the configuration the backend completed (a variable first dimension
    # becomes the batch dimension), then answered in full.
    assert rows["onnx_noconf"].status == "PASS", rows["onnx_noconf"].detail
    assert rows["onnx_noconf"].request == "default: X FP32 [1, 3]"
    samples = {r.subject: r.status for r in report.rows if r.request == "sample"}
    assert samples == {"onnxruntime": "PASS", "python": "PASS", "pytorch": "PASS"}  # served alongside


def test_the_default_command_serves_the_baked_models(engine, baked):
    tag = baked["tag"]
    owners = engine.run_once(tag, ["stat", "-c", "%u:%g", "/models", "/models/scaled_ts/config.pbtxt"], entrypoint=[])
    assert owners.output.split() == ["1000:1000", "1000:1000"]  # owned as the Triton tree is
    container = engine.start(tag, ports=[8000], labels=TEST_LABEL, shm_size="512m")  # its own CMD, no files
    try:
        client = TritonHTTP(container.url(8000))
        assert client.wait_ready(180, container.running), container.logs(tail=30)
        out = client.infer("scaled_ts", [TensorData("input__0", "FP32", (4,), (1.0, 1.0, 1.0, 1.0))])
        assert out["output__0"].data == pytest.approx((2.5, 2.5, 2.5, 2.5))
    finally:
        container.remove()


def test_sizes_add_up_to_the_image(engine, baked):
    sizes = baked["result"].sizes
    image_size = engine.image(baked["tag"]).size
    assert sizes.total == image_size
    assert abs(sizes.total - sizes.lower_bound) <= 0.02 * sizes.total, sizes.to_dict()
    parts = {(p.kind, p.name): p.size for p in sizes.parts}
    assert sizes.min_image == engine.image(f"{REGISTRY}/tritonserver:24.09-py3-min").size
    for backend in BACKENDS:
        assert parts[("backend", backend)] > 0
    assert parts[("server", "server core")] > 0 and parts[("models", "baked models")] > 0
    payload = baked["result"].to_dict()["sizes"]
    assert payload["total"] == image_size and payload["overhead"] == sizes.overhead


def test_a_model_change_rebuilds_only_the_models_layer(engine, baked):
    repo = baked["root"] / "changed"
    shutil.copytree(baked["repo"], repo)
    (repo / "bls_ts" / "1" / "model.py").write_text(BLS_MODEL + "# changed\n")
    tag = f"triton-composer-test/tritonserver:models-{uuid.uuid4().hex[:10]}"
    plan = resolve(engine, spec(backends=BACKENDS, version="24.09", registry=REGISTRY, tag=tag,
                   bake_models=repo, smoke_test=False), Catalog.load()).plan
    try:
        changed = build_image(engine, plan, labels=TEST_LABEL)
        before = engine.image(baked["tag"]).layers
        after = engine.image(changed.image_id).layers
        # The models' layer is the last but the SBOM's.
        assert len(before) == len(after) and before[:-2] == after[:-2] and before[-2] != after[-2]
    finally:
        engine.remove_image(tag, force=True)


def test_wrong_answers_and_a_broken_config_fail_without_moving_the_tag(engine, baked):
    bad = bad_repository(baked["root"])
    before = engine.image(baked["tag"]).id
    smoke_started: list[float] = []  # the smoke test's own time, whatever the build took on a busy machine

    def on_smoke_line(line: str) -> None:
        if not smoke_started:
            smoke_started.append(time.monotonic())

    with pytest.raises(SmokeTestFailed) as failure:
        plan = baked["plan"]
        build_image(engine, replace(plan, smoke=replace(plan.smoke, model_repository=bad)), labels=TEST_LABEL,
                    on_smoke_line=on_smoke_line)
    waited = time.monotonic() - smoke_started[0]
    assert engine.image(baked["tag"]).id == before  # the tag did not move
    rows = {r.model: r for r in failure.value.report.rows if r.subject == "model"}
    assert rows["wrong"].status == "FAIL" and "case adds one: Y[0] is 3.0, expected 2" in rows["wrong"].detail
    assert rows["broken"].status == "FAIL"
    assert rows["broken"].detail == (
        "not loaded: failed to read text proto from /composer-smoke/models/broken/config.pbtxt")
    assert rows["scaled_ts"].status == "PASS"  # the baked models are still served and right
    assert "wrong" in failure.value.message and "broken" in failure.value.message
    assert waited < SmokePlan(backends=()).timeout / 2  # the server said so: no wait for the deadline
