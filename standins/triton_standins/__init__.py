"""Stand-ins for NGC's tritonserver full and -min images, for machines that cannot reach NGC.

The full stand-in carries a real Triton server (from an nvidia-pytriton wheel) laid out as in
NGC's image, an identity backend in C (built in the recipe) and CPU backends written as
Python-based backends; the min stand-in holds the NGC environment and nothing of Triton.
Each carries the traits of its release's generation that a composer meets (user `ubuntu`,
an externally managed python, who owns the Triton tree); their env and labels state the
server really inside, which for releases after 24.10 is older than the catalog's.
"""

from __future__ import annotations

import hashlib
import inspect
import shutil
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Mapping

import jinja2

from composer.catalog.catalog import Catalog, Release
from composer.engine.interface import Engine, ImageInfo
from composer.core.errors import BuildFailed, UsageError
from composer.core.progress import LineSink
from triton_standins import cuda_stubs, host


REGISTRY = "localhost/standin"
BASE_REF = f"{REGISTRY}/debian-minbase:{host.DEBIAN_SUITE}"

# Container release -> the nvidia-pytriton wheel bundling that release's server.
PYTRITON_FOR_RELEASE: Mapping[str, str] = {
    "24.07": "0.5.10",
    "24.08": "0.5.11",
    "24.09": "0.5.12",
    "24.10": "0.5.13",
}
# No wheel carries a server of 24.11 or later: the Ubuntu 24.04 generation takes the newest.
NEWEST_PYTRITON = "0.7.0"
# The server each wheel carries (TRITON-FACTS section 6): what the images state.
SERVER_OF_WHEEL: Mapping[str, str] = {
    "0.5.10": "2.48.0",
    "0.5.11": "2.49.0",
    "0.5.12": "2.50.0",
    "0.5.13": "2.51.0",
    "0.7.0": "2.51.0",
}
# From this release on NGC's Triton tree belongs to root and is writable by root alone.
ROOT_OWNED_FROM = "26.06"
# numpy as NGC installs it for the python backend: pip, under /usr/local.
NUMPY_REQUIREMENT = "numpy<2"

# Python packages each Python-based backend carries in its own site-packages folder.
# numpy is deliberately absent: the image's numpy<2 must not be shadowed.
# Backend -> (the module the build imports to prove the folder is complete, its packages).
BACKEND_PACKAGES: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "onnxruntime": ("onnxruntime", ("onnxruntime==1.20.1",)),
    # import torch and torch.jit.load need only typing_extensions (checked in the image).
    "pytorch": ("torch", ("torch==2.13.0", "typing-extensions>=4.10.0")),
}
# Backends written in C, compiled in the full image's build (sources in backends/<name>/).
C_BACKENDS = ("identity",)

LABEL_STANDIN = "org.triton-composer.standin"
LABEL_WHEEL = "org.triton-composer.standin.wheel"
LABEL_RECIPE = "org.triton-composer.standin.recipe"
LABEL_SERVER = "org.triton-composer.standin.server-version"
LABEL_PYTHON = "org.triton-composer.standin.python"
LABEL_MIN_ID = "org.triton-composer.standin.min-id"


@dataclass(frozen=True)
class Recipe:
    """How the stand-ins of one release are made: the wheel, and the traits of its generation."""

    release: Release
    pytriton: str
    server: str  # the server the wheel carries, stated by env and labels
    ubuntu_user: bool  # Ubuntu 24.04 images: a user `ubuntu` holds uid/gid 1000
    externally_managed: bool  # Ubuntu 24.04's python carries the PEP 668 marker
    root_owned: bool  # the Triton tree belongs to root (from 26.06), else to 1000:1000


