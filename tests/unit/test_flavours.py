"""--flavour: the catalog's flavours, the checks before any work, and plans on a flavour's image,
from what the probe recorded of the NGC-scale 24.09 full and vLLM stand-ins (tests/unit/data)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from composer.catalog.catalog import Flavour
from composer.core.errors import UsageError
from composer.render.render import python_prune, render_dockerfile, render_pruned_base
from composer.resolve.contents import FullImageContents
from composer.resolve.offer import FlavourBase, Offer
from composer.resolve.plan_types import BaseImage
from composer.resolve.plan import make_plan
from composer.resolve.resolve import resolve_offline, resolve_targets
from composer.config.rules import validate as check
from tests.specs import spec

DATA = Path(__file__).parent / "data"
REGISTRY = "localhost/standin-ngc"
FULL = f"{REGISTRY}/tritonserver:24.09-py3"
VLLM = f"{REGISTRY}/tritonserver:24.09-vllm-python-py3"


def recorded(name: str) -> tuple[dict, FullImageContents]:
    doc = json.loads((DATA / f"probe-ngc-24.09-{name}.json").read_text())
    return doc["env"], FullImageContents.from_dict(doc["contents"])


def plan(catalog, *backends, base_env=None, base_contents=None, full_env=None, full_contents=None, min_config=None,
         **options):
    release = catalog.release("24.09")
    opts = spec(backends=tuple(backends), version="24.09", registry=REGISTRY, flavour="vllm", **options)
    f_env, f_contents = recorded("full")
    v_env, v_contents = recorded("vllm")
    full_env, full_contents = full_env or f_env, full_contents or f_contents
    base_env, base_contents = base_env or v_env, base_contents or v_contents
    flavour = FlavourBase.of(catalog.flavour(Flavour("vllm"), release, REGISTRY), Offer.from_contents(base_contents),
                             base_env, base_contents.cuda_major)
    return make_plan(opts, release, Offer.from_contents(full_contents), catalog, BaseImage("full", FULL, "sha256:" + "1" * 64),
                     BaseImage("min", VLLM, "sha256:" + "2" * 64), full_env, created="2024-09-01T00:00:00Z",
                     flavour=flavour, full_cuda_major=full_contents.cuda_major, min_config=min_config)


def test_the_catalog_names_each_flavours_image_and_what_ngc_builds_it_on(catalog):
    v = catalog.flavour(Flavour("vllm"), catalog.release("24.09"), "nvcr.io/nvidia")
    assert v.ref("nvcr.io/nvidia") == "nvcr.io/nvidia/tritonserver:24.09-vllm-python-py3"
    assert v.backends == ("python", "vllm") and v.built_on == "nvcr.io/nvidia/tritonserver:24.09-py3-min"
    assert catalog.flavour(Flavour("vllm"), catalog.release("26.04"), "nvcr.io/nvidia").built_on == "nvcr.io/nvidia/vllm:26.04-py3"
    assert catalog.flavour(Flavour("py3"), catalog.release("24.09"), "nvcr.io/nvidia") is None


@pytest.mark.parametrize("flavour, version, says", [
    ("trtllm", "24.09", "--flavour trtllm: the trtllm flavour is not yet supported: TensorRT-LLM cannot be installed"),
    ("llama", "24.09", "--flavour llama: 'llama' is not a flavour; flavours: py3, vllm"),
    ("vllm", "23.07", "release 23.07 has no vllm image (NGC publishes one from 23.10 on)"),
])
def test_flavours_that_cannot_be_composed_are_refused_before_any_work(flavour, version, says):
    with pytest.raises(UsageError) as refused:
        check(spec(backends=("python",), version=version, flavour=flavour))
    assert says in refused.value.message


@pytest.mark.parametrize("options, says", [
    ({"device": "cpu"}, "--flavour vllm --device cpu: the vllm image is for GPU hosts"),
])
def test_what_a_flavour_cannot_be_yet_is_refused(options, says):
    with pytest.raises(UsageError) as refused:
        check(spec(backends=("vllm",), version="24.09", flavour="vllm", **options))
    assert says in refused.value.message


def test_the_flavours_image_is_the_base_and_the_full_image_stays_py3(catalog):
    targets = resolve_targets(spec(backends=("vllm",), version="24.09", registry=REGISTRY, flavour="vllm"), catalog)
    assert (targets.full, targets.min) == (FULL, VLLM)


def test_vllm_and_python_come_from_the_flavours_image_other_backends_from_the_full_image(catalog):
    p = plan(catalog, "vllm", "onnxruntime")
    assert p.backends == ("onnxruntime",) and p.base_backends == ("python", "vllm")
    assert p.all_backends == ("onnxruntime", "python", "vllm") and p.core == () and not p.python_runtime
    assert dict(p.labels)["org.triton-composer.flavour"] == "vllm"
    assert dict(p.labels)["org.opencontainers.image.base.name"] == VLLM
    assert p.record()["flavour"] == "vllm"
    text = render_dockerfile(p)
    assert f"FROM {p.min.from_ref} AS min" in text and "backends/vllm" not in text
    assert "--from=full /opt/tritonserver/bin" not in text
    assert "backends/onnxruntime /opt/tritonserver/backends/onnxruntime" in text


def test_python_is_kept_from_the_flavours_image(catalog):
    p = plan(catalog, "vllm", "python", "onnxruntime")
    assert p.base_backends == ("python", "vllm") and p.backends == ("onnxruntime",) and not p.python_runtime


def _changed(contents: FullImageContents, **fields) -> FullImageContents:
    return dataclasses.replace(contents, **fields)


def test_server_versions_that_differ_are_refused_naming_both_images(catalog):
    env, _ = recorded("vllm")
    with pytest.raises(UsageError) as refused:
        plan(catalog, "vllm", "onnxruntime", base_env={**env, "TRITON_SERVER_VERSION": "2.49.0"})
    message = refused.value.message
    assert "server versions differ" in message and VLLM in message and FULL in message
    assert "2.49.0" in message and "2.50.0" in message and "\n" not in message


def test_cuda_majors_that_differ_are_refused_naming_both_images(catalog):
    _, contents = recorded("vllm")
    with pytest.raises(UsageError) as refused:
        plan(catalog, "vllm", "onnxruntime", base_contents=_changed(contents, cudart=("libcudart.so.13",)))
    message = refused.value.message
    assert "CUDA majors differ" in message and "libcudart.so.13" in message and "libcudart.so.12" in message
    assert VLLM in message and FULL in message


def test_python_versions_that_differ_are_refused_naming_both_images(catalog):
    _, contents = recorded("vllm")
    with pytest.raises(UsageError) as refused:
        plan(catalog, "vllm", "onnxruntime", base_contents=_changed(contents, stub_python="3.12"))
    assert "python versions differ" in refused.value.message and "3.12" in refused.value.message


def test_a_backend_the_flavours_image_lacks_is_refused(catalog):
    _, contents = recorded("vllm")
    without = _changed(contents, components=tuple(c for c in contents.components if c.name != "vllm"))
    with pytest.raises(UsageError) as refused:
        plan(catalog, "vllm", "onnxruntime", base_contents=without)
    assert f"{VLLM} does not hold backend vllm (it holds python)" in refused.value.message


def test_an_unknown_backend_is_still_named_against_the_full_image(catalog):
    with pytest.raises(UsageError) as refused:
        plan(catalog, "vllm", "onnx")
    assert "unknown backend 'onnx'" in refused.value.message


def test_render_without_an_engine_plans_the_flavour_from_the_catalog(catalog):
    resolved = resolve_offline(spec(backends=("vllm", "onnxruntime"), version="24.09", flavour="vllm"), catalog)
    assert resolved.plan.min.ref == "nvcr.io/nvidia/tritonserver:24.09-vllm-python-py3"
    assert resolved.plan.base_backends == ("python", "vllm")


def test_the_probe_reads_the_cuda_major_from_libcudarts_soname():
    _, contents = recorded("full")
    assert contents.cudart == ("libcudart.so.12",) and contents.cuda_major == "12"
    assert FullImageContents.from_dict(contents.to_dict()).cudart == contents.cudart


def test_golden_dockerfile_on_the_vllm_image(catalog):
    """vllm + onnxruntime on the vLLM image (recorded stand-ins): a golden file of its own
    (COMPOSER_UPDATE_GOLDEN=1 rewrites it and fails, as tests/unit/test_render.py does)."""
    from tests.unit.test_render import GOLDEN, _matches_golden

    _matches_golden(render_dockerfile(plan(catalog, "vllm", "onnxruntime")),
                    GOLDEN / "ngc-24.09-vllm-onnxruntime-flavour-vllm.Dockerfile")


def test_a_pruned_base_on_the_vllm_image_prunes_its_python_distributions_too(catalog, ngc_plan):
    """--flavour vllm --base pruned: prune.py decides in the vLLM image (which holds the server core,
    its backends and the pip-installed distributions), with the parts copied in from the collect
    stage, seeded from the image's own parts and --pip's distributions; the proof checks the kept
    distributions (golden files of their own)."""
    from tests.unit.conftest import MIN_CONFIG
    from tests.unit.test_render import GOLDEN, _matches_golden

    pruned = plan(catalog, "vllm", "onnxruntime", base="pruned", min_config=MIN_CONFIG)
    check(spec(backends=("vllm", "onnxruntime"), version="24.09", flavour="vllm", base="pruned"))  # no refusal
    assert python_prune(pruned) == {"paths": ["bin", "lib", "backends/python", "backends/vllm", "backends/onnxruntime"],
                                    "dists": []}
    text = render_dockerfile(pruned)
    assert "FROM min AS decide" in text and '"--python"' in text and "/composer-proof/python/" in text
    _matches_golden(text, GOLDEN / "ngc-24.09-vllm-onnxruntime-flavour-vllm-pruned.Dockerfile")
    _matches_golden(render_pruned_base(pruned), GOLDEN / "ngc-24.09-vllm-onnxruntime-flavour-vllm-pruned-base.Dockerfile")
    assert python_prune(plan(catalog, "vllm")) is None  # the vLLM image as it is
    # pip's distributions get family layers of their own, on this base alone
    families = [s.family for s in pruned.pruning.slots]
    assert families[:7] == ["core", "py-nvidia", "py-nvidia", "py-torch", "py-torch", "py-dists", "py-dists"]
    py3 = ngc_plan("onnxruntime", "python", base="pruned")
    assert not [s for s in py3.pruning.slots if s.family.startswith("py-")]
