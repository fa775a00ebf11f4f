"""CPU-only images and ONNX Runtime's providers (issue 27) on the NGC-scale 24.09 stand-ins: the
onnxruntime+python CPU-only image (--device cpu) serves the ONNX models (with and without a
configuration), a python model and a BLS model with no GPU, and holds no cuBLAS, cuDNN, cuFFT,
NCCL or TensorRT file; the --ort-provider cuda image on a pruned base holds no TensorRT library and
its ONNX models still answer on the CPU; models needing what was left out are refused, naming the
model, before any build (so before any tag could move)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.catalog.catalog import Catalog
from composer.config.rules import validate as check
from tests.conftest import TEST_LABEL
from tests.integration.conftest import remove_made_base
from tests.integration.test_ngc_scale import MODELS, _expected
from tests.specs import spec
from triton_standins import ngc

pytestmark = [pytest.mark.integration, pytest.mark.ngc]  # every test here builds from the NGC-scale stand-ins

BACKENDS = ("onnxruntime", "python")
ONNX = ("ngc_onnx_types", "ngc_onnx_configless")
GPU_LIBRARIES = ("libcublas*", "libcudnn*", "libcufft*", "libnccl*", "libnvinfer*", "libnvonnxparser*")
PY_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
PY_DOUBLE = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)]) for r in requests]
'''
BLS_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "features" data_type: TYPE_FP32 dims: [ 3, 3 ] } ]
output [ { name: "total" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
BLS_SCORES = '''"""BLS: total = the sum of ngc_onnx_configless's two scores per row."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "features").as_numpy()
            answer = pb_utils.InferenceRequest(model_name="ngc_onnx_configless", requested_output_names=["scores"],
                                               inputs=[pb_utils.Tensor("features", x)]).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            scores = pb_utils.get_output_tensor_by_name(answer, "scores").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("total", scores.sum(axis=-1).astype(np.float32))]))
        return responses
