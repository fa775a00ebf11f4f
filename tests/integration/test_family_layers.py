"""A pruned base written as family layers, on a real engine (the classic builder): two compositions
of different selections write the same bytes for a family they both keep, so the engine stores the
layer once (the same diff ID, and the same chain below it); no layer over 2 GB. First on the small
24.09 stand-ins (the core), then at NGC scale (cuBLAS, cuDNN and the CUDA runtime shared by
onnxruntime+python and python+pytorch)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from composer.assembly.pruning import sweep_stages
from composer.core.errors import ComposerError
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.catalog.catalog import Catalog
from tests.conftest import TEST_LABEL
from tests.specs import spec
from triton_standins import ngc

pytestmark = pytest.mark.integration
# One worker runs this file and the others making small pruned bases (WORKER_GROUPS, tests/conftest.py).

LAYER_CAP = 2_000_000_000


def diff_ids(ref: str) -> list[str]:
    """The image's layers as the engine stores them (docker image inspect: RootFS.Layers)."""
    out = subprocess.run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", ref],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def compose(engine, registry: str, selections: list[tuple[str, ...]], smoke_test: bool = True):
    """Each selection built on its pruned base; yields {selection: (result, tag)}; removes the images
    and the bases it made, even on failure."""
    made, built = [], {}
    try:
        for backends in selections:
            tag = f"triton-composer-test/tritonserver:layers-{uuid.uuid4().hex[:10]}"
            made.append(tag)
            plan = resolve(engine, spec(backends=backends, version="24.09", registry=registry, tag=tag, base="pruned",
                                        smoke_test=smoke_test), Catalog.load()).plan
            result = build_image(engine, plan, labels=TEST_LABEL)
            if result.pruned_base.made:
                made.append(result.pruned_base.tag)
            built[backends] = (result, tag, plan)
        yield built
    finally:
        for tag in reversed(made):
            engine.remove_image(tag, force=True)
        sweep_stages(engine)


@pytest.fixture(scope="module")
def small(engine, standin_images):
    yield from compose(engine, "localhost/standin", [("python",), ("identity",)])


def test_two_selections_share_the_core_layer_on_the_small_standins(small):
    (python, _, plan), (identity, _, _) = small[("python",)], small[("identity",)]
    assert python.smoke.passed and identity.smoke.passed, [r.detail for r in python.smoke.failures() + identity.smoke.failures()]
    slots = plan.pruning.slots
    a, b = diff_ids(python.image_id), diff_ids(identity.image_id)
    assert a[0] == b[0]  # the core: the distribution and the tree of folders, the same bytes
    assert a[:len(slots)] == b[:len(slots)]  # Debian minbase: both keep the same packages, every layer shared
    assert [layer.name for layer in python.sizes.base_layers] == [slot.name for slot in slots]
    assert [item["layer"] for item in python.pruning.layers] == [slot.name for slot in slots]
    assert "layers of the base" in python.pruning.explain()


def test_a_pruned_base_made_again_from_scratch_gives_the_same_image(engine, small):
    """--no-cache makes the pruned base again (no step from the build cache; the tag moves to it):
    the composer writes its layers and configuration (no time of the engine's), so the base made
    again is the very same image, and the composed image has the same id."""
    python, tag, plan = small[("python",)]
    again = f"triton-composer-test/tritonserver:layers-again-{uuid.uuid4().hex[:10]}"
    old_base = python.pruned_base.image
    result = None
    lines: list[str] = []
    try:
        result = build_image(engine, resolve(engine, spec(backends=("python",), version="24.09",
                                                          registry="localhost/standin", tag=again, base="pruned",
                                                          smoke_test=False), Catalog.load()).plan,
                             labels=TEST_LABEL, cache=False, on_engine_line=lines.append)
        assert result.pruned_base.made and result.pruned_base.tag == python.pruned_base.tag
        assert result.pruned_base.seconds > 0 and result.pruned_base.image == old_base
        assert result.image_id == python.image_id
        # The steps the base's build and the composition's (two builds, around the files) share ran
        # once: the base's build ran them, the composition's took that run's images (--cache-from).
        for script in ("collect.py", "prune.py"):
            answers = [lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                       if line.startswith("Step ") and f'"/composer/{script}"' in line]
            assert len(answers) >= 2 and answers[0].startswith("---> Running in"), (script, answers)
            assert set(answers[1:]) == {"---> Using cache"}, (script, answers)
    finally:
        engine.remove_image(again, force=True)
        if result is not None and result.pruned_base.image != old_base:
            try:  # the old base (its tag moved; the fixture takes the new one)
                engine.remove_image(old_base, force=True)
            except ComposerError:  # stages of the module's builds stand on it: it goes with their sweep
                pass


NGC_SCALE_ROOM = 12e9  # two NGC-scale pruned compositions and their bases, on the engine's disk


@pytest.fixture(scope="module")
def ngc_scale(engine, ngc_standins):
    """Measured where the engine writes (its data root, not /); short of room, this session's own
    build cache goes first, and then a failure names what is needed: never a silent skip."""
    from tests.conftest import free_session_build_cache

    found = engine.storage()
    assert found is not None, "the NGC-scale layer checks need a local engine, whose disk can be measured"
    where, usage = found
    if usage.free < NGC_SCALE_ROOM:
        free_session_build_cache(engine)
        usage = shutil.disk_usage(where)
    if usage.free < NGC_SCALE_ROOM:
        pytest.fail(f"{usage.free / 1e9:.1f} GB free at the engine's data root {where}: the NGC-scale "
                    f"compositions need {NGC_SCALE_ROOM / 1e9:.0f} GB; free some (docker image ls, composer's "
                    "pruned bases) and run again", pytrace=False)
    yield from compose(engine, ngc.REGISTRY, [("onnxruntime", "python"), ("python", "pytorch")],
                       smoke_test=False)


def test_cuda_families_are_shared_at_ngc_scale_and_no_layer_is_over_2_gb(engine, ngc_scale):
    (onnxruntime, _, plan), (pytorch, _, _) = ngc_scale[("onnxruntime", "python")], ngc_scale[("python", "pytorch")]
    names = [slot.name for slot in plan.pruning.slots]
    a, b = dict(zip(names, diff_ids(onnxruntime.image_id))), dict(zip(names, diff_ids(pytorch.image_id)))
    for name in ("00-core", "02-cuda-runtime", "03-cublas", "04-cudnn", "05-cuda-fft-rand"):
        assert a[name] == b[name], name
    assert a["06-cuda-sparse-solver"] != b["06-cuda-sparse-solver"]  # pytorch's alone
    sizes = {item["layer"]: item["bytes"] for item in onnxruntime.pruning.layers}
    assert sizes["03-cublas"] > 100e6 and sizes["04-cudnn"] > 100e6
    for result in (onnxruntime, pytorch):
        assert max(layer.size for layer in engine.layers(result.image_id)) < LAYER_CAP
        base = {layer.name: layer.size for layer in result.sizes.base_layers}
        assert list(base) == names and sum(base.values()) == next(p.size for p in result.sizes.parts if p.kind == "base")
