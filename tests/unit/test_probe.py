"""The in-image probe: ELF reading, $ORIGIN, and the loader-like closure on fake trees."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from composer.in_image import elfdeps, probe
from composer.resolve import contents

HOST_LIB_DIRS = [d for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                              "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib") if os.path.isdir(d)]
MACHINE = {"x86_64": 62, "aarch64": 183}.get(os.uname().machine, 62)


def make_elf(path: Path, needed=(), soname=None, rpath=None, runpath=None, machine=MACHINE, etype=3,
             rodata: bytes = b"") -> Path:
    """Write a minimal 64-bit little-endian ELF object with just a dynamic section (and, given
    `rodata`, a .rodata section holding it, found through a section header table)."""
    strtab = b"\0"
    offsets = {}
    for text in list(needed) + [t for t in (soname, rpath, runpath) if t]:
        if text not in offsets:
            offsets[text] = len(strtab)
            strtab += text.encode() + b"\0"
    base, phoff = 0x400000, 64
    str_off = phoff + 2 * 56
    dyn_off = (str_off + len(strtab) + 7) & ~7
    dyn = [(1, offsets[n]) for n in needed]
    dyn += [(tag, offsets[t]) for tag, t in ((14, soname), (15, rpath), (29, runpath)) if t]
    dyn += [(5, base + str_off), (10, len(strtab)), (0, 0)]
    dyn_bytes = b"".join(struct.pack("<qQ", t, v) for t, v in dyn)
    total = dyn_off + len(dyn_bytes)
    sections = b""
    shoff = shnum = shstrndx = 0
    if rodata:
        names = b"\0.shstrtab\0.rodata\0"
        names_off, rodata_off = total, total + len(names)
        shoff = (rodata_off + len(rodata) + 7) & ~7
        shnum, shstrndx = 3, 1
        sections = bytes(64)
        sections += struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, names_off, len(names), 0, 0, 1, 0)
        sections += struct.pack("<IIQQQQIIQQ", 11, 1, 2, base + rodata_off, rodata_off, len(rodata), 0, 0, 1, 0)
        tail = names + rodata + bytes(shoff - rodata_off - len(rodata)) + sections
    else:
        tail = b""
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", etype, machine, 1, 0, phoff, shoff, 0, 64, 56, 2, 64, shnum, shstrndx)
    phdrs = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)
    phdrs += struct.pack("<IIQQQQQQ", 2, 6, dyn_off, base + dyn_off, base + dyn_off, len(dyn_bytes), len(dyn_bytes), 8)
    data = header + phdrs + strtab
    data += bytes(dyn_off - len(data)) + dyn_bytes + tail
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- the ELF reader -----------------------------------------------------------


def test_reads_needed_of_a_host_binary():
    info = elfdeps.read_elf("/bin/ls")
    assert info is not None
    assert "libc.so.6" in info.needed
    assert info.machine == MACHINE


def test_reads_soname_of_a_host_library():
    libc = next(Path(d) / "libc.so.6" for d in HOST_LIB_DIRS if (Path(d) / "libc.so.6").exists())
    info = elfdeps.read_elf(str(libc))
    assert info.soname == "libc.so.6"


def test_reads_python_extension_modules():
    dynloads = [Path(p) for p in sys.path if p.endswith("lib-dynload")]
    modules = sorted(m for d in dynloads for m in d.glob("*.so"))
    if not modules:
        pytest.skip("this python has no lib-dynload modules")
    infos = [elfdeps.read_elf(str(m)) for m in modules]
    assert all(i is not None for i in infos)
    ssl = [i for m, i in zip(modules, infos) if m.name.startswith("_ssl.")]
    if ssl:
        assert "libssl.so.3" in ssl[0].needed or any(n.startswith("libssl") for n in ssl[0].needed)


def test_non_elf_and_truncated_files_are_skipped(tmp_path):
    text = tmp_path / "model.py"
    text.write_text("print('hi')\n")
    assert elfdeps.read_elf(str(text)) is None
    assert elfdeps.read_elf(str(tmp_path / "absent.so")) is None
    real = Path("/bin/ls").read_bytes()
    for cut in (10, 64, 200, len(real) // 3):
        short = tmp_path / f"short{cut}"
        short.write_bytes(real[:cut])
        elfdeps.read_elf(str(short))  # must not raise
    assert elfdeps.read_elf(str(tmp_path / "short10")) is None


def test_32_bit_elf_is_skipped(tmp_path):
    obj = tmp_path / "lib32.so"
    obj.write_bytes(b"\x7fELF" + bytes([1, 1, 1]) + bytes(57))
    assert elfdeps.read_elf(str(obj)) is None


def test_synthetic_elf_round_trip(tmp_path):
    obj = make_elf(tmp_path / "libx.so", needed=["liba.so.1", "libb.so.2"], soname="libx.so",
                   rpath="$ORIGIN:/opt/x", runpath=None)
    info = elfdeps.read_elf(str(obj))
    assert info.needed == ["liba.so.1", "libb.so.2"]
    assert info.soname == "libx.so"
    assert info.rpath == ["$ORIGIN", "/opt/x"]
    assert info.runpath == []


# -- $ORIGIN and search order --------------------------------------------------


def test_expand_origin():
    assert elfdeps.expand_origin("$ORIGIN/../lib", "/opt/t/bin") == "/opt/t/lib"
    assert elfdeps.expand_origin("${ORIGIN}/x", "/a") == "/a/x"
    assert elfdeps.expand_origin("/abs/dir/", "/a") == "/abs/dir"
    assert elfdeps.expand_origin("$PLATFORM/x", "/a") is None


def test_symlink_chain_through_an_alternatives_folder(tmp_path):
    make_elf(tmp_path / "real" / "libblas.so.3.11.0")
    (tmp_path / "alt").mkdir()
    (tmp_path / "alt" / "libblas.so.3").symlink_to(tmp_path / "real" / "libblas.so.3.11.0")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libblas.so.3").symlink_to("../alt/libblas.so.3")
    assert elfdeps.symlink_chain(str(tmp_path / "lib" / "libblas.so.3")) == [
        str(tmp_path / "lib" / "libblas.so.3"), str(tmp_path / "alt" / "libblas.so.3")]
    assert elfdeps.symlink_chain(str(tmp_path / "real" / "libblas.so.3.11.0")) == []


def test_loader_and_vdso_are_not_needs():
    assert elfdeps.is_loader("ld-linux-x86-64.so.2")
    assert elfdeps.is_loader("/lib64/ld-linux-x86-64.so.2")
    assert elfdeps.is_loader("ld-linux-aarch64.so.1")
    assert not elfdeps.is_loader("libc.so.6")


def test_ld_so_conf_with_includes(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "b.conf").write_text("/opt/b\n")
    (tmp_path / "conf.d" / "a.conf").write_text("# comment\n/opt/a  # trailing\n")
    main = tmp_path / "ld.so.conf"
    main.write_text(f"include {tmp_path}/conf.d/*.conf\n/usr/local/lib\n")
    assert elfdeps.parse_ld_so_conf(str(main)) == ["/opt/a", "/opt/b", "/usr/local/lib"]


def test_rpath_before_ld_library_path_before_runpath(tmp_path):
    make_elf(tmp_path / "r" / "libdep.so.1", soname="libdep.so.1")
    make_elf(tmp_path / "env" / "libdep.so.1", soname="libdep.so.1")
    with_rpath = make_elf(tmp_path / "x" / "librp.so", needed=["libdep.so.1"], rpath=str(tmp_path / "r"))
    with_runpath = make_elf(tmp_path / "x" / "librun.so", needed=["libdep.so.1"], runpath=str(tmp_path / "r"))
    resolver = elfdeps.Resolver(str(tmp_path / "root"), [], [str(tmp_path / "env")])
    assert resolver.deps(str(with_rpath)) == [("libdep.so.1", str(tmp_path / "r" / "libdep.so.1"))]
    assert resolver.deps(str(with_runpath)) == [("libdep.so.1", str(tmp_path / "env" / "libdep.so.1"))]


def test_wrong_machine_candidates_are_skipped(tmp_path):
    make_elf(tmp_path / "other" / "libdep.so.1", machine=183 if MACHINE == 62 else 62)
    make_elf(tmp_path / "good" / "libdep.so.1")
    user = make_elf(tmp_path / "libuser.so", needed=["libdep.so.1"])
    resolver = elfdeps.Resolver("/nonexistent", [str(tmp_path / "other"), str(tmp_path / "good")], [])
    assert resolver.deps(str(user)) == [("libdep.so.1", str(tmp_path / "good" / "libdep.so.1"))]


# -- the closure on a fake Triton tree ------------------------------------------


def host_lib(name: str) -> Path:
    for d in HOST_LIB_DIRS:
        if (Path(d) / name).exists():
            return Path(d) / name
    pytest.skip(f"{name} is not on this host")


@pytest.fixture
def fake_image(tmp_path):
    """A fake image: /opt/tritonserver with real host binaries and synthetic objects, and a system dir."""
    root = tmp_path / "opt" / "tritonserver"
    system = tmp_path / "usr" / "lib"
    system.mkdir(parents=True)
    # System libraries: a real libz, and a symlinked synthetic libfoo with a transitive need.
    shutil.copy(host_lib("libz.so.1"), system / "libz.so.1.2.99")
    (system / "libz.so.1").symlink_to("libz.so.1.2.99")
    make_elf(system / "libbar.so.3", soname="libbar.so.3", needed=["libc.so.6"])
    make_elf(system / "libfoo.so.2.0.1", soname="libfoo.so.2", needed=["libbar.so.3", "ld-linux-x86-64.so.2"])
    (system / "libfoo.so.2").symlink_to("libfoo.so.2.0.1")
    shutil.copy(host_lib("libc.so.6"), system / "libc.so.6")
    # Core: a real binary (needs libc) and libtritonserver.so (needs libz through the system).
    make_elf(root / "bin" / "tritonserver", needed=["libtritonserver.so", "libc.so.6"], runpath="$ORIGIN/../lib", etype=2)
    make_elf(root / "lib" / "libtritonserver.so", soname="libtritonserver.so", needed=["libz.so.1"])
    (root / "include" / "triton").mkdir(parents=True)
    (root / "include" / "triton" / "core.h").write_text("x" * 1000)
    (root / "LICENSE").write_text("license\n")
    (root / "TRITON_VERSION").write_text("2.50.0\n")
    # Backends: native with a bundled runtime (RUNPATH $ORIGIN), one without any RPATH relying
    # on a sibling, python with its stub, a Python-based one, and a cache.
    make_elf(root / "backends" / "onnxruntime" / "libtriton_onnxruntime.so",
             needed=["libonnxruntime.so.1", "libtritonserver.so"], runpath="$ORIGIN")
    make_elf(root / "backends" / "onnxruntime" / "libonnxruntime.so.1", soname="libonnxruntime.so.1",
             needed=["libfoo.so.2", "libnothere.so.7"])
    make_elf(root / "backends" / "onnxruntime" / "site" / "ext.so", needed=["libonnxruntime.so.1"])
    make_elf(root / "backends" / "python" / "libtriton_python.so", needed=["libz.so.1"])
    make_elf(root / "backends" / "python" / "triton_python_backend_stub",
             needed=["libpython3.99.so.1.0", "libc.so.6"], etype=2)
    (root / "backends" / "vllm").mkdir(parents=True)
    (root / "backends" / "vllm" / "model.py").write_text("class TritonPythonModel: pass\n")
    make_elf(root / "caches" / "local" / "libtritoncache_local.so", needed=["libc.so.6"])
    make_elf(root / "repoagents" / "checksum" / "libtritonrepoagent_checksum.so", needed=[])
    return root, system


def run_probe(root, system, python=False):
    return probe.probe(str(root), system_dirs=[str(system)], ld_library_path=[], python=python)


def test_core_paths_sizes_and_needs(fake_image):
    root, system = fake_image
    report = run_probe(root, system)
    core = report["core"]
    assert core["paths"] == [str(root / p) for p in ("bin", "lib", "LICENSE", "TRITON_VERSION", "include")]
    assert core["include_size"] == 1000
    expected = sum(os.lstat(p).st_size for p in [root / "bin" / "tritonserver", root / "lib" / "libtritonserver.so",
                                                  root / "LICENSE", root / "TRITON_VERSION"])
    assert core["size"] == expected
    needs = {n["soname"]: n for n in core["needs"]}
    assert set(needs) == {"libz.so.1", "libc.so.6"}
    assert needs["libz.so.1"]["path"] == str(system / "libz.so.1")
    assert needs["libz.so.1"]["realpath"] == str(system / "libz.so.1.2.99")
    assert needs["libz.so.1"]["size"] == os.path.getsize(system / "libz.so.1.2.99")
    assert core["missing"] == []


def test_components_are_listed_sorted_with_their_needs(fake_image):
    root, system = fake_image
    report = run_probe(root, system)
    keys = [(c["kind"], c["name"]) for c in report["components"]]
    assert keys == [("backend", "onnxruntime"), ("backend", "python"), ("backend", "vllm"),
                    ("cache", "local"), ("repoagent", "checksum")]
    comps = {c["name"]: c for c in report["components"]}
    ort = comps["onnxruntime"]
    assert ort["library"] == "libtriton_onnxruntime.so"
    assert not ort["python_based"] and ort["requires"] == []
    # transitive through the system: libfoo -> libbar -> libc; the loader is skipped;
    # libtritonserver.so is the core's, not reported.
    assert [n["soname"] for n in ort["needs"]] == ["libbar.so.3", "libc.so.6", "libfoo.so.2"]
    assert ort["missing"] == ["libnothere.so.7"]
    foo = next(n for n in ort["needs"] if n["soname"] == "libfoo.so.2")
    assert foo["path"] == str(system / "libfoo.so.2") and foo["realpath"] == str(system / "libfoo.so.2.0.1")
    assert foo["links"] == [str(system / "libfoo.so.2")]
    vllm = comps["vllm"]
    assert vllm["python_based"] and vllm["library"] is None and vllm["requires"] == ["python"]
    assert comps["local"]["library"] == "libtritoncache_local.so"
    assert comps["checksum"]["library"] == "libtritonrepoagent_checksum.so"


def test_stub_python_without_that_python_reports_libpython_missing(fake_image):
    root, system = fake_image
    report = run_probe(root, system)
    assert report["stub_python"] == "3.99"
    python_backend = next(c for c in report["components"] if c["name"] == "python")
    assert "libpython3.99.so.1.0" in python_backend["missing"]
    assert report["python"] is None  # python=False in run_probe


def test_python_falls_back_to_python3_when_the_stub_version_is_absent(fake_image):
    root, system = fake_image
    report = probe.probe(str(root), system_dirs=elfdeps.default_system_dirs(), ld_library_path=[])
    py = report["python"]
    assert py is not None
    assert py["version"] == "%d.%d" % sys.version_info[:2]
    assert report["stub_python"] == "3.99"
    json.dumps(report)


def test_python_runtime_of_this_interpreter(tmp_path):
    root = tmp_path / "opt" / "tritonserver"
    version = "%d.%d" % sys.version_info[:2]
    make_elf(root / "backends" / "python" / "triton_python_backend_stub", needed=[f"libpython{version}.so.1.0"], etype=2)
    report = probe.probe(str(root), system_dirs=elfdeps.default_system_dirs(), ld_library_path=[])
    assert report["stub_python"] == version
    py = report["python"]
    assert py["version"] == version
    assert os.path.isdir(py["stdlib"])
    assert py["size"] > 0
    assert py["libpython"] == f"libpython{version}.so.1.0"
    sonames = {n["soname"] for n in py["needs"]}
    assert "libc.so.6" in sonames
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        assert f"libpython{version}.so.1.0" in sonames
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None and py["numpy"] is not None:
        assert py["numpy"]["version"] == numpy.__version__
        assert any(p.endswith("/numpy") for p in py["numpy"]["paths"])


def test_unit_local_sibling_stands_in_for_an_already_loaded_library(tmp_path):
    root = tmp_path / "opt" / "tritonserver"
    folder = root / "backends" / "pytorch"
    make_elf(folder / "libtriton_pytorch.so", needed=["libtorch.so"], runpath="$ORIGIN")
    make_elf(folder / "libtorch.so", soname="libtorch.so", needed=["libc10.so"], runpath="$ORIGIN")
    make_elf(folder / "libc10.so", soname="libc10.so", needed=["libgomp-abc.so.1"])  # no RPATH
    make_elf(folder / "libgomp-abc.so.1", soname="libgomp-abc.so.1")
    report = probe.probe(str(root), system_dirs=[], ld_library_path=[], python=False)
    comp = report["components"][0]
    assert comp["missing"] == [] and comp["needs"] == []


def test_missing_root_is_an_error(tmp_path):
    report = probe.probe(str(tmp_path / "nope"), system_dirs=[], ld_library_path=[], python=False)
    assert "error" in report


def test_runs_as_a_script_with_only_the_stdlib(fake_image, tmp_path):
    """The probe is copied into the image with its sibling modules only (what resolve copies): it
    must run without the composer package."""
    root, _system = fake_image
    alone = tmp_path / "alone"
    alone.mkdir()
    for path, content in contents.probe_files().items():
        (alone / Path(path).name).write_bytes(content)
    script = alone / Path(contents.PROBE_PATH).name
    out = subprocess.run([sys.executable, "-I", str(script), str(root)], capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout
    doc = json.loads(out)
    assert doc["root"] == str(root)
    assert {c["name"] for c in doc["components"]} >= {"onnxruntime", "python", "vllm"}


def test_folder_libraries_are_bundled_when_needed_and_plugins_otherwise(fake_image):
    root, system = fake_image
    by_name = {c["name"]: c for c in run_probe(root, system)["components"]}
    onnx = by_name["onnxruntime"]
    folder = root / "backends" / "onnxruntime"
    # Found through the backend's RUNPATH $ORIGIN: bundled. Needed by no file: loaded at run time.
    assert onnx["bundled"] == [str(folder / "libonnxruntime.so.1")]
    assert onnx["plugins"] == [str(folder / "site" / "ext.so")]
    # The backend's own library and an executable (the stub) are neither.
    assert by_name["python"]["bundled"] == [] and by_name["python"]["plugins"] == []
