from pathlib import Path

import pytest

from composer.core.errors import UsageError
from composer.core.words import suggest
from composer.resolve.offer import Offer
from composer.resolve.plan_types import BaseImage
from composer.resolve.plan import default_tag, make_plan, resolve_release
from tests.specs import spec


def offer(backends, python_based=(), core=("bin", "lib", "LICENSE", "TRITON_VERSION")):
    return Offer(
        source="image localhost/standin/tritonserver:24.09-py3",
        core=core,
        has_include=False,
        components={"backend": tuple(backends), "repoagent": ("checksum",), "cache": ("local",)},
        python_based=frozenset(python_based),
    )


def plan_for(catalog, opts, the_offer):
    release = catalog.release("24.09")
    return make_plan(opts, release, the_offer, catalog, BaseImage("full", "f:1"), BaseImage("min", "m:1"))


def test_unknown_backend_lists_offer_and_suggests(catalog):
    with pytest.raises(UsageError) as err:
        plan_for(catalog, spec(backends=("onnx",)), offer(["identity", "onnxruntime", "python"]))
    message = err.value.message
    assert "unknown backend 'onnx'" in message
    assert "did you mean 'onnxruntime'" in message
    assert "localhost/standin/tritonserver:24.09-py3" in message
    assert "identity, onnxruntime, python" in message


def test_tensorrt_not_in_standin(catalog):
    with pytest.raises(UsageError, match="unknown backend 'tensorrt'.*offers backends: identity, python"):
        plan_for(catalog, spec(backends=("tensorrt",)), offer(["identity", "python"]))


def test_unknown_cache_and_repoagent(catalog):
    with pytest.raises(UsageError, match="unknown cache 'redis'"):
        plan_for(catalog, spec(backends=("python",), caches=("redis",)), offer(["python"]))
    with pytest.raises(UsageError, match="unknown repoagent 'checksun'.*did you mean 'checksum'"):
        plan_for(catalog, spec(backends=("python",), repoagents=("checksun",)), offer(["python"]))


def test_no_backend_is_an_error_of_the_spec(catalog):
    """One rule (composer.config.options.problems), checked before any work; the plan does not repeat it."""
    from composer.config.rules import validate as check

    with pytest.raises(UsageError, match="at least one backend"):
        check(spec(version="24.09"))


def test_python_based_backend_brings_python(catalog):
    plan = plan_for(catalog, spec(backends=("onnxruntime",)), offer(["onnxruntime", "python"], ["onnxruntime"]))
    assert plan.backends == ("onnxruntime", "python")
    assert any("python backend" in note for note in plan.notes)


def test_selection_is_sorted_and_deduplicated(catalog):
    plan = plan_for(catalog, spec(backends=("python", "identity", "python")), offer(["identity", "python"]))
    assert plan.backends == ("identity", "python")
    assert plan.component_paths() == ["backends/identity", "backends/python"]


def test_default_tag(catalog):
    release = catalog.release("24.09")
    assert default_tag(release, ["python", "onnxruntime"]) == "triton-composer/tritonserver:24.09-onnxruntime-python"
    long = default_tag(release, [f"backend{i:03d}" for i in range(40)])
    assert len(long.split(":", 1)[1]) <= 128


def test_custom_backend(catalog, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    from composer.config.options import given_on_command_line
    from composer.config.rules import validate

    with pytest.raises(UsageError, match=r"--custom-backend mine=.*: the folder holds neither libtriton_mine.so nor "
                       "model.py"):
        validate(spec(version="24.09", custom_backends=(("mine", folder),)))
    (folder / "model.py").write_text("class TritonPythonModel: pass\n")
    plan = plan_for(catalog, spec(backends=("python",), custom_backends=(("mine", folder),)), offer(["python"]))
    assert plan.all_backends == ("mine", "python")
    with pytest.raises(UsageError, match="--custom-backend x=/nonexistent: no such folder"):
        given_on_command_line("build", {"custom_backend": ["x=/nonexistent"]})


def test_release_from_image_env(catalog):
    assert resolve_release(None, catalog, {"NVIDIA_TRITON_SERVER_VERSION": "24.08"}).name == "24.08"
    assert resolve_release(None, catalog, {"TRITON_SERVER_VERSION": "2.50.0"}).name == "24.09"
    with pytest.raises(UsageError, match="does not match"):
        resolve_release("24.09", catalog, {"NVIDIA_TRITON_SERVER_VERSION": "24.08"})
    with pytest.raises(UsageError, match="cannot tell"):
        resolve_release(None, catalog, {})


def test_suggest():
    assert suggest("onnx", ("onnxruntime", "openvino")) == "onnxruntime"
    assert suggest("pytorh", ("python", "pytorch")) == "pytorch"
    assert suggest("zzz", ("python",)) is None


def test_record_has_digests(ngc_plan):
    record = ngc_plan("onnxruntime", "python").record()
    assert record["release"] == "24.09"
    assert record["base_images"]["full"]["digest"].startswith("sha256:")
    assert record["backends"] == ["onnxruntime", "python"]


def test_pinned_from_ref(ngc_plan):
    plan = ngc_plan("python")
    assert plan.full.from_ref == "nvcr.io/nvidia/tritonserver@" + "sha256:" + "f" * 64
