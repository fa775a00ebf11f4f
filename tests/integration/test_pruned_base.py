"""A pruned base (--base pruned) at NGC's scale: the four-backend selection composed once on a base
made of only what it needs of the NGC-scale 24.09 min stand-in, serving every NGC-scale test model
with the host's answers; its dpkg database, what it dropped, its report; and the proof, which fails
the build naming the library when one the catalog lists is missing (a min image with one removed),
leaving the tag where it was; and the small stand-ins on a pruned base."""

from __future__ import annotations

import re
import uuid

import pytest

from composer.catalog.catalog import Catalog
from composer.core.errors import BuildFailed
from composer.pipeline import build_image
from composer.assembly.pruning import sweep_stages
from composer.resolve.resolve import resolve
from triton_standins import ngc
from tests.conftest import TEST_LABEL
from tests.integration.conftest import bases_made, remove_made_base
from tests.integration.test_ngc_scale import BACKENDS, SERVED, _cases, _repository
from tests.specs import spec

pytestmark = pytest.mark.integration
# One worker runs this file and the others making small pruned bases (WORKER_GROUPS, tests/conftest.py).

MIN = f"{ngc.REGISTRY}/tritonserver:24.09-py3-min"
REMOVED = "libcudnn_engines_precompiled.so.9"  # loaded by name: libcudnn_graph.so.9's data names it


@pytest.fixture
def min_without_a_runtime_library(engine, ngc_standins, tmp_path):
    """The min stand-in with one library cuDNN loads by name removed (its link stays, dangling); a
    layer of a few bytes on it. The full image, made from the whole min image, still has it."""
    tag = f"triton-composer-test/tritonserver:min-broken-{uuid.uuid4().hex[:10]}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {MIN}\nRUN rm /usr/lib/x86_64-linux-gnu/{REMOVED.replace('.so.9', '.so.9.4.0')}\n")
    engine.build(tmp_path, tag=tag, labels=TEST_LABEL, network_mode="none")
    try:
        yield tag
    finally:
        engine.remove_image(tag, force=True)


def test_a_missing_runtime_library_fails_the_proof_and_the_tag_stays(engine, min_without_a_runtime_library):
    """First in the module, before its composition is made: the disk holds one NGC-scale pruned
    build at a time (the module's selection: its collect and decide stages are the build cache the
    composition below then takes). The base made of the broken min image is removed after."""
    tag = f"triton-composer-test/tritonserver:proof-{uuid.uuid4().hex[:10]}"
    engine.tag(min_without_a_runtime_library, tag)  # the tag's current image, which must stay
    lines: list[str] = []
    plan = resolve(engine, spec(backends=BACKENDS, version="24.09", registry=ngc.REGISTRY,
                                min_image=min_without_a_runtime_library, tag=tag, base="pruned"),
                   Catalog.load()).plan
    try:
        with pytest.raises(BuildFailed) as failed:
            build_image(engine, plan, labels=TEST_LABEL, on_line=lines.append)
        message = failed.value.message
        assert message.startswith(f"pruned base: /usr/lib/x86_64-linux-gnu/{REMOVED} is missing (backend "), message
        assert "libcudnn_graph.so" in message and "names libcudnn_engines_precompiled.so (loaded by name)" in message
        assert message.endswith(f"{tag} was not moved")
        assert engine.image(tag).id == engine.image(min_without_a_runtime_library).id
    finally:
        engine.remove_image(tag)
        for base in bases_made(lines):  # the base made of the broken min image: no build uses it again
            engine.remove_image(base, force=True)
        sweep_stages(engine)


@pytest.fixture(scope="module")
def pruned(engine, ngc_standins, tmp_path_factory):
    """The four-backend composition on a pruned base, built and smoke-tested once, removed after."""
    root = tmp_path_factory.mktemp("pruned")
    tag = f"triton-composer-test/tritonserver:pruned-{uuid.uuid4().hex[:10]}"
    plan = resolve(engine, spec(backends=BACKENDS, version="24.09", registry=ngc.REGISTRY, tag=tag, base="pruned",
                                model_repository=_repository(root), smoke_cases=_cases(root)), Catalog.load()).plan
    try:
        yield {"result": build_image(engine, plan, labels=TEST_LABEL), "tag": tag}
    finally:
        engine.remove_image(tag, force=True)
        sweep_stages(engine)


