"""The CUDA 13 generation at NGC's scale: the four-backend selection composed on a pruned base of
the NGC-scale 26.07 stand-ins (CUDA 13 libraries, cuDNN and NCCL for CUDA 13, ONNX Runtime and
libtorch built for CUDA 13, the Ubuntu 24.04 generation's layout with a root-owned tree), serving
every NGC-scale test model with the host's answers, nothing the release's libraries name by
string left behind, and the tensorrt sample a SKIP without a GPU."""

from __future__ import annotations

import json
import uuid

import pytest

from composer.assembly.pruning import sweep_stages
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.catalog.catalog import Catalog
from triton_standins import ngc
from tests.conftest import CUDA13_RELEASE, TEST_LABEL
from tests.integration.conftest import remove_made_base
from tests.integration.test_ngc_scale import BACKENDS, SERVED, _cases, _repository
from tests.specs import spec

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pruned13(engine, ngc_standins_cuda13, tmp_path_factory):
    """The four-backend 26.07 composition on a pruned base, built and smoke-tested once, removed after."""
    root = tmp_path_factory.mktemp("cuda13")
    tag = f"triton-composer-test/tritonserver:cuda13-{uuid.uuid4().hex[:10]}"
    plan = resolve(engine, spec(backends=BACKENDS, version=CUDA13_RELEASE, registry=ngc.REGISTRY, tag=tag,
                                base="pruned", model_repository=_repository(root), smoke_cases=_cases(root)),
                   Catalog.load()).plan
    built = None
    try:
        built = build_image(engine, plan, labels=TEST_LABEL)
        yield {"result": built, "tag": tag}
    finally:
        engine.remove_image(tag, force=True)
        remove_made_base(engine, built)
        sweep_stages(engine)


def run(engine, image: str, script: str) -> str:
    out = engine.run_once(image, ["sh", "-c", script], entrypoint=[], timeout=600)
    assert out.exit_code == 0, out.output
    return out.output


def test_every_model_answers_as_on_the_host(pruned13):
    report = pruned13["result"].smoke
    assert report.passed, [(r.subject, r.model, r.detail) for r in report.failures()]
    rows = {r.model: r for r in report.rows if r.subject == "model"}
    for name in SERVED + ("bls_embedding",):
        assert rows[name].status == "PASS", (name, rows[name].detail)
    assert rows["ngc_onnx_configless"].cases == "1/1"
    samples = {r.subject: r.status for r in report.rows if r.request == "sample"}
    assert samples["python"] == samples["onnxruntime"] == samples["pytorch"] == "PASS"


def test_the_tensorrt_sample_is_a_skip_with_the_backends_reason(pruned13):
    row = next(r for r in pruned13["result"].smoke.rows if r.model == "tensorrt_plan")
    assert row.status == "SKIP" and "needs a GPU" in row.detail, row.detail


def test_the_base_keeps_cuda_13_and_what_its_libraries_name(engine, pruned13):
    """CUDA 13's sonames reached by NEEDED, and the libraries only named in data (cuDNN's
    sub-libraries, NVRTC's builtins) found by the strings reader and kept, every one proven."""
    lib = "/usr/local/cuda-13.0/targets/x86_64-linux/lib"
    present = run(engine, pruned13["tag"], f"ls {lib} /usr/lib/x86_64-linux-gnu").split()
    for name in ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libnvrtc.so.13",
                 "libnvrtc-builtins.so.13.0", "libcudnn.so.9", "libcudnn_engines_precompiled.so.9",
                 "libcudnn_ext.so.9", "libnccl.so.2", "libcusparseLt.so.0", "libnvshmem_host.so.3"):
        assert name in present, name
    assert not any(name.startswith("libcudart.so.12") or name.startswith("libcublas.so.12") for name in present)
    required = " ".join(item["library"] for item in pruned13["result"].pruning.loaded_at_run_time)
    for name in ("libcudnn_engines_precompiled.so.9", "libcudnn_ext.so.9", "libnvrtc-builtins.so.13.0"):
        assert name in required, required  # the proof in the image required each


def test_the_tree_is_root_owned_as_from_26_06(engine, pruned13):
    owners = run(engine, pruned13["tag"], "stat -c '%U %a' /opt/tritonserver/backends/onnxruntime "
                                          "/opt/tritonserver/backends/pytorch/libtriton_pytorch.so").split("\n")
    assert all(line.startswith("root ") for line in owners if line), owners


def test_the_collector_names_cuda_13_libraries_per_backend(engine, pruned13):
    out = run(engine, pruned13["tag"], "cat /opt/tritonserver/collected.json")
    by = {label: {item["library"]: item for item in items} for label, items in json.loads(out)["nvidia"].items()}
    assert by["backend onnxruntime"]["libcublasLt.so.13"]["from"] == "min image"
    assert by["backend pytorch"]["libcudnn.so.9"]["package"] == "libcudnn9-cuda-13"
    assert by["backend tensorrt"]["libnvinfer.so.10"]["package"] == "libnvinfer10"
