"""ONNX Runtime's execution providers (--ort-provider) and CPU-only images (--device cpu): the
decisions of the spec and the plan, the rendered steps, and the model checks, on recorded data."""

import dataclasses

import pytest

from composer.core.errors import UsageError
from composer.render.render import render_dockerfile, render_pruned_base
from composer.resolve.contents import FullImageContents
from composer.resolve.offer import Offer
from composer.config.model_needs import ModelNeeds, read_needs, repository_needs_problem
from composer.config.options import given_on_command_line
from composer.config.rules import validate as check
from composer.config.pbtxt import scalar_fields
from composer.verify.samples import samples_for
from composer.config.types import Device
from composer.verify.smoke_plan import SmokePlan, resolve_gpus
from tests.specs import spec

# The onnxruntime backend folder of the 24.09 NGC-scale full stand-in, as the probe reports it.
NGC_PROVIDERS = ("cuda", "shared", "tensorrt")


@pytest.fixture
def ngc_offer_plan(ngc_plan, monkeypatch):
    """ngc_plan, with the providers the 24.09 NGC-scale full image's onnxruntime folder holds."""
    real = Offer.from_layout

    def from_layout(catalog, release):
        return dataclasses.replace(real(catalog, release), ort_providers=NGC_PROVIDERS)

    monkeypatch.setattr(Offer, "from_layout", from_layout)
    return ngc_plan


def test_the_probe_reads_the_providers_of_the_onnxruntime_folder(tmp_path):
    from composer.in_image.probe import ort_providers
    for name in ("libonnxruntime.so.1.19.2", "libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so",
                 "libonnxruntime_providers_tensorrt.so", "libtriton_onnxruntime.so", "libonnxruntime_providers_.so"):
        (tmp_path / name).write_bytes(b"")
    assert ort_providers(str(tmp_path)) == ["cuda", "shared", "tensorrt"]
    assert ort_providers(str(tmp_path / "absent")) == []
    contents = FullImageContents.from_dict({"components": [
        {"kind": "backend", "name": "onnxruntime", "path": "/x", "providers": ["cuda", "shared"]}]}, image="full")
    assert Offer.from_contents(contents).ort_providers == ("cuda", "shared")
    assert FullImageContents.from_dict(contents.to_dict()).components[0].providers == ("cuda", "shared")


def test_by_default_every_provider_stays_and_the_render_is_todays(ngc_offer_plan):
    plan = ngc_offer_plan("onnxruntime", "python", base="pruned")
    assert plan.ort_providers is None and plan.trimmed_backends == () and plan.device == "gpu"
    text = render_dockerfile(plan)
    assert "libonnxruntime_providers_" not in text
    assert "COPY --chown=1000:1000 --from=full /opt/tritonserver/backends/onnxruntime" in text
    assert "device" not in plan.record() and "org.triton-composer.device" not in dict(plan.labels)


def test_a_provider_left_out_leaves_the_folder_in_the_collect_stage(ngc_offer_plan):
    plan = ngc_offer_plan("onnxruntime", "python", base="pruned", ort_providers=("cuda",))
    assert plan.ort_providers == ("cuda",) and plan.trimmed_backends == ("onnxruntime",)
    text = render_dockerfile(plan)
    step = ('RUN ["find", "/opt/tritonserver/backends/onnxruntime", "-maxdepth", "1", "-name", '
            '"libonnxruntime_providers_*.so", "!", "-name", "libonnxruntime_providers_cuda.so", "!", "-name", '
            '"libonnxruntime_providers_shared.so", "-print", "-delete"]')
    assert step in text
    # before collect.py (and so before prune.py) looks at the folder, in both contexts
    assert text.index(step) < text.index('"/composer/collect.py"')
    base = render_pruned_base(plan)
    assert base.index(step) < base.index('"/composer/prune.py"')
    assert "COPY --chown=1000:1000 --from=collected /opt/tritonserver/backends/onnxruntime" in text
    assert "COPY --chown=1000:1000 --from=full /opt/tritonserver/backends/python" in text
    assert plan.tag.endswith(":24.09-onnxruntime-python-ort-cuda")
    assert dict(plan.labels)["org.triton-composer.ort-providers"] == "cpu,cuda"
    assert plan.record()["ort_providers"] == ["cuda"]


def test_an_unknown_provider_names_what_the_image_holds(ngc_offer_plan):
    with pytest.raises(UsageError) as caught:
        ngc_offer_plan("onnxruntime", ort_providers=("tensorrtx",))
    message = caught.value.message
    assert "unknown ONNX Runtime provider 'tensorrtx' (did you mean 'tensorrt'?)" in message
    assert "holds cuda, tensorrt (and CPU, always there)" in message and "\n" not in message
    with pytest.raises(UsageError, match="select --backend onnxruntime too"):
        check(spec(version="24.09", backends=("python",), ort_providers=("cuda",)))