def run(engine, image: str, script: str) -> str:
    out = engine.run_once(image, ["sh", "-c", script], entrypoint=[], timeout=600)
    assert out.exit_code == 0, out.output
    return out.output


def test_every_model_answers_as_on_the_host(pruned):
    report = pruned["result"].smoke
    assert report.passed, [(r.subject, r.model, r.detail) for r in report.failures()]
    rows = {r.model: r for r in report.rows if r.subject == "model"}
    for name in SERVED + ("bls_embedding",):
        assert rows[name].status == "PASS", (name, rows[name].detail)
    samples = {r.subject: r.status for r in report.rows if r.request == "sample"}
    assert samples["python"] == samples["onnxruntime"] == samples["pytorch"] == "PASS"


def test_no_dev_package_static_archive_or_header_is_left(engine, pruned):
    packages = run(engine, pruned["tag"], "dpkg-query -W -f '${Package}\\n'").split()
    assert "libc6" in packages and "libcudnn9-cuda-12" in packages and "libnvinfer10" in packages
    assert [p for p in packages if re.search(r"-(dev|dbg)(-|$)", p)] == []
    assert not {"nsight-systems-2024.5.1", "nsight-compute-2024.3.1", "gcc-12", "g++-12"} & set(packages)
    left = run(engine, pruned["tag"], "find / -xdev \\( -type f -o -type l \\) \\( -name '*.a' -o -name '*.h' "
               "-o -name 'libnvinfer_builder_resource*' -o -path '/usr/include/*' \\) -not -path '/usr/local/lib/python3*'")
    assert left.strip() == ""  # (numpy's own headers come with the python runtime, not the base)


def test_dpkg_verify_reports_no_file_the_pruning_removed(engine, pruned):
    out = engine.run_once(pruned["tag"], ["dpkg", "--verify"], entrypoint=[], timeout=600)
    missing = [line.split()[-1] for line in out.output.splitlines() if line.startswith("missing")]
    if missing:  # only what the min image lacks itself may be reported
        in_min = run(engine, MIN, "for p in " + " ".join(missing) + "; do [ -e \"$p\" ] && echo \"$p\"; done; true")
        assert in_min.split() == [], in_min


def test_the_report_says_why_each_package_stays_and_what_went(engine, pruned):
    result = pruned["result"]
    kept = {p["package"]: p["why"] for p in result.pruning.kept}
    assert kept["libnvinfer10"].startswith("backend ") and "libnvinfer.so.10" in kept["libnvinfer10"]
    assert "names libnvrtc.so (loaded by name)" in kept["cuda-nvrtc-12-6"]  # read from cuDNN's own data
    explained = result.pruning.explain()
    assert "named, not in the image" in explained and "libcuda.so.1" in explained  # the driver: never in an image
    required = {item["library"] for item in result.pruning.loaded_at_run_time}
    assert "/usr/lib/x86_64-linux-gnu/libcudnn_engines_precompiled.so.9" in required
    assert kept["hpcx-2.20"].startswith("backend pytorch: ") and "at run time (catalog)" in kept["hpcx-2.20"]
    dropped = {p["package"]: p["size"] for p in result.pruning.dropped}
    assert dropped["nsight-systems-2024.5.1"] > 500e6 and "libcublas-dev-12-6" in dropped
    assert "pruned base" in result.pruning.explain().splitlines()[0]
    base = result.pruned_base  # a base image of its own, under a tag naming its inputs' key
    assert base.tag.startswith("triton-composer/pruned-base:24.09-") and engine.image(base.tag).id == base.image
    sizes = result.sizes
    base = next(p.size for p in sizes.parts if p.kind == "base")
    assert sizes.min_image == 0 and 0 < base < sizes.pruned_from and sizes.pruning_saved == sizes.pruned_from - base


