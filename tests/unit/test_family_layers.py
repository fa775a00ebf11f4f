"""The family layers of a pruned base (in_image/layers.py), on recorded dpkg data of the NGC-scale
24.09 min stand-in: which layer each file goes to, the same for every selection where the family
is the same; a family over the layer cap split by its sorted paths; the rendered Dockerfile the same
bytes for the same plan."""

from __future__ import annotations

import json

import pytest

from composer.in_image import layers, prune
from composer.render.render import render_pruned_base, write_context

# Recorded from localhost/standin-ngc/tritonserver:24.09-py3-min (dpkg-query -W: Package, Priority,
# Depends abridged to what matters here) with a file or two of each package.
PACKAGES = {  # name -> (fields, files)
    "libc6": ("Priority: optional\nDepends: libgcc-s1", ["/usr/lib/x86_64-linux-gnu/libc.so.6"]),
    "libgcc-s1": ("Priority: optional\nDepends: libc6", ["/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"]),
    "coreutils": ("Priority: required\nEssential: yes\nPre-Depends: libc6", ["/usr/bin/ls", "/usr/bin/cp"]),
    "libgomp1": ("Priority: optional\nDepends: libc6", ["/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"]),
    "cuda-cudart-12-6": ("Priority: optional", ["/usr/local/cuda-12.6/targets/x86_64-linux/lib/libcudart.so.12.6.68"]),
    "cuda-nvrtc-12-6": ("Priority: optional", ["/usr/local/cuda-12.6/targets/x86_64-linux/lib/libnvrtc.so.12.6.68"]),
    "libcublas-12-6": ("Priority: optional", ["/usr/local/cuda-12.6/targets/x86_64-linux/lib/libcublas.so.12.6.1.4",
                                              "/usr/local/cuda-12.6/targets/x86_64-linux/lib/libcublasLt.so.12.6.1.4"]),
    "libcufft-12-6": ("Priority: optional", ["/usr/local/cuda-12.6/targets/x86_64-linux/lib/libcufft.so.11.2.6.59"]),
    "libcudnn9-cuda-12": ("Priority: optional", ["/usr/lib/x86_64-linux-gnu/libcudnn.so.9.4.0",
                                                 "/usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.4.0"]),
    "libnccl2": ("Priority: optional", ["/usr/lib/x86_64-linux-gnu/libnccl.so.2.22.3"]),
    "libnvinfer10": ("Priority: optional", ["/usr/lib/x86_64-linux-gnu/libnvinfer.so.10.4.0"]),
    "libnvinfer-plugin10": ("Priority: optional", ["/usr/lib/x86_64-linux-gnu/libnvinfer_plugin.so.10.4.0"]),
    "hpcx-2.20": ("Priority: optional", ["/opt/hpcx/ucx/lib/libucp.so.0"]),
}
MB = 1_000_000
SIZES = {"libcublasLt.so.12.6.1.4": 480 * MB, "libcublas.so.12.6.1.4": 100 * MB, "libcudnn.so.9.4.0": 100 * MB,
         "libcudnn_ops.so.9.4.0": 700 * MB, "libnvinfer.so.10.4.0": 1500 * MB, "libnvinfer_plugin.so.10.4.0": 900 * MB}
UNOWNED = ["etc/hostname.composer", "opt/nvidia/nvidia_entrypoint.sh", "opt/hpcx/ompi/bin/mpirun",
           "usr/local/cuda-12.6/compat/README", "var/lib/dpkg/status"]


@pytest.fixture
def database(tmp_path):
    dpkg = tmp_path / "dpkg"
    (dpkg / "info").mkdir(parents=True)
    stanzas = [f"Package: {name}\nStatus: install ok installed\n{fields}\nArchitecture: amd64\n"
               for name, (fields, _) in PACKAGES.items()]
    (dpkg / "status").write_text("\n".join(stanzas))
    for name, (_, files) in PACKAGES.items():
        (dpkg / "info" / f"{name}.list").write_text("".join(f + "\n" for f in files))
    return prune.Database(str(dpkg))


def listing(kept):
    """(path, size) of every file the pruned stage leaves: the kept packages' and those no package owns."""
    files = [(f.lstrip("/"), SIZES.get(f.rsplit("/", 1)[-1], MB)) for name in sorted(kept) for f in PACKAGES[name][1]]
    return files + [(path, 100) for path in UNOWNED]