def recipe_for(release: Release) -> Recipe | None:
    """The recipe of `release`, or None when no wheel can stand in for its server."""
    ubuntu_24 = release.os == "ubuntu-24.04"
    pytriton = NEWEST_PYTRITON if ubuntu_24 else PYTRITON_FOR_RELEASE.get(release.name)
    if pytriton is None:
        return None
    return Recipe(
        release=release,
        pytriton=pytriton,
        server=SERVER_OF_WHEEL[pytriton],
        ubuntu_user=ubuntu_24,
        externally_managed=ubuntu_24,
        root_owned=release.name >= ROOT_OWNED_FROM,
    )


@dataclass(frozen=True)
class StandinResult:
    """The two stand-in images of a release and whether this call built them."""

    release: str
    full_ref: str
    min_ref: str
    full_id: str
    min_id: str
    full_built: bool
    min_built: bool
    seconds: float


def standin_releases(catalog: Catalog | None = None) -> list[str]:
    """Releases that have a stand-in recipe."""
    catalog = catalog or Catalog.load()
    return sorted(name for name, release in catalog.releases.items() if recipe_for(release))


def build_standins(engine: Engine, release: Release, *, force: bool = False, on_line: LineSink = print) -> StandinResult:
    """Build (or reuse) localhost/standin/tritonserver:<release>-py3 and -py3-min."""
    started = time.monotonic()
    recipe = recipe_for(release)
    if recipe is None:
        raise UsageError(
            f"no stand-in recipe for release {release.name}; releases with one: {', '.join(standin_releases())}"
        )
    pytriton = recipe.pytriton
    wheel = f"nvidia-pytriton=={pytriton}"
    min_ref, full_ref = release.min_ref(REGISTRY), release.full_ref(REGISTRY)
    environment = templates()
    labels = {
        LABEL_STANDIN: "true",
        LABEL_WHEEL: wheel,
        LABEL_SERVER: recipe.server,
        LABEL_PYTHON: host.PYTHON_VERSION,
        LABEL_RECIPE: _recipe_digest(full=False),
    }
    common = _common(recipe)

    min_info = None if force else _current(engine, min_ref, labels)
    min_built = min_info is None
    if min_built:
        base_id = _base_image(engine, force=force, on_line=on_line)
        on_line(f"building {min_ref}")
        with tempfile.TemporaryDirectory(prefix="standin-min-") as tmp:
            context = Path(tmp)
            (context / "Dockerfile").write_text(
                environment.get_template("standin-min.Dockerfile.j2").render(
                    base_ref=base_id, labels={**labels, "org.triton-composer.standin.flavour": "min"}, **common
                )
            )
            (context / "nvidia_entrypoint.sh").write_bytes(_standin_file("nvidia_entrypoint.sh").read_bytes())
            engine.build(context, tag=min_ref, nocache=force, on_line=on_line)
        min_info = _require(engine, min_ref)
    else:
        on_line(f"reusing {min_ref} ({min_info.id[:19]})")

    # The full image must sit on this min image, not on one an earlier recipe made.
    full_labels = {**labels, LABEL_RECIPE: _recipe_digest(full=True), LABEL_MIN_ID: min_info.id}
    full_info = None if (force or min_built) else _current(engine, full_ref, full_labels)
    full_built = full_info is None
    if full_built:
        full_info = build_full(engine, recipe, min_info.id, full_ref, full_labels, force=force, on_line=on_line)
    else:
        on_line(f"reusing {full_ref} ({full_info.id[:19]})")

    return StandinResult(
        release=release.name,
        full_ref=full_ref,
        min_ref=min_ref,
        full_id=full_info.id,
        min_id=min_info.id,
        full_built=full_built,
        min_built=min_built,
        seconds=time.monotonic() - started,
    )


def _common(recipe: Recipe) -> dict:
    """What both templates state about the release and its server."""
    wheel = f"nvidia-pytriton=={recipe.pytriton}"
    return {
        "release": recipe.release.name,
        "server_version": recipe.server,
        "build_id": f"standin-{recipe.pytriton}",
        "build_ref": wheel,
        "python_version": host.PYTHON_VERSION,
        "wheel": wheel,
        "recipe": recipe,
    }