def test_the_small_standins_take_a_pruned_base_too_made_once_and_reused(engine, standin_images):
    """Debian minbase with no CUDA package: the required packages and what python needs stay. A second
    build of the selection reuses the base the first made (its layer is the image's first). The small
    stand-in's Python-based pytorch holds torch's test binaries, whose libtorch.so the full image's
    loader cannot find either (no RUNPATH to torch/lib): the proof counts them and passes, and the
    pytorch sample answers on the pruned base."""
    tags = [f"triton-composer-test/tritonserver:small-pruned-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    results = []
    try:
        for tag in tags:
            plan = resolve(engine, spec(backends=("pytorch", "python"), version="24.09", registry="localhost/standin",
                                        tag=tag, base="pruned"), Catalog.load()).plan
            results.append(build_image(engine, plan, labels=TEST_LABEL))
        first, second = results
        assert first.smoke.passed, [(r.subject, r.model, r.detail) for r in first.smoke.failures()]
        samples = {r.subject: r.status for r in first.smoke.rows if r.request == "sample"}
        assert samples["pytorch"] == samples["python"] == "PASS"
        proved = run(engine, tags[0], "cat /opt/tritonserver/proved.txt")
        assert "entries unresolved in the full image too, left as they were" in proved, proved
        shim = run(engine, tags[0], "ldd /opt/tritonserver/backends/pytorch/site-packages/torch/bin/test_shim || true")
        assert "libtorch.so => not found" in shim
        assert not [p["package"] for p in first.pruning.kept if re.search(r"cuda|cudnn|nccl", p["package"])]  # none here
        assert {p["why"].split(" (")[0] for p in first.pruning.kept} >= {"required by the distribution"}
        assert second.pruned_base.made is False and second.pruned_base.image == first.pruned_base.image
        assert engine.image(first.pruned_base.tag).id == first.pruned_base.image
        base_layers = engine.image(first.pruned_base.image).layers  # its layers' diff ids
        for result in results:  # the image's first layers are the base's, its history names the base's key
            assert engine.image(result.image_id).layers[:len(base_layers)] == base_layers
            assert engine.layers(result.image_id)[0].created_by == \
                f"pruned base {first.pruned_base.key[:16]}: layer 1 of {len(base_layers)}"
        assert second.smoke.passed and second.pruning.kept == first.pruning.kept
    finally:
        for tag in tags:
            engine.remove_image(tag, force=True)
        for result in results:  # the base this test made: a later test of one selection makes its own
            remove_made_base(engine, result)
        sweep_stages(engine)


@pytest.mark.parametrize("release", ["26.07"])  # 25.01's tree (1000:1000) is composed in test_generations
def test_the_ubuntu_24_04_generation_takes_a_pruned_base_and_serves(engine, standins, release):
    """No release is refused for want of a list: the 24.04 generation's small stand-ins (a user
    ubuntu holding uid 1000, PEP 668 python; from 26.06 a root-owned tree) on a pruned base."""
    standins(release)
    tag = f"triton-composer-test/tritonserver:pruned-{release}-{uuid.uuid4().hex[:10]}"
    result = None
    try:
        plan = resolve(engine, spec(backends=("onnxruntime", "python"), version=release, registry="localhost/standin",
                                    tag=tag, base="pruned"), Catalog.load()).plan
        result = build_image(engine, plan, labels=TEST_LABEL)
        assert result.smoke.passed, [(r.subject, r.model, r.detail) for r in result.smoke.failures()]
        samples = {r.subject: r.status for r in result.smoke.rows if r.request == "sample"}
        assert samples["python"] == samples["onnxruntime"] == "PASS"
        assert result.pruned_base.made or result.pruned_base.image
        proved = run(engine, tag, "cat /opt/tritonserver/proved.txt")
        assert proved.startswith("proof: ") and "ELF files resolve every NEEDED entry" in proved
        owner = run(engine, tag, "stat -c %u:%g /opt/tritonserver/bin/tritonserver").strip()
        assert owner == ("0:0" if release >= "26.06" else "1000:1000")
    finally:
        engine.remove_image(tag, force=True)
        remove_made_base(engine, result)
        sweep_stages(engine)
