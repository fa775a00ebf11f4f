"""The vLLM flavour: vllm + onnxruntime composed on the NGC-scale 24.09 vLLM stand-in (real vLLM
0.5.3.post1 and torch 2.3.1 in the system python, a real Triton 2.50.0), onnxruntime taken from the
NGC-scale py3 full stand-in. The ONNX models (with and without a configuration) and the python
sample answer; the vLLM sample is a SKIP with vLLM's reason on a host without a GPU; `import
vllm` works in the stub's python. Images that disagree (server version, CUDA major) are refused
before any work, naming both. The same selection on a pruned base is test_vllm_pruned.py's (a
module of its own, so this module's image is gone before that one is built: the NGC tier runs on
about 30 GB besides its stand-ins)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.catalog.catalog import Catalog
from composer.verify.smoke import smoke_test
from composer.verify.smoke_plan import SmokePlan
from tests.cli import composer
from tests.conftest import TEST_LABEL
from tests.integration.test_ngc_scale import MODELS, _expected
from tests.specs import spec
from triton_standins import ngc, ngc_vllm

pytestmark = pytest.mark.integration

SERVED = ("ngc_onnx_types", "ngc_onnx_configless")
BACKENDS = ("vllm", "onnxruntime")


def _repository(root: Path) -> tuple[Path, Path]:
    repo = root / "models"
    for name in SERVED:
        shutil.copytree(MODELS / name, repo / name)
    cases = [{"model": c["model"], "name": f"case {n} as on the host", "inputs": c["inputs"],
              "expected": [{**out, "tolerance": c.get("tolerance", 0.0)} for out in c["outputs"]]}
             for n, c in enumerate(_expected()["cases"]) if c["model"] in SERVED]
    path = root / "cases.json"
    path.write_text(json.dumps({"cases": cases}))
    return repo, path


@pytest.fixture(scope="module")
def composed(engine, vllm_standin, tmp_path_factory):
    """vllm + onnxruntime on the vLLM image, built and smoke-tested once for the module, removed after."""
    repo, cases = _repository(tmp_path_factory.mktemp("vllm"))
    tag = f"triton-composer-test/tritonserver:vllm-{uuid.uuid4().hex[:10]}"
    plan = resolve(engine, spec(backends=BACKENDS, version="24.09", registry=ngc.REGISTRY, flavour="vllm", tag=tag,
                                model_repository=repo, smoke_cases=cases), Catalog.load()).plan
    try:
        result = build_image(engine, plan, labels=TEST_LABEL)
        yield {"result": result, "tag": tag, "plan": plan}
    finally:
        engine.remove_image(tag, force=True)


def _serves(report):
    """The smoke report passed, with every ONNX model and the python sample answering; its rows."""
    assert report.passed, [(r.subject, r.model, r.detail) for r in report.failures()]
    rows = {r.model: r for r in report.rows}
    for name in SERVED:
        assert rows[name].status == "PASS" and rows[name].cases == "1/1", (name, rows[name].detail)
    assert rows["add_sub"].status == "PASS" and rows["onnx_affine"].status == "PASS"
    return rows


def test_the_onnx_models_and_the_python_sample_answer(composed):
    _serves(composed["result"].smoke)


def test_the_vllm_sample_is_a_skip_with_vllms_reason(composed):
    row = next(r for r in composed["result"].smoke.rows if r.model == "vllm_tiny")
    assert row.status == "SKIP" and "needs a GPU" in row.detail, row.detail
    assert "NVML" in row.detail or "CUDA" in row.detail or "NVIDIA" in row.detail, row.detail


def test_under_strict_the_vllm_skip_is_a_failure(engine, composed):
    report = smoke_test(engine, composed["tag"], SmokePlan(backends=("onnxruntime", "python", "vllm"), strict=True),
                        labels=TEST_LABEL)
    failed = {r.model: r.detail for r in report.failures()}
    assert set(failed) == {"vllm_tiny"} and failed["vllm_tiny"].startswith("strict: needs a GPU"), failed


def test_vllm_imports_in_the_stubs_python(engine, composed):
    out = engine.run_once(composed["tag"], ["python3", "-c", "import sys, torch, vllm; print(vllm.__version__, "
                                            "torch.__version__, sys.version_info[:2])"], entrypoint=[])
    assert out.exit_code == 0 and out.output.strip().splitlines()[-1].startswith("0.5.3.post1 2.3.1"), out.output
    env = engine.image(composed["tag"]).env
    assert env["LD_LIBRARY_PATH"].startswith("/usr/local/lib/python3.11/dist-packages/torch/lib")
    assert env["TRITON_PTXAS_PATH"] and env["TRITON_CUDART_PATH"]


def test_the_image_is_the_vllm_image_plus_the_onnxruntime_folder(engine, composed, vllm_standin):
    sizes = composed["result"].sizes
    assert sizes.base.startswith("vllm image") and sizes.min_image == vllm_standin.size
    ort = next(p.size for p in sizes.parts if p.name == "onnxruntime")
    assert sizes.total <= vllm_standin.size + 1.05 * ort, (sizes.total, vllm_standin.size, ort)
    assert composed["plan"].base_backends == ("python", "vllm")  # served from the vLLM image's own folders


def _derived(engine, tmp_path: Path, base: str, step: str) -> str:
    """An image FROM `base` with one step, labelled as the tests' (removed by the caller)."""
    context = tmp_path / uuid.uuid4().hex[:8]
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base}\n{step}\n")
    tag = f"triton-composer-test/vllm-derived:{uuid.uuid4().hex[:10]}"
    engine.build(context, tag=tag, labels=TEST_LABEL, on_line=lambda _line: None)
    return tag


@pytest.mark.parametrize("step, says", [
    ("ENV TRITON_SERVER_VERSION=2.49.0", "server versions differ"),
    ("RUN cd /usr/local/cuda-12.6/targets/x86_64-linux/lib && ln -s libcudart.so.12.6.68 libcudart.so.13 "
     "&& rm libcudart.so.12", "CUDA majors differ"),
])
def test_images_that_disagree_are_refused_up_front_naming_both(engine, vllm_standin, tmp_path, step, says):
    derived = _derived(engine, tmp_path, ngc_vllm.flavour_ref(Catalog.load().release("24.09")), step)
    tag = f"triton-composer-test/tritonserver:vllm-refused-{uuid.uuid4().hex[:8]}"
    try:
        run = composer("build", "--registry", ngc.REGISTRY, "--version", "24.09", "--flavour", "vllm",
                       "-b", "vllm", "-b", "onnxruntime", "--image", f"min={derived}", "--tag", tag)
        lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
        assert run.returncode == 2 and len(lines) == 1 and says in lines[0], run.stderr[-2000:]
        assert derived in lines[0] and f"{ngc.REGISTRY}/tritonserver:24.09-py3" in lines[0]
        assert "Traceback" not in run.stderr and engine.image(tag) is None
    finally:
        engine.remove_image(derived, force=True)