def build_full(
    engine: Engine,
    recipe: Recipe,
    min_id: str,
    full_ref: str,
    full_labels: Mapping[str, str],
    *,
    python_backends: bool = True,
    force: bool = False,
    on_line: LineSink = print,
) -> ImageInfo:
    """The full image on `min_id`: python, the real server, identity and (unless
    python_backends is False, as at NGC scale) the Python-based backends."""
    common = _common(recipe)
    wheel = common["wheel"]
    bundled = BACKEND_PACKAGES if python_backends else {}
    on_line(f"building {full_ref} from {wheel}")
    tree = host.pytriton_tree(recipe.pytriton, on_line)
    numpy_wheels = host.wheels("numpy", (NUMPY_REQUIREMENT,), on_line)
    base_id = _base_image(engine, force=False, on_line=on_line)
    with tempfile.TemporaryDirectory(prefix="standin-full-", dir=_context_parent()) as tmp:
        context = Path(tmp)
        libtritonserver = _lay_out_server(tree, context / "server", recipe.server)
        (context / "backends").mkdir()
        stubbed = _lay_out_backends(bundled, context / "backends", context / "cuda-stubs", on_line)
        for name in C_BACKENDS:
            host.link_tree(_standin_file("backends", name), context / "c-backends" / name)
        host.link_tree(numpy_wheels, context / "wheels")
        for folder in ("server", "backends", "c-backends", "cuda-stubs"):
            host.normalise_modes(context / folder)
        (context / "Dockerfile").write_text(
            templates().get_template("standin-full.Dockerfile.j2").render(
                min_ref=min_id,
                base_ref=base_id,
                relink_two_up=[
                    "backends/python/libtriton_python.so",
                    "backends/python/triton_python_backend_stub",
                    "caches/local/libtritoncache_local.so",
                ],
                libtritonserver=libtritonserver,
                bundled_backends={name: module for name, (module, _packages) in bundled.items()},
                c_backends=C_BACKENDS,
                cuda_stubs=stubbed,
                numpy_requirement=NUMPY_REQUIREMENT,
                labels={**full_labels, "org.triton-composer.standin.flavour": "full"},
                **common,
            )
        )
        engine.build(context, tag=full_ref, nocache=force, on_line=on_line)
    return _require(engine, full_ref)


def _standin_file(*parts: str) -> Path:
    return Path(str(resources.files("triton_standins").joinpath(*parts)))


def template_file(name: str) -> Path:
    """One of the stand-in recipes' Dockerfile templates (in this package's templates/)."""
    return _standin_file("templates", name)


