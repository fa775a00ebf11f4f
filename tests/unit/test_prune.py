"""The keep/drop decision of a pruned base (in_image/prune.py), on a min image in miniature.

Recorded package data (a dpkg status and file lists) and real ELF files: the decision keeps the
distribution's required packages, the packages of what the selection needs and of what the
catalog says it loads by name, what those depend on and need in turn; never a -dev package;
and drops headers, static archives and TensorRT's builder resource from kept packages.
"""

from __future__ import annotations

import json

import pytest

from composer.in_image import prune, probe
from tests.unit.test_probe import make_elf

PACKAGES = {  # name -> (fields, files relative to the image root)
    "libc6": ("Priority: required\nInstalled-Size: 100", ["lib/libc.so.6"]),
    "libcudnn9-cuda-12": ("Priority: optional\nInstalled-Size: 800000",
                          ["lib/libcudnn.so.9", "lib/libcudnn_ops.so.9", "share/doc/libcudnn9/copyright",
                           "share/doc/libcudnn9/README"]),
    "libcudnn9-dev-cuda-12": ("Priority: optional\nInstalled-Size: 5000\nDepends: libcudnn9-cuda-12",
                              ["include/cudnn.h", "lib/libcudnn_static.a"]),
    "cuda-nvrtc-12-6": ("Priority: optional\nInstalled-Size: 60000", ["lib/libnvrtc.so.12"]),
    "libfoo1": ("Priority: optional\nInstalled-Size: 10\nDepends: libbar1 (>= 1) | libbaz1", ["lib/libfoo.so.1"]),
    "libbar1": ("Priority: optional\nInstalled-Size: 10", ["lib/libbar.so.1"]),
    "libnvinfer10": ("Priority: optional\nInstalled-Size: 2000000",
                     ["lib/libnvinfer.so.10", "lib/libnvinfer_builder_resource.so.10.4.0"]),
    "nsight-systems": ("Priority: optional\nInstalled-Size: 700000", ["nsight/bulk.bin"]),
}
LOADED = {"libcudnn.so.9": ["libcudnn_ops.so.9", "libnvrtc.so.12"]}


@pytest.fixture
def image(tmp_path):
    """(root, dpkg dir, resolver, parts): a Triton backend needing cuDNN and TensorRT."""
    system = tmp_path / "lib"
    make_elf(system / "libc.so.6", soname="libc.so.6")
    make_elf(system / "libcudnn.so.9", soname="libcudnn.so.9", needed=["libc.so.6"])
    make_elf(system / "libcudnn_ops.so.9", soname="libcudnn_ops.so.9", needed=["libfoo.so.1"])  # loaded by name
    make_elf(system / "libnvrtc.so.12", soname="libnvrtc.so.12")
    make_elf(system / "libfoo.so.1", soname="libfoo.so.1")
    make_elf(system / "libbar.so.1", soname="libbar.so.1")
    make_elf(system / "libnvinfer.so.10", soname="libnvinfer.so.10")
    make_elf(system / "libnvinfer_builder_resource.so.10.4.0")
    make_elf(system / "libcudnn_static.a")
    for other in ("include/cudnn.h", "share/doc/libcudnn9/copyright", "share/doc/libcudnn9/README", "nsight/bulk.bin"):
        (tmp_path / other).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / other).write_text("x" * 80)
    root = tmp_path / "opt" / "tritonserver"
    make_elf(root / "backends" / "demo" / "libtriton_demo.so", needed=["libcudnn.so.9", "libnvinfer.so.10"])
    dpkg = tmp_path / "dpkg"
    (dpkg / "info").mkdir(parents=True)
    stanzas = []
    for name, (fields, files) in PACKAGES.items():
        stanzas.append(f"Package: {name}\nStatus: install ok installed\n{fields}\nArchitecture: amd64\n")
        paths = [str(tmp_path / f) for f in files]
        (dpkg / "info" / f"{name}.list").write_text("".join(p + "\n" for p in paths))
        (dpkg / "info" / f"{name}.md5sums").write_text("".join(f"0123  {p.lstrip('/')}\n" for p in paths))
    (dpkg / "status").write_text("\n".join(stanzas))
    resolver = probe.Resolver(str(root), [str(system)], [])
    parts = [("backend demo", [str(root / "backends" / "demo" / "libtriton_demo.so")])]
    return root, dpkg, resolver, parts


