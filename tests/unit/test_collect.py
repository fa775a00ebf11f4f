"""The collector (runs inside the full image): what it copies for C backends, from fake trees.

System libraries come from ELF needs, libraries loaded at run time from the dpkg package of
each system library taken, driver libraries never; a library found nowhere fails the build.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer.in_image import collect, elfdeps
from tests.unit.test_probe import make_elf


@pytest.fixture
def image(tmp_path, monkeypatch):
    """A full image in miniature: a Triton tree with one C backend, a system folder, dpkg lists."""
    root = tmp_path / "opt" / "tritonserver"
    system = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    info = tmp_path / "var" / "lib" / "dpkg" / "info"
    info.mkdir(parents=True)
    make_elf(root / "bin" / "tritonserver", needed=["libtritonserver.so"], runpath="$ORIGIN/../lib", etype=2)
    make_elf(root / "lib" / "libtritonserver.so", soname="libtritonserver.so")
    backend = root / "backends" / "demo"
    make_elf(backend / "libtriton_demo.so", runpath="$ORIGIN",
             needed=["libdemo_util.so", "libgomp.so.1", "libcuda.so.1", "libtritonserver.so"])
    make_elf(backend / "libdemo_util.so", soname="libdemo_util.so")
    make_elf(backend / "libdemo_plugin.so", needed=["libgomp.so.1"])  # dlopen'd: nobody needs it
    # libgomp1 ships one library; libdcgm's package also ships modules that libdcgm dlopens.
    make_elf(system / "libgomp.so.1.0.0", soname="libgomp.so.1")
    (system / "libgomp.so.1").symlink_to("libgomp.so.1.0.0")
    make_elf(system / "libdcgm.so.4", soname="libdcgm.so.4")
    make_elf(system / "libdcgmmodulehealth.so.4", soname="libdcgmmodulehealth.so.4", needed=["libdcgmextra.so.1"])
    make_elf(system / "libdcgmmodulebroken.so.4", needed=["libgone.so.9"])
    make_elf(system / "libdcgmextra.so.1", soname="libdcgmextra.so.1")
    (system / "dcgm.h").write_text("/* header */\n")
    (system / "libdcgm.a").write_bytes(b"!<arch>\n")
    listing = {
        "libgomp1:amd64": ["libgomp.so.1.0.0", "libgomp.so.1"],
        "datacenter-gpu-manager:amd64": [
            "libdcgm.so.4", "libdcgmmodulehealth.so.4", "libdcgmmodulebroken.so.4", "dcgm.h", "libdcgm.a"],
        "libdcgmextra1": ["libdcgmextra.so.1"],
        "libdcgm-dev:amd64": ["libdcgm.so.4"],
    }
    for package, names in listing.items():
        lines = [str(system)] + [str(system / n) for n in names] + ["/usr/share/doc/" + package]
        (info / f"{package}.list").write_text("\n".join(["/.", *lines]) + "\n")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(system))
    return root, system, info


def run_collect(image, tmp_path, *paths, capsys=None):
    root, _system, info = image
    out = tmp_path / "composer" / "rootfs"
    code = collect.main(["collect.py", "--root", str(root), "--min-ld-cache", str(tmp_path / "no-cache"),
                         "--dpkg-info", str(info), "--out", str(out), *paths])
    report = None
    if (out.parent / "collected.json").is_file():
        report = json.loads((out.parent / "collected.json").read_text())
    return code, out, report


def copied(out: Path) -> set[str]:
    return {"/" + str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() or p.is_symlink()}


def test_driver_libraries_are_recognised():
    for name in ("libcuda.so.1", "libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
                 "libcudadebugger.so.1", "libnvcuvid.so.1", "libEGL_nvidia.so.0"):
        assert collect.is_driver_library(name), name
    for name in ("libcudart.so.12", "libcudnn.so.9", "libnvinfer.so.10", "libgomp.so.1", "libnvrtc.so.12"):
        assert not collect.is_driver_library(name), name


def test_package_index_finds_owners_and_runtime_libraries_only(image):
    _root, system, info = image
    packages = collect.Packages(str(info))
    assert packages.package_of(str(system / "libgomp.so.1")) == "libgomp1:amd64"
    assert packages.package_of(str(system / "libdcgm.so.4")) == "datacenter-gpu-manager:amd64"
    assert packages.package_of("/usr/lib/x86_64-linux-gnu/unknown.so") is None
    libs = packages.runtime_libraries("datacenter-gpu-manager:amd64")
    assert libs == sorted(str(system / n) for n in ("libdcgm.so.4", "libdcgmmodulebroken.so.4", "libdcgmmodulehealth.so.4"))
    assert packages.runtime_libraries("libdcgm-dev:amd64") == []  # never from a -dev package
    assert packages.runtime_libraries(None) == []


def test_package_index_follows_merged_usr(tmp_path):
    """dpkg lists /lib/... on merged-/usr systems; the loader finds /usr/lib/...: same file."""
    real = tmp_path / "usr" / "lib"
    make_elf(real / "libz.so.1", soname="libz.so.1")
    (tmp_path / "lib").symlink_to("usr/lib")
    info = tmp_path / "info"
    info.mkdir()
    (info / "zlib1g:amd64.list").write_text(f"{tmp_path / 'lib'}\n{tmp_path / 'lib' / 'libz.so.1'}\n")
    packages = collect.Packages(str(info))
    assert packages.package_of(str(real / "libz.so.1")) == "zlib1g:amd64"
    assert packages.runtime_libraries("zlib1g:amd64") == [str(real / "libz.so.1")]


def test_gather_takes_package_siblings_with_their_needs_and_skips_unloadable_ones(image):
    root, system, info = image
    resolver = elfdeps.Resolver(str(root), [str(system)], [])
    packages = collect.Packages(str(info))
    need = resolver.need("libdcgm.so.4", str(system / "libdcgm.so.4"))
    gomp = resolver.need("libgomp.so.1", str(system / "libgomp.so.1"))
    cuda = {"soname": "libcuda.so.1", "path": "/usr/lib/libcuda.so.1", "realpath": "/usr/lib/libcuda.so.1",
            "size": 1, "links": []}
    system_libs, siblings, drivers, skipped = collect.gather([need, gomp, cuda], set(), resolver, packages, str(root))
    assert sorted(n["realpath"] for n in system_libs) == [str(system / "libdcgm.so.4"), str(system / "libgomp.so.1.0.0")]
    assert {n["realpath"]: (n["package"], n["for"]) for n in siblings} == {
        str(system / "libdcgmmodulehealth.so.4"): ("datacenter-gpu-manager:amd64", "libdcgm.so.4"),
        # what a module needs comes too, from its own package
        str(system / "libdcgmextra.so.1"): ("libdcgmextra1", "libdcgm.so.4"),
    }
    assert [s["path"] for s in skipped] == [str(system / "libdcgmmodulebroken.so.4")]
    assert "libgone.so.9" in skipped[0]["reason"]
    assert drivers == ["libcuda.so.1"]


def test_gather_leaves_what_the_min_image_has(image):
    root, system, info = image
    resolver = elfdeps.Resolver(str(root), [str(system)], [])
    need = resolver.need("libdcgm.so.4", str(system / "libdcgm.so.4"))
    present = {"libdcgm.so.4"}
    assert collect.gather([need], present, resolver, collect.Packages(str(info)), str(root)) == ([], [], [], [])


def test_collect_copies_system_libraries_and_reports_every_kind(image, tmp_path, capsys):
    root, system, _info = image
    code, out, report = run_collect(image, tmp_path, "bin", "lib", "backends/demo")
    assert code == 0, capsys.readouterr().err
    # The system library and the name the loader looks for; nothing of the backend folder
    # (the final stage copies it whole), no driver library.
    assert copied(out) == {str(system / "libgomp.so.1.0.0"), str(system / "libgomp.so.1"), str(root / "collected.json")}
    folder = str(root / "backends" / "demo")
    assert report["system"] == [{"path": str(system / "libgomp.so.1.0.0"), "soname": "libgomp.so.1",
                                 "package": "libgomp1:amd64", "size": report["system"][0]["size"]}]
    assert report["bundled"] == {"backend demo": [folder + "/libdemo_util.so"]}
    assert report["plugins"] == {"backend demo": [folder + "/libdemo_plugin.so"]}
    assert report["drivers"] == ["libcuda.so.1"]
    assert report["package_siblings"] == [] and report["missing"] == []
    assert json.loads((out / str(root / "collected.json").lstrip("/")).read_text()) == report
    log = capsys.readouterr().out
    assert "system  " + str(system / "libgomp.so.1.0.0") in log
    assert "bundled " + folder + "/libdemo_util.so" in log
    assert "dlopen  " + folder + "/libdemo_plugin.so" in log
    assert "libcuda.so.1" in log


def test_a_library_found_nowhere_fails_the_build_naming_it(image, tmp_path, capsys):
    root, _system, _info = image
    make_elf(root / "backends" / "demo" / "libdemo_util.so", soname="libdemo_util.so", needed=["libabsent.so.3"])
    code, _out, report = run_collect(image, tmp_path, "bin", "lib", "backends/demo")
    assert code == 4 and report is None
    err = capsys.readouterr().err
    assert "backend demo needs libabsent.so.3" in err and "libcuda" not in err