'''
TRT_ACCELERATED = """backend: "onnxruntime"
max_batch_size: 0
input [ { name: "features" data_type: TYPE_FP32 dims: [ 3, 3 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 3, 2 ] } ]
optimization { execution_accelerators { gpu_execution_accelerator : [ { name : "tensorrt" } ] } }
"""


def _repository(root: Path) -> tuple[Path, Path]:
    """The ONNX test models, a python model and a BLS model over the configless ONNX model; their cases."""
    repo = root / "models"
    for name in ONNX:
        shutil.copytree(MODELS / name, repo / name)
    for name, config, code in (("py_double", PY_CONFIG, PY_DOUBLE), ("bls_scores", BLS_CONFIG, BLS_SCORES)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(config)
    cases = []
    for number, case in enumerate(_expected()["cases"]):
        if case["model"] in ONNX:
            cases.append({"model": case["model"], "name": f"case {number} as on the host", "inputs": case["inputs"],
                          "expected": [{**o, "tolerance": case.get("tolerance", 0.0)} for o in case["outputs"]]})
    scores = next(c for c in _expected()["cases"] if c["model"] == "ngc_onnx_configless")
    rows = scores["outputs"][0]["data"]
    cases.append({"model": "bls_scores", "name": "sums the scores", "inputs": scores["inputs"],
                  "expected": [{"name": "total", "datatype": "FP32", "shape": [3],
                                "data": [rows[2 * i] + rows[2 * i + 1] for i in range(3)], "tolerance": 1e-4}]})
    cases.append({"model": "py_double", "name": "doubles", "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1.0, -2.0, 0.5, 3.0]}],
        "expected": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [4], "data": [2.0, -4.0, 1.0, 6.0]}]})
    path = root / "cases.json"
    path.write_text(json.dumps({"cases": cases}))
    return repo, path


def _build(engine, root: Path, tag: str, **fields):
    repo, cases = _repository(root)
    plan = resolve(engine, check(spec(backends=BACKENDS, version="24.09", registry=ngc.REGISTRY, tag=tag,
                                      model_repository=repo, smoke_cases=cases, **fields)), Catalog.load()).plan
    return build_image(engine, plan, labels=TEST_LABEL)


def _gpu_files(engine, tag: str) -> list[str]:
    names = " -o ".join(f"-name '{n}'" for n in GPU_LIBRARIES)
    found = engine.run_once(tag, ["sh", "-c", f"find / -xdev \\( {names} \\) -print"], entrypoint=[])
    assert found.exit_code == 0, found.output
    return found.output.split()


@pytest.fixture(scope="module")
def cpu_image(engine, ngc_standins, tmp_path_factory):
    tag = f"triton-composer-test/tritonserver:cpu-{uuid.uuid4().hex[:10]}"
    built = None
    try:
        built = _build(engine, tmp_path_factory.mktemp("cpu"), tag, device="cpu")
        yield {"result": built, "tag": tag}
    finally:
        engine.remove_image(tag, force=True)
        remove_made_base(engine, built)


@pytest.fixture(scope="module")
def cuda_image(engine, ngc_standins, tmp_path_factory):
    tag = f"triton-composer-test/tritonserver:ort-cuda-{uuid.uuid4().hex[:10]}"
    built = None
    try:
        built = _build(engine, tmp_path_factory.mktemp("cuda"), tag, base="pruned", ort_providers=("cuda",))
        yield {"result": built, "tag": tag}
    finally:
        engine.remove_image(tag, force=True)
        remove_made_base(engine, built)


def test_the_cpu_only_image_serves_onnx_python_and_bls_with_no_gpu(cpu_image):
    report = cpu_image["result"].smoke
    assert report.passed, [(r.subject, r.model, r.detail) for r in report.failures()]
    assert report.gpus == "none" and report.device == "cpu"
    rows = {r.model: r for r in report.rows if r.subject == "model"}
    for name in ONNX + ("py_double", "bls_scores"):
        assert rows[name].status == "PASS" and rows[name].cases and rows[name].cases.startswith("1/"), rows[name]
    server = next(r for r in report.rows if r.subject == "server")
    assert "CPU-only image: no GPU, --pinned-memory-pool-byte-size=0" in server.detail


def test_the_cpu_only_image_holds_no_gpu_math_library(engine, cpu_image):
    assert _gpu_files(engine, cpu_image["tag"]) == []
    listing = engine.run_once(cpu_image["tag"], ["ls", "/opt/tritonserver/backends/onnxruntime"], entrypoint=[])
    assert "libonnxruntime_providers" not in listing.output, listing.output


def test_the_cpu_only_image_says_so_and_starts_with_the_pool_off(engine, cpu_image):
    info = engine.image(cpu_image["tag"])
    assert info.labels["org.triton-composer.device"] == "cpu"
    assert list(info.cmd) == ["tritonserver", "--pinned-memory-pool-byte-size=0"]
    assert cpu_image["result"].sizes.device == "cpu"
    assert cpu_image["result"].sizes.table().startswith("CPU-only image")


def test_the_cuda_only_image_holds_no_tensorrt_and_answers_on_the_cpu(engine, cuda_image):
    report = cuda_image["result"].smoke
    assert report.passed, [(r.subject, r.model, r.detail) for r in report.failures()]
    rows = {r.model: r for r in report.rows if r.subject == "model"}
    assert all(rows[name].status == "PASS" for name in ONNX), rows
    found = _gpu_files(engine, cuda_image["tag"])
    assert not [f for f in found if "libnvinfer" in f or "libnvonnxparser" in f], found
    listing = engine.run_once(cuda_image["tag"], ["ls", "/opt/tritonserver/backends/onnxruntime"], entrypoint=[])
    assert "libonnxruntime_providers_cuda.so" in listing.output and "providers_tensorrt" not in listing.output
    assert "libonnxruntime_providers_shared.so" in listing.output


def _user_model(root: Path, name: str, config: str) -> Path:
    repo = root / "mine"
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(MODELS / "ngc_onnx_configless" / "1" / "model.onnx", repo / name / "1" / "model.onnx")
    (repo / name / "config.pbtxt").write_text(config)
    return repo


@pytest.mark.parametrize("image, name, config, flags, says", [
    ("cuda_image", "wants_trt", TRT_ACCELERATED, ("--base", "pruned", "--ort-provider", "cuda"),
     "model wants_trt asks for the tensorrt execution accelerator, whose ONNX Runtime provider this image leaves "
     "out (kept: CPU, cuda): add --ort-provider tensorrt"),
    ("cpu_image", "on_gpu", TRT_ACCELERATED.replace(
        'optimization { execution_accelerators { gpu_execution_accelerator : [ { name : "tensorrt" } ] } }',
        "instance_group [ { kind: KIND_GPU count: 1 } ]"), ("--device", "cpu"),
     "model on_gpu asks for a KIND_GPU instance group: a CPU-only image has no GPU"),
])
def test_models_needing_what_was_left_out_are_refused_before_the_tag_moves(engine, request, tmp_path, image, name,
                                                                          config, flags, says):
    from tests.cli import composer

    built = request.getfixturevalue(image)
    before = engine.image(built["tag"]).id
    repo = _user_model(tmp_path, name, config)
    run = composer("build", "--registry", ngc.REGISTRY, "--version", "24.09", "-b", "onnxruntime", "-b", "python",
                   *flags, "--model-repository", str(repo), "--tag", built["tag"])
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and f"--model-repository {repo}" in lines[0], run.stderr
    assert engine.image(built["tag"]).id == before  # the tag did not move
