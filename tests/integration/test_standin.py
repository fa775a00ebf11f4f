"""The stand-in images: the full one really serves every sample, the min one holds no Triton."""

from __future__ import annotations

import time

import pytest

from composer.catalog.catalog import Catalog
from composer.verify.samples import load_samples
from triton_standins import build_standins
from composer.verify.triton_client import TritonHTTP
pytestmark = pytest.mark.integration

STANDIN_RELEASE = "24.09"  # the release the standin_images fixture builds
from tests.conftest import TEST_LABEL  # swept by the engine fixture at session end


def test_full_standin_serves_every_sample(engine, standin_images):
    # The small stand-in has every backend of the samples that run without a GPU (the tensorrt
    # sample is the NGC-scale stand-in's business: tests/integration/test_ngc_scale.py).
    samples = [s for s in load_samples() if not s.gpu]
    assert {s.backend for s in samples} == {"python", "onnxruntime", "pytorch", "identity"}
    container = engine.start(
        standin_images.full_ref,
        ["tritonserver", "--model-repository=/models"],
        ports=[8000],
        files={f"/models/{s.model}": s.path for s in samples},
        labels=TEST_LABEL,
        shm_size="256m",
    )
    try:
        client = TritonHTTP(f"http://127.0.0.1:{container.host_port(8000)}")
        ready = client.wait_ready(120, is_alive=container.running)
        assert ready, "server not ready:\n" + container.logs(tail=60)
        assert client.server_metadata()["version"] == "2.50.0"
        index = {m["name"]: m.get("state") for m in client.model_index()}
        for sample in samples:
            assert index.get(sample.model) == "READY", (sample.model, index, container.logs(tail=60))
            assert client.model_ready(sample.model)
            problem = sample.check(client.infer(sample.model, sample.inputs))
            assert problem is None, problem
    finally:
        container.remove()


def test_full_standin_layout_and_env(engine, standin_images):
    info = engine.image(standin_images.full_ref)
    assert info.env["TRITON_SERVER_VERSION"] == "2.50.0"
    assert info.env["NVIDIA_TRITON_SERVER_VERSION"] == STANDIN_RELEASE
    assert "/opt/tritonserver/bin" in info.env["PATH"]
    assert info.labels["com.nvidia.tritonserver.version"] == "2.50.0"
    assert info.labels["org.triton-composer.standin.wheel"] == "nvidia-pytriton==0.5.12"
    probe = engine.run_once(
        standin_images.full_ref,
        ["sh", "-c", "cat /opt/tritonserver/TRITON_VERSION; ls /opt/tritonserver/backends; "
                     "stat -c %u:%g /opt/tritonserver/bin/tritonserver; id -u triton-server"],
        entrypoint=[],
        labels=TEST_LABEL,
    )
    assert probe.exit_code == 0, probe.output
    lines = probe.output.split()
    assert lines[0] == "2.50.0"
    assert {"identity", "onnxruntime", "python", "pytorch"} <= set(lines)
    assert lines[-2:] == ["1000:1000", "1000"]


def test_min_standin_has_no_triton_and_no_python(engine, standin_images):
    probe = engine.run_once(
        standin_images.min_ref,
        ["sh", "-c", "test -e /opt/tritonserver/bin/tritonserver && echo has-tritonserver; "
                     "command -v python3 >/dev/null && echo has-python; echo checked"],
        entrypoint=[],
        labels=TEST_LABEL,
    )
    assert probe.exit_code == 0, probe.output
    assert probe.output.split() == ["checked"]
    info = engine.image(standin_images.min_ref)
    assert info.env["TRITON_SERVER_VERSION"] == "2.50.0"
    assert info.labels["org.triton-composer.standin"] == "true"


def test_min_standin_entrypoint_prints_banner_and_execs(engine, standin_images):
    result = engine.run_once(standin_images.min_ref, ["echo", "hello"], labels=TEST_LABEL)
    assert result.exit_code == 0
    assert result.output.strip() == "hello"  # the banner goes to stderr


def test_second_build_reuses_the_images(engine, standin_images):
    """Nothing is built again (the figure of a no-op rebuild is a benchmark's, not this test's)."""
    again = build_standins(engine, Catalog.load().release(STANDIN_RELEASE), on_line=lambda _line: None)
    assert not again.full_built and not again.min_built
    assert (again.full_id, again.min_id) == (standin_images.full_id, standin_images.min_id)


def test_backend_folders_are_self_contained_and_bundle_no_numpy(engine, standin_images):
    """Each Python-based backend runs from its own folder plus the image's numpy<2."""
    script = (
        "import sys, glob; "
        "assert not glob.glob('/opt/tritonserver/backends/*/site-packages/numpy*'), 'numpy bundled'; "
        "sys.path.insert(0, '/opt/tritonserver/backends/onnxruntime/site-packages'); "
        "import numpy, onnxruntime; "
        "s = onnxruntime.InferenceSession('/s/model.onnx', providers=['CPUExecutionProvider']); "
        "print(numpy.__version__, s.run(None, {'INPUT0': numpy.arange(4, dtype=numpy.float32)})[0].tolist())"
    )
    from composer.verify.samples import models_dir

    result = engine.run_once(
        standin_images.full_ref,
        ["python3", "-I", "-c", script],
        entrypoint=[],
        files={"/s/model.onnx": (models_dir() / "onnx_affine" / "1" / "model.onnx").read_bytes()},
        labels=TEST_LABEL,
    )
    assert result.exit_code == 0, result.output
    numpy_version, values = result.output.strip().split(" ", 1)
    assert numpy_version.startswith("1.")
    assert values == "[1.0, 3.0, 5.0, 7.0]"


def test_release_without_recipe_is_a_usage_error(engine):
    from composer.core.errors import UsageError

    with pytest.raises(UsageError) as caught:
        build_standins(engine, Catalog.load().release("23.07"), on_line=lambda _line: None)
    assert "24.09" in caught.value.message and "\n" not in caught.value.message
