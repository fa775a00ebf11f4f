"""The NGC-scale stand-in recipe's host-side parts: NGC's file names, the .debs and their apt
index (real dpkg-deb), the min template, and the collector's report of NVIDIA libraries."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest

from composer.in_image import collect
from triton_standins import debs, ngc, templates
from triton_standins import ngc_packages as pkgs


def test_wheel_libraries_get_ngcs_versioned_names_and_soname_links():
    assert pkgs.versioned("nvidia/cublas/lib/libcublasLt.so.12", "12.6.3.3") == ("libcublasLt.so.12.6.3.3", "libcublasLt.so.12")
    assert pkgs.versioned("nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.6", "12.6.68") == (
        "libnvrtc-builtins.so.12.6.68", "libnvrtc-builtins.so.12.6")
    assert pkgs.versioned("nvidia/cuda_cupti/lib/libnvperf_host.so", None) == ("libnvperf_host.so", None)


@pytest.mark.parametrize("release", sorted(pkgs.RECIPES))
def test_every_package_is_installed_by_one_layer_none_too_large(release):
    recipe = pkgs.RECIPES[release]
    names = [p for layer in ngc.layers(recipe) for p in layer.packages]
    assert len(names) == len(set(names))
    for family in recipe.families:
        assert family.runtime in names and family.dev in names
    assert {"libnvinfer10", "libnvinfer-plugin10", "libnvonnxparsers10"} <= set(names)


def test_each_release_has_its_own_cuda_generation():
    old, new = pkgs.RECIPES["24.09"], pkgs.RECIPES["26.07"]
    assert old.cudart_member.endswith("libcudart.so.12") and old.cudart.runtime == "cuda-cudart-12-6"
    assert new.cudart_member.endswith("libcudart.so.13") and new.cudart.runtime == "cuda-cudart-13-0"
    assert new.check_libraries()[:2] == ("libcudart.so.13", "libcublasLt.so.13")
    assert "tensorflow" in dict(old.size_standins) and "tensorflow" not in dict(new.size_standins)  # gone after 25.03
    assert new.tensorrt.files()[0][0] == "libnvinfer.so.10.13.3" and new.tensorrt.depends == "libcudnn9-cuda-13"
    # Each release's data shapes only its own image.
    assert ngc.recipe_digest("sha256:x", old) != ngc.recipe_digest("sha256:x", new)


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian hosts)")
def test_debs_are_packed_indexed_and_served_on_loopback(tmp_path):
    root = tmp_path / "root"
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/libdemo.so.1").write_bytes(b"\0" * 5000)
    repo = tmp_path / "repo"
    repo.mkdir()
    deb = debs.build_deb(root, debs.Control("libdemo1", "1.0-1", "demo", depends=("libc6",), ldconfig=True), repo)
    fields = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "Package: libdemo1" in fields and "Installed-Size: 5" in fields and "Depends: libc6" in fields
    debs.write_index(repo)
    index = (repo / "Packages").read_text()
    assert f"Filename: ./{deb.name}" in index and f"Size: {deb.stat().st_size}" in index
    with debs.served(repo) as source:
        assert source.startswith("deb [trusted=yes] http://127.0.0.1:")
        url = source.split()[2]
        assert urllib.request.urlopen(url + "Packages").read().decode() == index


@pytest.mark.parametrize("release, cuda_version, cudart", [("24.09", "12.6.1", "libcudart.so.12"),
                                                            ("26.07", "13.0.2", "libcudart.so.13")])
def test_min_template_installs_each_layer_and_checks_for_driver_libraries(release, cuda_version, cudart):
    recipe = pkgs.RECIPES[release]
    text = templates().get_template("standin-ngc-min.Dockerfile.j2").render(
        release=release, small_min="sha256:abc", apt_source="deb [trusted=yes] http://127.0.0.1:1/ ./",
        layers=ngc.layers(recipe), labels={"a": "b"}, env=recipe.env, cuda=recipe.cuda,
        check_libraries=recipe.check_libraries())
    assert text.count("apt-get install") == len(ngc.layers(recipe))
    assert f"CUDA_VERSION={cuda_version}" in text and "libcuda.so*" in text and "/var/cache/apt/archives/*.deb" in text
    assert f"/usr/local/cuda-{recipe.cuda}/targets/x86_64-linux/lib/{cudart}" in text


def test_collector_names_nvidia_libraries_per_backend_and_where_they_come_from(tmp_path):
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libcudnn.so.9", "libcudnn_ops.so.9", "libgomp.so.1"):
        (lib / name).write_bytes(b"x")
    info = tmp_path / "info"
    info.mkdir()
    (info / "libcudnn9-cuda-12.list").write_text(f"{lib}/libcudnn.so.9\n{lib}/libcudnn_ops.so.9\n")
    need = {"soname": "libcudnn.so.9", "path": str(lib / "libcudnn.so.9")}
    report = {"components": [
        {"kind": "backend", "name": "pytorch", "needs": [need, {"soname": "libgomp.so.1", "path": str(lib / "libgomp.so.1")}],
         "bundled": ["/opt/tritonserver/backends/pytorch/libcusparseLt-1.so.0", "/x/libtorch.so"], "plugins": []},
        {"kind": "backend", "name": "identity", "needs": [need], "bundled": [], "plugins": []},
    ]}
    reach = collect.nvidia_reach(report, ["backends/pytorch", "bin"], {"libcudnn.so.9"}, collect.Packages(str(info)))
    assert list(reach) == ["backend pytorch"]  # only what was selected
    items = {item["library"]: item for item in reach["backend pytorch"]}
    assert set(items) == {"libcudnn.so.9", "libcudnn_ops.so.9", "libcusparseLt-1.so.0"}
    assert items["libcudnn.so.9"]["from"] == "min image" and items["libcudnn.so.9"]["package"] == "libcudnn9-cuda-12"
    assert items["libcudnn_ops.so.9"]["loaded_by_name_with"] == "libcudnn.so.9"
    assert items["libcusparseLt-1.so.0"]["from"] == "backend folder"
