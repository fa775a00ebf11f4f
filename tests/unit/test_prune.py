"""The keep/drop decision of a pruned base (in_image/prune.py), on a min image in miniature.

Recorded package data (a dpkg status and file lists) and real ELF files: the decision keeps the
distribution's required packages, the packages of what the selection needs and of what the
catalog says it loads by name, what those depend on and need in turn; never a -dev package;
and drops headers, static archives and TensorRT's builder resource from kept packages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer.in_image import elfdeps, prune
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
LOADED: dict = {}  # the catalog adds nothing here: the libraries' own strings name what they load
# What libcudnn.so.9's data holds, as real cuDNN's does: a sub-library without its version (cuDNN
# completes it with its major), a versioned soname, the CUDA driver (never in an image), an
# absolute path the image does not have.
CUDNN_STRINGS = b"\0cudnn: %s\0libcudnn_ops.so\0libnvrtc.so.12\0libcuda.so.1\0/opt/hpcx/absent/libucp.so.0\0"


@pytest.fixture
def image(tmp_path):
    """(root, dpkg dir, resolver, parts): a Triton backend needing cuDNN and TensorRT."""
    system = tmp_path / "lib"
    make_elf(system / "libc.so.6", soname="libc.so.6")
    make_elf(system / "libcudnn.so.9", soname="libcudnn.so.9", needed=["libc.so.6"], rodata=CUDNN_STRINGS)
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
    resolver = elfdeps.Resolver(str(root), [str(system)], [])
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
    assert why["cuda-nvrtc-12-6"].endswith("libcudnn.so.9 names libnvrtc.so.12 (loaded by name)")
    assert "libcudnn_ops.so (loaded by name) -> libfoo.so.1" in why["libfoo1"]
    assert why["libbar1"] == "libfoo1 depends on it"


def test_named_libraries_are_required_by_path_and_the_rest_listed_as_not_in_the_image(image):
    root, _, _, _ = image
    keeper = decide(image)
    lib = root.parents[1] / "lib"
    assert [library for library, _ in keeper.required] == [str(lib / "libcudnn_ops.so.9"), str(lib / "libnvrtc.so.12")]
    assert sorted(library for library, _ in keeper.not_in_image) == ["/opt/hpcx/absent/libucp.so.0", "libcuda.so.1"]


def test_the_catalog_adds_what_strings_cannot_show(image):
    root, _, _, _ = image
    keeper = decide(image, loaded={"libnvinfer.so.10": ["libbar.so.1"]})
    assert keeper.why["libbar1"].endswith("libnvinfer.so.10 loads libbar.so.1 at run time (catalog)")
    assert str(root.parents[1] / "lib" / "libbar.so.1") in [library for library, _ in keeper.required]


def test_the_string_reader_finds_sonames_versioned_names_and_paths(tmp_path):
    data = (b"\0libcudnn_graph.so\0x libnvrtc-builtins.so.12.6. y\0/opt/hpcx/ucx/lib/libucp.so.0\0"
            b"libnvrtc.so.%d\0not a library: libfoo\0liba.so.1.txt\0relative/libx.so.1\0")
    path = make_elf(tmp_path / "libdemo.so.1", soname="libdemo.so.1", rodata=data)
    assert elfdeps.named_libraries(str(path)) == ["/opt/hpcx/ucx/lib/libucp.so.0", "libcudnn_graph.so",
                                                "libnvrtc-builtins.so.12.6"]
    assert elfdeps.named_libraries(str(make_elf(tmp_path / "plain.so"))) == []  # no section table
    assert elfdeps.named_libraries(str(tmp_path / "absent.so")) == []


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
    assert (out / "required.txt").read_text().splitlines()[0].startswith(f"/{base}/lib/libcudnn_ops.so.9\t")
    assert sorted(item["library"] for item in report["named_not_in_image"]) == ["/opt/hpcx/absent/libucp.so.0",
                                                                                "libcuda.so.1"]


def test_relations_and_stanzas():
    assert prune.parse_relations("a (>= 1) | b, c:any, d [amd64]") == [["a", "b"], ["c"], ["d"]]
    assert prune.parse_stanza("Package: x\nDescription: one\n two\n")["Description"] == "one\n two"
    assert prune.dropped_file("/usr/share/doc/x/copyright", False) is None
    assert prune.dropped_file("/usr/local/cuda-12.6/targets/x86_64-linux/include/cuda.h", False) == "header"


# What today's catalog listed by hand for 24.09 before the libraries' own strings were read: the
# strings (and the family's short list) must find every one of them.
HAND_LIST_24_09 = {
    "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9", "libcudnn_graph.so.9",
    "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
    "libcublasLt.so.12", "libnvrtc.so.12", "libnvrtc-builtins.so.12.6", "libnvinfer_plugin.so.10",
    "/opt/hpcx/ucx/lib/libucp.so.0", "/opt/hpcx/ucx/lib/libucs.so.0", "/opt/hpcx/ucx/lib/libuct.so.0",
    "/opt/hpcx/ucc/lib/ucc",
}


def test_the_24_09_libraries_strings_find_every_library_of_the_old_hand_list(tmp_path):
    """Recorded from the 24.09 NGC-scale stand-ins (real cuDNN, cuBLAS, NVRTC and libtorch wheels):
    each library's soname, NEEDED entries, RUNPATH, the names its data holds, its package. The
    files are made again in miniature and the decision runs on them."""
    from composer.catalog.catalog import Catalog

    recorded = json.loads((Path(__file__).parent / "data" / "named-libraries-24.09.json").read_text())
    top = tmp_path / "image"

    def here(path: str) -> str:
        return str(top) + path

    owners: dict[str, list[str]] = {}
    for item in recorded["files"]:
        real = Path(here(item["path"]))
        make_elf(real, needed=item["needed"], soname=item["soname"], runpath=":".join(item["runpath"]) or None,
                 rodata=b"\0" + b"\0".join(n.encode() for n in item["named"]) + b"\0")
        for link in item["links"]:
            (real.parent / link).symlink_to(real.name)
        if item["package"]:
            owners.setdefault(item["package"], []).extend(
                [str(real)] + [str(real.parent / link) for link in item["links"]])
    hpcx = [here(p) for p in ("/opt/hpcx/ucx/lib/libucp.so.0", "/opt/hpcx/ucx/lib/libucs.so.0",
                              "/opt/hpcx/ucx/lib/libuct.so.0")]
    for path in hpcx:
        make_elf(Path(path), soname=Path(path).name)
    (top / "opt/hpcx/ucc/lib/ucc").mkdir(parents=True)
    owners["hpcx"] = hpcx + [here("/opt/hpcx/ucc/lib/ucc")]
    dpkg = tmp_path / "dpkg"
    (dpkg / "info").mkdir(parents=True)
    (dpkg / "status").write_text("\n".join(f"Package: {name}\nStatus: install ok installed\nPriority: optional\n"
                                           f"Architecture: amd64\n" for name in owners))
    for name, paths in owners.items():
        (dpkg / "info" / f"{name}.list").write_text("".join(p + "\n" for p in paths))

    root = top / "opt" / "tritonserver"
    seed = make_elf(root / "backends" / "demo" / "libtriton_demo.so", needed=["libcudnn.so.9", "libnvinfer.so.10"])
    parts = [("backend demo", [str(seed)]),
             ("backend pytorch", [here("/opt/tritonserver/backends/pytorch/libtorch_cuda.so")])]
    catalog = Catalog.load()
    loaded = {library: [here(p) if p.startswith("/") else p for p in loads]
              for library, loads in catalog.loaded_at_run_time_for(catalog.release("24.09")).items()}
    resolver = elfdeps.Resolver(str(root), [here(d) for d in recorded["system_dirs"]],
                              [here(d) for d in recorded["ld_library_path"]])
    keeper = prune.decide(prune.Database(str(dpkg)), resolver, str(root), parts, loaded, False,
                          ["backends/demo", "backends/pytorch"])
    found = {library[len(str(top)):] if library.startswith(here("/opt/hpcx")) else Path(library).name
             for library, _ in keeper.required}
    assert HAND_LIST_24_09 <= found, sorted(HAND_LIST_24_09 - found)
    assert {"libcudnn9-cuda-12", "libcublas-12-6", "cuda-nvrtc-12-6", "libnvinfer-plugin10", "hpcx"} <= set(keeper.why)
    assert "libcuda.so.1" in {library for library, _ in keeper.not_in_image}  # the driver: named, never in an image


def test_a_distributions_commands_name_the_interpreter_it_keeps(tmp_path):
    """A pip-installed command's #! line names the interpreter (kept with --python); a link, a
    relative or missing interpreter and a file with no #! line name none."""
    interpreter = tmp_path / "python3.11"
    interpreter.write_bytes(b"\x7fELF")
    script = tmp_path / "normalizer"
    script.write_bytes(b"#!" + bytes(interpreter) + b" -s\nimport sys\n")
    (tmp_path / "relative").write_bytes(b"#!python3\n")
    (tmp_path / "missing").write_bytes(b"#!/nowhere/python3\n")
    (tmp_path / "module.py").write_bytes(b"import os\n")
    (tmp_path / "link").symlink_to(script)
    files = [str(p) for p in sorted(tmp_path.iterdir())]
    assert prune.interpreters(files) == [(str(script), str(interpreter))]


def test_entries_unresolved_before_pruning_are_listed_for_the_proof(image, tmp_path):
    """unresolved.txt names each file of the selection with the NEEDED entries it cannot resolve in
    the full image already (a test binary with no RUNPATH to its libraries); files that resolve
    are not listed."""
    root, _, resolver, parts = image
    shim = root / "backends" / "demo" / "bin" / "test_shim"
    make_elf(shim, needed=["libtorch.so", "libc.so.6", "libc10.so"])
    out = tmp_path / "out"
    out.mkdir()
    assert prune.write_unresolved(str(out), resolver, str(root), parts + [("backend demo", [str(shim)])]) == 1
    assert (out / "unresolved.txt").read_text() == f"{shim}\tlibtorch.so,libc10.so\n"
