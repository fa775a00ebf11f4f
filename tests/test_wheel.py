"""The built wheel carries its templates, samples and build scripts: install it fresh and render.
It carries nothing of the stand-in images' recipe (their own distribution, standins/)."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd=None):
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, ROOT)
    return next(dist.glob("triton_composer-*.whl"))


def test_wheel_holds_no_c_source_and_no_standin_recipe(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("composer/dockerfiles/") and n.endswith(".j2") for n in names)  # it is the product's
    sources = [n for n in names if n.endswith((".c", ".cc", ".h"))]
    assert not sources, sources
    recipe = [n for n in names if "standin" in n.lower() or n.startswith("triton_standins/")]
    assert not recipe, recipe


def test_wheel_installs_and_renders(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel)

    out = tmp_path / "context"
    run(env_dir / "bin" / "composer", "render", "--offline", "-o", out, "--version", "24.09",
        "-b", "onnxruntime", "-b", "python", cwd=tmp_path)
    dockerfile = (out / "Dockerfile").read_text()
    assert "FROM nvcr.io/nvidia/tritonserver:24.09-py3 AS full" in dockerfile
    assert "/opt/tritonserver/backends/onnxruntime" in dockerfile
    for script in ("collect.py", "probe.py", "elfdeps.py", "record_packages.py"):
        assert (out / script).is_file()
    # Rendered from the installed package, not from this checkout.
    where = run(python, "-c", "import composer, composer.verify.samples as s; print(composer.__file__); "
                "print(len(s.load_samples()))", cwd=tmp_path).stdout.split()
    assert str(env_dir) in where[0] and int(where[1]) >= 4
    # The installed product has no stand-in command and no stand-in module.
    refused = subprocess.run([env_dir / "bin" / "composer", "standin"], capture_output=True, text=True)
    assert refused.returncode == 2 and "No such command 'standin'" in refused.stderr
    assert not list((env_dir / "lib").glob("python*/site-packages/composer/standin"))