def decide(image, loaded=LOADED, keep_builder=False):
    root, dpkg, resolver, parts = image
    return prune.decide(prune.Database(str(dpkg)), resolver, str(root), parts, loaded, keep_builder)


def test_keeps_what_the_selection_needs_and_says_why(image):
    why = decide(image).why
    assert sorted(why) == ["cuda-nvrtc-12-6", "libbar1", "libc6", "libcudnn9-cuda-12", "libfoo1", "libnvinfer10"]
    assert why["libc6"].startswith("required by the distribution")
    assert why["libcudnn9-cuda-12"] == "backend demo: backends/demo/libtriton_demo.so -> libcudnn.so.9"
    assert "loads libnvrtc.so.12 at run time (catalog)" in why["cuda-nvrtc-12-6"]
    assert "libcudnn_ops.so.9 (loaded by name) -> libfoo.so.1" in why["libfoo1"]
    assert why["libbar1"] == "libfoo1 depends on it"


def test_a_library_left_out_of_the_catalog_list_loses_its_package(image):
    keeper = decide(image, loaded={"libcudnn.so.9": ["libcudnn_ops.so.9"]})
    assert "cuda-nvrtc-12-6" not in keeper.why
    assert [library for library, _ in keeper.required] == ["libcudnn_ops.so.9"]


def test_no_dev_package_even_when_nothing_else_is_asked(image):
    keeper = decide(image)
    keeper.keep("libcudnn9-dev-cuda-12", "asked")
    assert "libcudnn9-dev-cuda-12" not in keeper.why


@pytest.mark.parametrize("keep_builder", [False, True])
def test_outputs_drop_list_and_dpkg_database(image, tmp_path, keep_builder):
    root, dpkg, _, _ = image
    db = prune.Database(str(dpkg))
    keeper = decide(image, keep_builder=keep_builder)
    out = tmp_path / "out"
    report = prune.write_outputs(str(out), db, keeper, keep_builder, str(dpkg / "info"))
    drops = set((out / "drop.txt").read_text().split())
    base = str(tmp_path).lstrip("/")
    assert {f"{base}/include/cudnn.h", f"{base}/lib/libcudnn_static.a", f"{base}/nsight/bulk.bin",
            f"{base}/share/doc/libcudnn9/README"} <= drops
    assert f"{base}/share/doc/libcudnn9/copyright" not in drops and f"{base}/lib/libcudnn.so.9" not in drops
    builder = f"{base}/lib/libnvinfer_builder_resource.so.10.4.0"
    assert (builder in drops) is not keep_builder
    status = (out / "dpkg" / "status").read_text()
    assert "Package: nsight-systems" not in status and "Package: libcudnn9-dev-cuda-12" not in status
    assert "Package: libnvinfer10" in status
    assert "var/lib/dpkg/info/nsight-systems.list" in drops
    listed = (out / "dpkg" / "info" / "libcudnn9-cuda-12.list").read_text()
    assert "README" not in listed and "copyright" in listed
    sums = (out / "dpkg" / "info" / "libcudnn9-cuda-12.md5sums").read_text()
    assert "README" not in sums and "libcudnn.so.9" in sums
    assert {d["package"] for d in report["dropped"]} == {"libcudnn9-dev-cuda-12", "nsight-systems"}
    assert json.loads((out / "pruned.json").read_text())["keep_tensorrt_builder"] is keep_builder
    assert (out / "required.txt").read_text().splitlines()[0].startswith("libcudnn_ops.so.9\t")


def test_relations_and_stanzas():
    assert prune.parse_relations("a (>= 1) | b, c:any, d [amd64]") == [["a", "b"], ["c"], ["d"]]
    assert prune.parse_stanza("Package: x\nDescription: one\n two\n")["Description"] == "one\n two"
    assert prune.dropped_file("/usr/share/doc/x/copyright", False) is None
    assert prune.dropped_file("/usr/local/cuda-12.6/targets/x86_64-linux/include/cuda.h", False) == "header"
