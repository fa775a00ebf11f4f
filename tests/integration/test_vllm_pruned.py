"""The vLLM flavour on a pruned base: vllm + onnxruntime on a base pruned from the NGC-scale 24.09
vLLM stand-in, ONNX Runtime on the CPU. The ONNX models and the python sample answer and the vLLM
sample is a SKIP; vllm imports and the report says why each python distribution stays; pip's
distributions are family layers of their own, none over 2 GB. A module of its own: the composition
on the whole vLLM image (test_vllm.py) is removed before this one is built."""

from __future__ import annotations

import uuid

import pytest

from composer.assembly.pruning import sweep_stages
from composer.catalog.catalog import Catalog
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from tests.conftest import TEST_LABEL
from tests.integration.test_vllm import BACKENDS, _repository, _serves
from tests.specs import spec
from triton_standins import ngc

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pruned(engine, vllm_standin, tmp_path_factory):
    """vllm + onnxruntime on a pruned vLLM base, ONNX Runtime on the CPU (--ort-provider cpu: the
    configuration within the 0.5x goal), built and smoke-tested once for the module; the composed
    image, the base's tag this build made and the stage images are removed after."""
    repo, cases = _repository(tmp_path_factory.mktemp("vllm-pruned"))
    tag = f"triton-composer-test/tritonserver:vllm-pruned-{uuid.uuid4().hex[:10]}"
    plan = resolve(engine, spec(backends=BACKENDS, version="24.09", registry=ngc.REGISTRY, flavour="vllm",
                                base="pruned", ort_providers=("cpu",), tag=tag, model_repository=repo,
                                smoke_cases=cases), Catalog.load()).plan
    result = None
    try:
        result = build_image(engine, plan, labels=TEST_LABEL)
        yield {"result": result, "tag": tag, "plan": plan}
    finally:
        engine.remove_image(tag, force=True)
        if result is not None and result.pruned_base is not None and result.pruned_base.made:
            engine.remove_image(result.pruned_base.tag, force=True)
        sweep_stages(engine)


def test_pruned_the_onnx_models_and_the_python_sample_answer_and_vllm_is_a_skip(pruned):
    rows = _serves(pruned["result"].smoke)
    assert rows["vllm_tiny"].status == "SKIP" and "needs a GPU" in rows["vllm_tiny"].detail


def test_pruned_vllm_imports_and_the_report_says_why(engine, pruned):
    out = engine.run_once(pruned["tag"], ["python3", "-c", "import torch, vllm; print(vllm.__version__)"], entrypoint=[])
    assert out.exit_code == 0 and out.output.strip().splitlines()[-1] == "0.5.3.post1", out.output
    python = pruned["result"].pruning.python
    kept = {d["distribution"]: d["why"] for d in python["kept"]}
    assert kept["vllm"].startswith("vllm (imported by backends/vllm/model.py)")
    assert kept["torch"] == "vllm (imported by backends/vllm/model.py) -> torch"
    proved = engine.run_once(pruned["tag"], ["cat", "/opt/tritonserver/proved.txt"], entrypoint=[]).output
    assert "ELF files of kept python distributions resolve; python3 imports numpy,vllm" in proved


def test_pruned_the_distributions_have_layers_of_their_own_none_over_2_gb(engine, pruned, vllm_standin):
    """pip's distributions are written as their own family layers (NVIDIA's CUDA wheels, torch, the
    rest), each under 2 GB; the image is smaller than the vLLM image it was pruned from (the goal
    figure, 0.5x, is the benchmark's: benchmarks/ngc_scale.py --only vllm)."""
    layers = {item["layer"]: item for item in pruned["result"].pruning.layers}
    for family in ("py-nvidia", "py-torch", "py-dists"):
        held = [item for name, item in layers.items() if item["family"] == family]
        assert held and sum(item["bytes"] for item in held) > 100_000_000, (family, held)
    assert all(item["bytes"] < 2_000_000_000 for item in layers.values()), layers
    sizes = [layer.size for layer in engine.layers(pruned["tag"])]
    assert len(sizes) > len(layers) and all(size < 2_000_000_000 for size in sizes), sizes
    assert pruned["result"].size < vllm_standin.size
    folder = engine.run_once(pruned["tag"], ["ls", "/opt/tritonserver/backends/onnxruntime"], entrypoint=[]).output
    assert "libonnxruntime.so" in folder and "providers_cuda" not in folder and "providers_tensorrt" not in folder
    kept = {p["package"] for p in pruned["result"].pruning.kept}
    assert not [p for p in kept if p.startswith(("libcudnn", "libnvinfer", "libcublas"))], sorted(kept)