def test_a_provider_the_release_does_not_build_is_refused_before_any_engine():
    """render --offline (or any command naming a release) refuses a misspelt provider from the
    catalog, with the one it most likely meant."""
    with pytest.raises(UsageError, match=r"--ort-provider cudaa: unknown ONNX Runtime provider 'cudaa' \(did you "
                       r"mean 'cuda'\?\): NGC's 24.09 onnxruntime backend holds cuda, tensorrt, openvino"):
        check(spec(version="24.09", backends=("onnxruntime",), ort_providers=("cudaa",)), offline=True)
    check(spec(version="24.09", backends=("onnxruntime",), ort_providers=("cuda", "cpu")), offline=True)


@pytest.mark.parametrize("name, says", [
    ("shared", "'shared' is not an execution provider"),
    ("cu da", "is not a name"),
])
def test_provider_names_are_checked_when_read(name, says):
    with pytest.raises(UsageError, match=says):
        given_on_command_line("build", {"ort_provider": [name]})


def test_ort_provider_cpu_alone_keeps_no_other_on_a_gpu_image(ngc_offer_plan):
    """--ort-provider cpu: ONNX models on the CPU of a GPU image; every other provider leaves the
    folder, the image keeps its GPU (the tag and label say cpu)."""
    plan = ngc_offer_plan("onnxruntime", "python", ort_providers=("cpu",))
    assert plan.ort_providers == () and not plan.cpu_only and plan.gpu
    assert ngc_offer_plan("onnxruntime", ort_providers=("cpu", "cuda")).ort_providers == ("cuda",)
    assert "kept: CPU)" in render_dockerfile(plan)


def test_a_cpu_image_keeps_only_the_cpu_provider_on_a_pruned_base(ngc_offer_plan):
    plan = ngc_offer_plan("onnxruntime", "python", device="cpu")
    assert plan.pruning is not None and plan.base == "pruned" and plan.cpu_only and not plan.gpu
    assert plan.ort_providers == ()
    text = render_dockerfile(plan)
    assert ('"-name", "libonnxruntime_providers_*.so", "-print", "-delete"]') in text
    assert 'CMD ["tritonserver", "--pinned-memory-pool-byte-size=0"]' in text
    assert "_CUDA_COMPAT_PATH" not in text  # no GPU: no CUDA compat libraries wired
    labels = dict(plan.labels)
    assert labels["org.triton-composer.device"] == "cpu" and labels["org.triton-composer.ort-providers"] == "cpu"
    assert dict(plan.env)["TRITON_SERVER_GPU_ENABLED"] == "0"
    assert plan.tag.endswith(":24.09-onnxruntime-python-cpu") and plan.record()["device"] == "cpu"
    ov = ngc_offer_plan("python", device="cpu")
    assert ov.ort_providers is None and "find" not in render_dockerfile(ov)


def test_a_cpu_image_with_baked_models_serves_them_with_the_pool_off(ngc_offer_plan, tmp_path):
    (tmp_path / "m").mkdir()
    plan = ngc_offer_plan("python", device="cpu", bake_models=tmp_path)
    assert 'CMD ["tritonserver", "--model-repository=/models", "--pinned-memory-pool-byte-size=0"]' in \
        render_dockerfile(plan)


@pytest.mark.parametrize("fields, says", [
    (dict(backends=("tensorrt",)), "--device cpu -b tensorrt: the tensorrt backend runs only on a GPU"),
    (dict(backends=("python",), base="min"), "--device cpu needs a pruned base"),
    (dict(backends=("onnxruntime",), ort_providers=("cuda",)), "--device cpu --ort-provider cuda: a CPU-only image"),
    (dict(backends=("python",), gpus="all"), "--device cpu --gpus all: a CPU-only image is smoke-tested with no GPU"),
    (dict(backends=("python",), gpus="1"), "--device cpu --gpus 1"),
    (dict(backends=("python",), strict=True), "--device cpu --strict"),
])
def test_what_a_cpu_image_cannot_be_is_refused_in_one_line(fields, says):
    with pytest.raises(UsageError) as caught:
        check(spec(version="24.09", device="cpu", **fields))
    assert caught.value.message.startswith(says) and "\n" not in caught.value.message


def test_what_a_cpu_image_may_be():
    for fields in (dict(), dict(gpus="none"), dict(base="pruned"), dict(ort_providers=("openvino",))):
        checked = check(spec(version="24.09", device="cpu", backends=("onnxruntime", "python", "pytorch"), **fields))
        assert checked.selection.base_of == "pruned"
    assert spec(device="cpu").selection.providers.kept == ()
    assert spec().selection.providers.kept is None
    assert spec(ort_providers=("tensorrt", "cuda")).selection.providers.kept == ("cuda", "tensorrt")
    with pytest.raises(UsageError, match="not a device"):
        given_on_command_line("build", {"device": "tpu"})


def test_the_smoke_plan_of_a_cpu_image_has_no_gpu_and_the_pool_off():
    plan = SmokePlan.of(("python",), "2.50.0", spec().result, device=Device.CPU)
    assert plan.server_flags == ("--pinned-memory-pool-byte-size=0",)
    assert resolve_gpus(None, plan.gpus, plan.device) == ("none", "CPU-only image")
    assert SmokePlan.of(("python",), "2.50.0", spec().result).server_flags == ()
    # GPUs or --strict asked of a CPU image: refused by the rule book, not overridden here.
    for fields in ({"gpus": "all"}, {"strict": True}):
        with pytest.raises(UsageError, match="a CPU-only image is smoke-tested with no GPU"):
            check(spec(version="24.09", backends=("python",), device="cpu", **fields))