def plan(database, ngc_plan, kept, **options):
    table = json.loads(ngc_plan("python", base="pruned", **options).pruning.layers_json())
    return {slot["name"]: paths for slot, paths, _ in
            layers.plan_layers(listing(kept), layers.owners(database), set(kept),
                               layers.distribution_core(database, set(kept)), table)}


BASE = {"coreutils", "libc6", "libgcc-s1"}
ONNXRUNTIME = BASE | {"cuda-cudart-12-6", "cuda-nvrtc-12-6", "libcublas-12-6", "libcufft-12-6", "libcudnn9-cuda-12",
                      "libgomp1"}
PYTORCH = ONNXRUNTIME | {"libnccl2", "hpcx-2.20"}


def test_each_file_goes_to_its_familys_layer(database, ngc_plan):
    planned = plan(database, ngc_plan, PYTORCH)
    assert planned["00-core"] == ["etc/hostname.composer", "opt/nvidia/nvidia_entrypoint.sh", "usr/bin/cp", "usr/bin/ls",
                                  "usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libgcc_s.so.1"]
    assert planned["02-cuda-runtime"] == ["usr/local/cuda-12.6/compat/README",
                                          "usr/local/cuda-12.6/targets/x86_64-linux/lib/libcudart.so.12.6.68",
                                          "usr/local/cuda-12.6/targets/x86_64-linux/lib/libnvrtc.so.12.6.68"]
    assert planned["03-cublas"] == ["usr/local/cuda-12.6/targets/x86_64-linux/lib/libcublas.so.12.6.1.4",
                                    "usr/local/cuda-12.6/targets/x86_64-linux/lib/libcublasLt.so.12.6.1.4"]
    assert planned["05-cuda-fft-rand"] == ["usr/local/cuda-12.6/targets/x86_64-linux/lib/libcufft.so.11.2.6.59"]
    assert planned["04-cudnn"] == ["usr/lib/x86_64-linux-gnu/libcudnn.so.9.4.0", "usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.4.0"]
    assert planned["07-nccl"] == ["usr/lib/x86_64-linux-gnu/libnccl.so.2.22.3"]
    assert planned["08-hpcx"] == ["opt/hpcx/ompi/bin/mpirun", "opt/hpcx/ucx/lib/libucp.so.0"]  # owned, and by its path
    assert planned["12-rest"] == ["usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"]  # kept, but not the distribution's core
    assert planned["13-dpkg"] == ["var/lib/dpkg/status"]
    assert list(planned) == [slot.name for slot in ngc_plan("python", base="pruned").pruning.slots]


def test_a_family_kept_whole_is_the_same_layer_in_every_selection(database, ngc_plan):
    """What two selections share: the core always; cuBLAS and cuDNN where both keep them."""
    small, onnxruntime, pytorch = (plan(database, ngc_plan, kept) for kept in (BASE, ONNXRUNTIME, PYTORCH))
    assert small["00-core"] == onnxruntime["00-core"] == pytorch["00-core"]
    for name in ("02-cuda-runtime", "03-cublas", "04-cudnn", "05-cuda-fft-rand"):
        assert onnxruntime[name] == pytorch[name] and onnxruntime[name]
        assert small[name] == (["usr/local/cuda-12.6/compat/README"] if name == "02-cuda-runtime" else [])
    assert onnxruntime["07-nccl"] == [] and pytorch["07-nccl"]


def test_a_family_over_the_cap_is_split_by_its_sorted_paths(database, ngc_plan):
    kept = PYTORCH | {"libnvinfer10", "libnvinfer-plugin10"}
    planned = plan(database, ngc_plan, kept)
    # TensorRT: 2.4 GB in two layers of at most 1.9 GB, by path: libnvinfer.so first.
    assert planned["10-tensorrt-1"] == ["usr/lib/x86_64-linux-gnu/libnvinfer.so.10.4.0"]
    assert planned["11-tensorrt-2"] == ["usr/lib/x86_64-linux-gnu/libnvinfer_plugin.so.10.4.0"]
    assert plan(database, ngc_plan, PYTORCH)["11-tensorrt-2"] == []  # a part with nothing: its list alone
    # cuDNN (800 MB) over a cap of 700 MB has one part: the build stops, naming the family.
    table = json.loads(ngc_plan("python", base="pruned").pruning.layers_json())
    table["layer_bytes"] = 700 * MB + 2048
    with pytest.raises(layers.TooBig, match="the cudnn family holds 0.80 GB, more than its 1 layer"):
        layers.plan_layers(listing(kept), layers.owners(database), kept, layers.distribution_core(database, kept), table)


