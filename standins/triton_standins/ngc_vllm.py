"""The NGC-scale vLLM stand-in (`triton-standin --scale ngc --flavour vllm`): what NGC's
`YY.MM-vllm-python-py3` holds, built as NGC builds it (TRITON-FACTS section 10).

On the NGC-scale min stand-in: Triton's server core and python backend (the code that lays them
out for the full stand-ins), the real vLLM of the release with torch and every dependency pip
resolves for it, installed into the system python as NGC's build.py does (`pip3 install vllm==`),
the environment build.py sets for this flavour, and a `vllm` backend of our own (a Python-based
backend: backends/vllm/model.py). No padding: the image weighs what those packages weigh.

Containers cannot reach PyPI, so the wheels are downloaded on the host (cached under
host.cache_dir(): a second build downloads nothing) and served to the build on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

from composer.core.errors import BuildFailed, UsageError
from composer.core.progress import LineSink
from composer.engine.interface import Engine, ImageInfo
from composer.catalog.catalog import Release
from triton_standins import host, template_file, templates
from triton_standins import ngc

FLAVOUR = "vllm"
# Release -> the vLLM NGC's vllm image of that release carries (server docs, compatibility.md).
VLLM_OF_RELEASE = {"24.09": "0.5.3.post1"}
# What pip resolves on PyPI today for vLLM 0.5.3.post1 is newer than what NGC installed in
# September 2024; these pins keep `import vllm` working (transformers 4.45 and later changed
# the APIs 0.5.3 imports) and hold the python backend's numpy<2.
CONSTRAINTS = ("transformers==4.44.2", "tokenizers==0.19.1", "numpy<2")
# Dependencies PyPI has only as source archives: built into wheels on the host (pure python).
SDIST_ONLY = ("pyairports",)
# Every manylinux tag the stand-in's glibc (2.36) runs: pip --platform takes exact tags.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
             "manylinux1_x86_64", "linux_x86_64")
# The install in three layers (none near NGC's largest, 4.8 GB): NVIDIA's CUDA wheels, then torch
# and the compiled kernels, then vLLM with everything else.
FIRST_LAYERS = (
    ("NVIDIA's CUDA libraries torch needs", ("nvidia_",)),
    ("torch, Triton (the compiler), xformers, flash-attention", ("torch-", "torchvision-", "triton-", "xformers-",
                                                                   "vllm_flash_attn-")),
)
SITE = f"/usr/local/lib/python{host.PYTHON_VERSION}/dist-packages"
# What NGC's build.py sets for the vllm flavour.
ENVIRONMENT = (
    ("LD_LIBRARY_PATH", f"{SITE}/torch/lib${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}"),
    ("TRITON_PTXAS_PATH", "/usr/local/cuda/bin/ptxas"),
    ("TRITON_CUDART_PATH", "/usr/local/cuda/include"),
)
# A fixed port, so the rendered Dockerfile (and the build cache) is the same from run to run.
PORT = 38497


def flavour_ref(release: Release) -> str:
    return f"{ngc.REGISTRY}/tritonserver:{release.name}-{FLAVOUR}-python-py3"


def check_release(release: Release) -> str:
    """The vLLM version of the release, or a UsageError naming the releases with a recipe."""
    ngc.check_ngc_scale_release(release)
    version = VLLM_OF_RELEASE.get(release.name)
    if version is None:
        raise UsageError(f"no vLLM stand-in recipe for release {release.name}; releases with one: "
                         f"{', '.join(VLLM_OF_RELEASE)}")
    return version


def wheels(version: str, on_line: LineSink) -> Path:
    """vLLM, torch and every dependency pip resolves for them, as wheels for the stand-in's python
    (downloaded once per machine; the few source-only ones built into wheels on the host)."""
    requirements = (f"vllm=={version}", *(f"# constraint {c}" for c in CONSTRAINTS),
                    *(f"# built {name}" for name in SDIST_ONLY), *(f"# platform {p}" for p in PLATFORMS))

    def fill(partial: Path) -> None:
        built = partial / ".built"
        for name in SDIST_ONLY:
            on_line(f"building a wheel of {name} on this machine (PyPI has only its source)")
            host._pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(built), name], f"building {name}", on_line)
        constraints = partial / ".constraints.txt"
        constraints.write_text("\n".join(CONSTRAINTS) + "\n")
        on_line(f"downloading vllm=={version} and its dependencies (about 3.3 GB, once per machine)")
        host._pip(
            ["download", "--quiet", "--only-binary=:all:", "--dest", str(partial), "--find-links", str(built),
             "--constraint", str(constraints), "--python-version", host.PYTHON_VERSION, "--implementation", "cp",
             *(f"--platform={tag}" for tag in PLATFORMS), f"vllm=={version}"],
            f"downloading vllm=={version}", on_line)
        for wheel in built.glob("*.whl"):
            if not (partial / wheel.name).exists():
                wheel.rename(partial / wheel.name)

    return host._cached("wheels", f"vllm-{version}", requirements, fill,
                        complete_when=lambda folder: any(folder.glob("vllm-*.whl")))


def install_layers(wheel_dir: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(title, wheel files) of the first install layers; the last layer installs vLLM itself."""
    names = sorted(p.name for p in wheel_dir.glob("*.whl"))
    layers, taken = [], set()
    for title, prefixes in FIRST_LAYERS:
        files = tuple(n for n in names if n.startswith(prefixes) and n not in taken)
        if not files:
            raise BuildFailed(f"no wheel in {wheel_dir} for the layer '{title}' ({', '.join(prefixes)}...)")
        taken.update(files)
        layers.append((title, files))
    return layers