def templates() -> jinja2.Environment:
    """The stand-in recipes' own template environment, set as the composer's own: strict, so a
    missing value fails rendering instead of the build."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_standin_file("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _backend_sources() -> list[Path]:
    root = _standin_file("backends")
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _recipe_digest(*, full: bool) -> str:
    """A digest of everything that shapes the min (or the full) image, so a changed recipe
    rebuilds it; a backend change leaves the min image, and the layers on it, as they are."""
    digest = hashlib.sha256()
    digest.update(template_file("standin-min.Dockerfile.j2").read_bytes())
    digest.update(_standin_file("nvidia_entrypoint.sh").read_bytes())
    if full:
        digest.update(template_file("standin-full.Dockerfile.j2").read_bytes())
        digest.update(repr((sorted(BACKEND_PACKAGES.items()), C_BACKENDS, NUMPY_REQUIREMENT)).encode())
        for path in _backend_sources():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        digest.update(inspect.getsource(_lay_out_server).encode())  # how /opt/tritonserver is laid out
        digest.update(inspect.getsource(cuda_stubs).encode())
    return digest.hexdigest()[:16]


def _current(engine: Engine, ref: str, labels: Mapping[str, str]) -> ImageInfo | None:
    """The image `ref` if it exists and was made by this recipe, else None."""
    info = engine.image(ref)
    if info is None:
        return None
    if any(info.labels.get(key) != value for key, value in labels.items()):
        return None
    return info


def _require(engine: Engine, ref: str) -> ImageInfo:
    info = engine.image(ref)
    if info is None:
        raise BuildFailed(f"the engine reported no image {ref} after building it")
    return info


def _base_image(engine: Engine, *, force: bool, on_line: LineSink) -> str:
    """The Debian minbase image, imported from the cached debootstrap root."""
    info = engine.image(BASE_REF)
    if info is not None and not force:
        return info.id
    tarball = host.debian_rootfs(on_line)
    on_line(f"importing {tarball.name} as {BASE_REF}")
    return engine.import_rootfs(tarball, BASE_REF, changes=['CMD ["/bin/bash"]'])


def _context_parent() -> Path:
    """Build contexts go next to the cache, so hard links to cached files work."""
    parent = host.cache_dir() / "contexts"
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def _lay_out_server(tree: Path, dest: Path, server_version: str) -> str:
    """Lay /opt/tritonserver out from the unpacked wheel; returns the libtritonserver file name."""
    server = tree / "pytriton" / "tritonserver"
    libs = tree / "nvidia_pytriton.libs"
    stub = server / "python_backend_stubs" / host.PYTHON_VERSION / "triton_python_backend_stub"
    if not stub.is_file():
        raise BuildFailed(f"the nvidia-pytriton wheel has no python backend stub for python {host.PYTHON_VERSION}")
    candidates = sorted(libs.glob("libtritonserver*.so*"))
    if not candidates:
        raise BuildFailed(f"the nvidia-pytriton wheel has no libtritonserver in {libs.name}")
    host.link_tree(server / "bin", dest / "bin")
    host.link_tree(libs, dest / "lib")
    # Newer wheels bundle a libpython for their python 3.13 stub, which the image does not use.
    for unused in (dest / "lib").glob("libpython*"):
        unused.unlink()
    host.link_tree(server / "backends" / "python", dest / "backends" / "python")
    host.link_tree(stub.parent, dest / "backends" / "python")
    host.link_tree(server / "caches", dest / "caches")
    # NGC's tree carries the server's licence; newer wheels keep it under dist-info/licenses/ (PEP 639).
    licence = next(iter(sorted(tree.glob("nvidia_pytriton-*.dist-info/LICENSE"))
                        + sorted(tree.glob("nvidia_pytriton-*.dist-info/licenses/LICENSE"))), None)
    if licence is None:
        raise BuildFailed("the nvidia-pytriton wheel carries no LICENSE for /opt/tritonserver/LICENSE")
    shutil.copy2(licence, dest / "LICENSE")
    (dest / "TRITON_VERSION").write_text(server_version + "\n")
    return candidates[0].name


def _lay_out_backends(
    bundled: Mapping[str, tuple[str, tuple[str, ...]]], dest: Path, stubs: Path, on_line: LineSink
) -> dict[str, str]:
    """The Python-based backends, each folder self-contained (model.py + site-packages).
    A backend whose wheel is a CUDA build (torch) gets stub CUDA libraries' sources under
    stubs/NAME/, compiled in the image; returns NAME -> where they go under its site-packages."""
    backends = _standin_file("backends")
    stubbed: dict[str, str] = {}
    stubs.mkdir(parents=True, exist_ok=True)
    for name, (module, requirements) in bundled.items():
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.py").write_bytes((backends / name / "model.py").read_bytes())
        host.link_tree(host.site_packages(name, requirements, on_line), folder / "site-packages")
        (folder / "site-packages" / ".requirements").unlink(missing_ok=True)
        lib_dir = folder / "site-packages" / module / "lib"
        if lib_dir.is_dir():
            extensions = sorted((folder / "site-packages" / module).glob("_C*.so"))
            if cuda_stubs.write_stubs(lib_dir, extensions, stubs / name) is not None:
                stubbed[name] = "site-packages"
    return stubbed
