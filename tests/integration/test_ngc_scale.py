"""The composer at NGC's scale: the four-backend selection (onnxruntime, python, tensorrt, pytorch)
composed once from the NGC-scale 24.09 stand-ins (real CUDA, cuDNN, NCCL, ONNX Runtime and libtorch
libraries; C/C++ backends), smoke-tested on the test models of models/ngc (answers computed on the
host by onnxruntime and torch), a python model and a BLS model; the tensorrt sample is a SKIP with
the backend's reason on a host without a GPU, a failure under --strict."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from composer.catalog.catalog import Catalog
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan
from triton_standins import ngc
from tests.conftest import TEST_LABEL
from tests.specs import spec

pytestmark = pytest.mark.integration

MODELS = Path(__file__).resolve().parent / "models" / "ngc"
BACKENDS = ("onnxruntime", "python", "tensorrt", "pytorch")
# The test models the composition serves (the tensorrt plan is the sample's business).
SERVED = ("ngc_onnx_types", "ngc_onnx_configless", "ngc_torchscript_types", "ngc_torch_embedding")
BLS_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT64 dims: [ 7 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 7 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
BLS_EMBEDDING = '''"""BLS: OUTPUT0 = sum over the last axis of ngc_torch_embedding(INPUT0)."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            call = pb_utils.InferenceRequest(model_name="ngc_torch_embedding", requested_output_names=["output__0"],
                                             inputs=[pb_utils.Tensor("input__0", ids.reshape(1, -1))])
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            y = pb_utils.get_output_tensor_by_name(answer, "output__0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y.sum(axis=-1).reshape(-1).astype(np.float32))]))
        return responses
'''


def _expected() -> dict:
    return json.loads((MODELS / "expected.json").read_text())


def _repository(root: Path) -> Path:
    """The test models, a BLS model over the embedding model, and their cases file."""
    repo = root / "models"
    for name in SERVED:
        shutil.copytree(MODELS / name, repo / name)
    bls = repo / "bls_embedding"
    (bls / "1").mkdir(parents=True)
    (bls / "1" / "model.py").write_text(BLS_EMBEDDING)
    (bls / "config.pbtxt").write_text(BLS_CONFIG)
    return repo


def _cases(root: Path) -> Path:
    """expected.json's cases in the composer's cases format, plus the BLS model's (from the same answers)."""
    cases = []
    for number, case in enumerate(_expected()["cases"]):
        if case["model"] not in SERVED:
            continue
        tolerance = case.get("tolerance", 0.0)
        cases.append({"model": case["model"], "name": f"case {number} as on the host",
                      "inputs": case["inputs"],
                      "expected": [{**out, "tolerance": tolerance} for out in case["outputs"]]})
    embedding = next(c for c in _expected()["cases"] if c["model"] == "ngc_torch_embedding" and c["inputs"][0]["shape"] == [1, 7])
    rows = embedding["outputs"][0]["data"]
    sums = [sum(rows[i * 3:(i + 1) * 3]) for i in range(7)]
    cases.append({"model": "bls_embedding", "name": "sums the embedding",
                  "inputs": [{**embedding["inputs"][0], "name": "INPUT0", "shape": [7]}],
                  "expected": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [7], "data": sums, "tolerance": 1e-4}]})
    path = root / "cases.json"
    path.write_text(json.dumps({"cases": cases}))
    return path


@pytest.fixture(scope="module")
def composed(engine, ngc_standins, tmp_path_factory):
    """The four-backend composition, built and smoke-tested once for the module, removed after."""
    root = tmp_path_factory.mktemp("ngc-scale")
    repo, cases = _repository(root), _cases(root)
    tag = f"triton-composer-test/tritonserver:ngc-{uuid.uuid4().hex[:10]}"
    plan = resolve(engine, spec(backends=BACKENDS, version="24.09", registry=ngc.REGISTRY, tag=tag,
                                model_repository=repo, smoke_cases=cases), Catalog.load()).plan
    try:
        result = build_image(engine, plan, labels=TEST_LABEL)
        yield {"result": result, "tag": tag, "repo": repo, "cases": cases}
    finally:
        engine.remove_image(tag, force=True)


def test_every_model_answers_as_on_the_host(composed):
    report = composed["result"].smoke
    assert report.passed, [(r.subject, r.model, r.detail) for r in report.failures()]
    rows = {r.model: r for r in report.rows if r.subject == "model"}
    for name in SERVED + ("bls_embedding",):
        assert rows[name].status == "PASS", (name, rows[name].detail)
    assert rows["ngc_torch_embedding"].cases == "2/2"  # both shapes, numbers as torch 2.5.1 gives them
    samples = {r.subject: r.status for r in report.rows if r.request == "sample" or r.model == "tensorrt_plan"}
    assert samples["python"] == "PASS" and samples["onnxruntime"] == "PASS" and samples["pytorch"] == "PASS"


def test_the_configless_onnx_model_got_its_configuration_completed(composed):
    report = composed["result"].smoke
    row = next(r for r in report.rows if r.model == "ngc_onnx_configless")
    assert row.status == "PASS" and row.cases == "1/1", row.detail


def test_the_tensorrt_sample_is_a_skip_with_the_backends_reason(composed):
    row = next(r for r in composed["result"].smoke.rows if r.model == "tensorrt_plan")
    assert row.status == "SKIP"
    assert "needs a GPU" in row.detail and "cudaGetDeviceCount" in row.detail, row.detail


def test_under_strict_the_tensorrt_skip_is_a_failure(engine, composed):
    report = smoke_test(engine, composed["tag"], SmokePlan(backends=BACKENDS, strict=True), labels=TEST_LABEL)
    failed = {r.model: r.detail for r in report.failures()}
    assert set(failed) == {"tensorrt_plan"} and failed["tensorrt_plan"].startswith("strict: needs a GPU"), failed


def test_no_cuda_driver_library_in_the_image(engine, composed):
    found = engine.run_once(composed["tag"], ["sh", "-c",
                            "find / -xdev \\( -name 'libcuda.so*' -o -name 'libnvidia-*' \\) "
                            "-not -path '/usr/local/cuda-12.6/compat/*' -print"], entrypoint=[])
    assert found.exit_code == 0 and found.output.strip() == "", found.output


def test_the_collector_names_the_nvidia_libraries_per_backend(engine, composed):
    out = engine.run_once(composed["tag"], ["cat", "/opt/tritonserver/collected.json"], entrypoint=[])
    assert out.exit_code == 0, out.output
    reach = json.loads(out.output)["nvidia"]
    by = {label: {item["library"]: item for item in items} for label, items in reach.items()}
    assert by["backend tensorrt"]["libnvinfer.so.10"]["from"] == "min image"
    assert by["backend tensorrt"]["libnvinfer.so.10"]["package"] == "libnvinfer10"
    torch = by["backend pytorch"]
    assert torch["libcudnn.so.9"]["package"] == "libcudnn9-cuda-12" and torch["libcudnn.so.9"]["from"] == "min image"
    # cuDNN's sub-libraries, loaded by name at run time, come with it from the min image.
    assert torch["libcudnn_ops.so.9"]["loaded_by_name_with"] == "libcudnn.so.9"
    ort = by["backend onnxruntime"]
    assert ort["libcublasLt.so.12"]["from"] == "min image"  # through the CUDA provider, in its folder
    assert all(item["from"] != "full image" for items in by.values() for item in items.values())


def test_inspect_shows_ngcs_versions_and_the_sbom_its_cuda_packages(engine, ngc_standins, composed):
    from tests.cli import composer

    run = composer("inspect", composed["tag"], "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    facts = json.loads(run.stdout)
    min_env = engine.image(ngc_standins.min_ref).env
    assert {k: facts["versions"][k] for k in ("cuda", "cudnn", "tensorrt", "nccl")} == {
        "cuda": min_env["CUDA_VERSION"], "cudnn": min_env["CUDNN_VERSION"], "tensorrt": min_env["TRT_VERSION"],
        "nccl": min_env["NCCL_VERSION"]}  # the composed image states them, inherited from the min image
    assert facts["backends"] == sorted(BACKENDS) and facts["source"] == "engine"
    debs = {c["name"] for c in facts["sbom"]["components"] if c.get("purl", "").startswith("pkg:deb/")}
    assert {"libcudnn9-cuda-12", "libnccl2", "libnvinfer10"} <= debs