def _backend_dir() -> Path:
    return ngc._file("vllm_backend")  # outside ngc/ and backends/, whose digests rebuild the other stand-ins


def recipe_digest(min_id: str, wheel_names: tuple[str, ...]) -> str:
    """Everything that shapes the vLLM image beyond its min image (a change rebuilds it)."""
    from triton_standins import _recipe_digest

    digest = hashlib.sha256(f"{min_id} {_recipe_digest(full=True)} {' '.join(wheel_names)}".encode())
    digest.update(template_file("standin-ngc-vllm.Dockerfile.j2").read_bytes())
    digest.update(repr((VLLM_OF_RELEASE, CONSTRAINTS, ENVIRONMENT, FIRST_LAYERS)).encode())
    for path in sorted(p for p in _backend_dir().rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """Serve `folder` over http on 127.0.0.1 for the build (pip's --find-links reads the listing)."""
    handler = functools.partial(_QuietHandler, directory=os.fspath(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="standin-wheels", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def build_vllm(engine: Engine, release: Release, min_info: ImageInfo, *, force: bool = False,
               on_line: LineSink = print) -> tuple[ImageInfo, bool]:
    """Build (or reuse) <registry>/tritonserver:<release>-vllm-python-py3 on the NGC-scale min image."""
    import triton_standins as small

    version = check_release(release)
    recipe = small.recipe_for(release)
    assert recipe is not None
    ref = flavour_ref(release)
    wheel_dir = wheels(version, on_line)
    names = tuple(sorted(p.name for p in wheel_dir.glob("*.whl")))
    labels = {
        **{k: v for k, v in min_info.labels.items() if k.startswith("org.triton-composer.standin")},
        small.LABEL_WHEEL: f"nvidia-pytriton=={recipe.pytriton}",
        small.LABEL_SERVER: recipe.server,
        small.LABEL_PYTHON: host.PYTHON_VERSION,
        small.LABEL_RECIPE: recipe_digest(min_info.id, names),
        small.LABEL_MIN_ID: min_info.id,
        "org.triton-composer.standin.flavour": FLAVOUR,
        "org.triton-composer.standin.vllm": f"vllm=={version}",
    }
    info = engine.image(ref)
    if info is not None and not force and all(info.labels.get(k) == v for k, v in labels.items()):
        on_line(f"reusing {ref} ({info.id[:19]})")
        return info, False
    started = time.monotonic()
    stages = ngc.build_stages(engine)
    base_ref = f"{ngc.REGISTRY}/tritonserver:{release.name}-{FLAVOUR}-base"
    try:
        base = small.build_full(engine, recipe, min_info.id, base_ref, labels, python_backends=False, force=force,
                                on_line=on_line)
        with tempfile.TemporaryDirectory(prefix="standin-ngc-vllm-", dir=host.cache_dir()) as tmp:
            context = Path(tmp)
            host.link_tree(_backend_dir(), context / "vllm")
            host.normalise_modes(context / "vllm")
            with served(wheel_dir) as url:
                (context / "Dockerfile").write_text(
                    templates().get_template("standin-ngc-vllm.Dockerfile.j2").render(
                        release=release.name, base=base.id, url=url, vllm_version=version,
                        layers=install_layers(wheel_dir), environment=ENVIRONMENT, site=SITE,
                        python_version=host.PYTHON_VERSION, labels=labels,
                    )
                )
                on_line(f"building {ref}")
                engine.build(context, tag=ref, network_mode="host", nocache=force, on_line=on_line)
    finally:
        engine.remove_image(base_ref)
    built = ngc._replaced(engine, ref, info)
    ngc.drop_build_stages(engine, stages, on_line)
    on_line(f"built {ref} in {time.monotonic() - started:.0f} s")
    return built, True