def test_split_fills_parts_in_order_under_the_cap():
    files = [("b", 600), ("a", 600), ("c", 600), ("d", 10)]
    assert layers.split("x", files, 3, 1300 + 2 * layers.ENTRY_BYTES) == [["a", "b"], ["c", "d"], []]
    with pytest.raises(layers.TooBig):
        layers.split("x", files, 1, 1300 + 2 * layers.ENTRY_BYTES)


def test_outputs_a_list_for_every_layer_and_the_report(tmp_path):
    slot = {"name": "00-core", "family": "core", "part": 1}
    empty = {"name": "01-python", "family": "python", "part": 1}
    report = layers.write_outputs(str(tmp_path), [(slot, ["a", "b"], 30), (empty, [], 0)])
    assert (tmp_path / "00-core.list").read_text() == "a\nb\n" and (tmp_path / "01-python.list").read_text() == ""
    assert report == json.loads((tmp_path / "layers.json").read_text())["layers"]
    assert report[0] == {"layer": "00-core", "family": "core", "part": 1, "files": 2, "bytes": 30}


def test_the_catalogs_table_starts_with_the_core_and_ends_with_the_database(catalog):
    families = catalog.pruned_base_layers
    assert families[0].takes == "distribution" and families[-1].takes == "database"
    assert [f.takes for f in families].count("rest") == 1 and len({f.family for f in families}) == len(families)
    assert catalog.layer_bytes < 2_000_000_000


def test_the_base_is_the_same_bytes_for_the_same_plan_and_names_every_layer(ngc_plan, tmp_path):
    plan_a = ngc_plan("onnxruntime", "python", base="pruned")
    text = render_pruned_base(plan_a)
    assert text == render_pruned_base(ngc_plan("python", "onnxruntime", base="pruned"))
    a = write_context(plan_a, tmp_path / "a").pruned_base
    b = write_context(ngc_plan("onnxruntime", "python", base="pruned"), tmp_path / "b").pruned_base
    for name in ("Dockerfile", "layers.json", "layers.py", "keep_layer.sh"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    for slot in plan_a.pruning.slots:
        assert f"\nFROM split AS layer-{slot.name}\n" in text  # read by the composer by its last step's label:
        assert f'\nLABEL org.triton-composer.cached-stage="layer-{slot.name} ${{COMPOSER_RUN}}"\n' in text
        assert f"\nCOPY --from=layer-{slot.name} / /" in text  # the last stage's copy, for a build by hand
    assert '"--all-folders", "00-core"]' in text and text.count("--all-folders") == 1
    assert '"13-dpkg", "layers.json"]' in text  # the report of every layer rides in the last


def test_a_builds_base_names_its_run_in_each_stages_first_step(ngc_plan):
    """A build writes its run into the labels: an ARG step first would be an image every run shares,
    unlabelled, which kept the decide and collect stages under it after `composer cache clear --all`."""
    plan = ngc_plan("onnxruntime", "python", base="pruned")
    text = render_pruned_base(plan, "run1")
    assert "ARG COMPOSER_RUN" not in text and "${COMPOSER_RUN}" not in text
    own = [s for s in text.split("\nFROM ")[1:] if " AS decide" not in s and not s.startswith(("nvcr.io", "full ", "collect"))]
    named = [s for s in own if " AS " in s.splitlines()[0]]
    assert len(named) == 3 + len(plan.pruning.slots), [s.splitlines()[0] for s in own]  # pruned, layers, split
    for stage in named:
        first_step = stage.splitlines()[1]
        assert first_step.startswith("LABEL org.triton-composer.stage=") and first_step.endswith(' run1"'), stage[:200]
    # The render (and so the base's key) names no run.
    assert render_pruned_base(plan).count("ARG COMPOSER_RUN=render") == len(named)