# -- what models need -----------------------------------------------------------------------

TRT_ACCELERATOR = ('name: "m" platform: "onnxruntime_onnx"\n'
                   'optimization { execution_accelerators { gpu_execution_accelerator : [ { name : "tensorrt" '
                   'parameters { key: "precision_mode" value: "FP16" } } ] } }\n')


def test_scalar_fields_reads_paths_and_values():
    fields = scalar_fields(TRT_ACCELERATOR + 'instance_group [ { kind: KIND_GPU count: 1 }, { kind: KIND_CPU } ]')
    assert ("optimization.execution_accelerators.gpu_execution_accelerator.name", "tensorrt") in fields
    assert [v for p, v in fields if p == "instance_group.kind"] == ["KIND_GPU", "KIND_CPU"]
    with pytest.raises(ValueError, match="line 1"):
        scalar_fields("name: {")


@pytest.mark.parametrize("config, cpu, providers, says", [
    (TRT_ACCELERATOR, False, ("cuda",), "model m asks for the tensorrt execution accelerator, whose ONNX Runtime "
     "provider this image leaves out (kept: CPU, cuda): add --ort-provider tensorrt"),
    (TRT_ACCELERATOR, False, ("cuda", "tensorrt"), None),
    (TRT_ACCELERATOR, False, None, None),
    (TRT_ACCELERATOR, True, (), "model m asks for the GPU execution accelerator tensorrt: a CPU-only image has no GPU"),
    ('instance_group [ { kind: KIND_GPU } ]', True, (), "model m asks for a KIND_GPU instance group: a CPU-only"),
    ('instance_group [ { kind: KIND_GPU } ]', False, ("cuda",), None),
    ('platform: "tensorrt_plan"', True, (), "model m needs TensorRT (platform tensorrt_plan), which runs only on a GPU"),
    ('backend: "tensorrt"', True, (), "model m needs TensorRT (backend tensorrt)"),
    ('backend: "onnxruntime" optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" '
     '} ] } }', True, (), "model m asks for the openvino execution accelerator"),
    ('backend: "onnxruntime" optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" '
     '} ] } }', True, ("openvino",), None),
    # another backend's accelerators are not ONNX Runtime's providers
    ('backend: "tensorflow" optimization { execution_accelerators { gpu_execution_accelerator: [ { name: '
     '"tensorrt" } ] } }', False, ("cuda",), None),
    ('instance_group [ { kind: KIND_CPU } ]', True, (), None),
])
def test_what_a_model_needs(config, cpu, providers, says):
    problem = ModelNeeds.of("m", config).problem(cpu, providers)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(says), problem


def test_a_repository_is_checked_model_by_model(tmp_path):
    for name, config in (("a_ok", 'instance_group [ { kind: KIND_CPU } ]'), ("b_gpu", 'instance_group [{kind: KIND_GPU}]'),
                         ("c_none", None)):
        (tmp_path / name).mkdir()
        if config:
            (tmp_path / name / "config.pbtxt").write_text(config)
    folders = {p.name: p for p in tmp_path.iterdir()}
    assert repository_needs_problem(folders, True, ()).startswith("model b_gpu asks for a KIND_GPU")
    assert repository_needs_problem(folders, False, None) is None
    assert read_needs("c_none", tmp_path / "c_none") == ModelNeeds("c_none")


def test_models_needing_what_was_left_out_are_refused_before_any_work(tmp_path):
    (tmp_path / "fast").mkdir()
    (tmp_path / "fast" / "config.pbtxt").write_text(TRT_ACCELERATOR.replace('"m"', '"fast"'))
    with pytest.raises(UsageError) as caught:
        check(spec(version="24.09", backends=("onnxruntime",), ort_providers=("cuda",), model_repository=tmp_path))
    assert caught.value.message.startswith(f"--model-repository {tmp_path}: model fast asks for the tensorrt")
    with pytest.raises(UsageError, match="--bake-models .*: model fast asks for the GPU execution accelerator"):
        check(spec(version="24.09", backends=("onnxruntime",), device="cpu", bake_models=tmp_path))
    check(spec(version="24.09", backends=("onnxruntime",), model_repository=tmp_path))  # every provider kept


def test_the_samples_a_cpu_image_serves_need_no_gpu():
    for sample in samples_for({"onnxruntime", "python", "pytorch", "identity"}):
        if sample.backend == "tensorrt":
            continue
        assert read_needs(sample.model, sample.path).problem(True, ()) is None, sample.model


def test_providers_are_chosen_only_for_ngcs_onnxruntime_backend(ngc_offer_plan, tmp_path):
    (tmp_path / "libtriton_onnxruntime.so").write_bytes(b"")
    with pytest.raises(UsageError, match="not one from --custom-backend or --backend-image"):
        check(spec(version="24.09", custom_backends=(("onnxruntime", tmp_path),), ort_providers=("cuda",)))
