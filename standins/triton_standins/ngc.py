"""NGC-scale stand-ins (`triton-standin --scale ngc`): images that weigh and behave like NGC's.

The min image is the small min stand-in plus NVIDIA's real runtime libraries of the release
(from PyPI wheels), TensorRT stand-ins and the development bulk NGC's min carries, each as a
Debian package under NVIDIA's name, installed by apt from a repository served on the host
for the build only.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import random
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from composer.catalog.catalog import Release
from composer.engine.interface import Engine, ImageInfo
from composer.core.errors import BuildFailed, UsageError
from composer.core.progress import LineSink
from triton_standins import StandinResult, debs, host, template_file, templates
from triton_standins import build_standins as build_small
from triton_standins import ngc_packages as pkgs


REGISTRY = "localhost/standin-ngc"
RELEASES = tuple(pkgs.RECIPES)
LABEL_SCALE = "org.triton-composer.standin.scale"
LABEL_GENERATED = "org.triton-composer.standin.generated"
LABEL_STANDIN_LIBS = "org.triton-composer.standin.stand-in-libraries"


@dataclass(frozen=True)
class Layer:
    """One RUN step of the min image: the packages it installs."""

    title: str
    packages: tuple[str, ...]


def check_ngc_scale_release(release: Release) -> pkgs.Recipe:
    """The NGC-scale recipe of `release`, or a one-line refusal naming the releases that have one."""
    if release.name not in RELEASES:
        raise UsageError(
            f"no NGC-scale stand-in recipe for release {release.name}; releases with one: {', '.join(RELEASES)}"
        )
    return pkgs.RECIPES[release.name]


def _file(*parts: str) -> Path:
    return Path(str(resources.files("triton_standins").joinpath(*parts)))


def recipe_digest(small_min_id: str, recipe: pkgs.Recipe) -> str:
    """Everything that shapes one release's NGC-scale min image (a change rebuilds it; another
    release's data does not)."""
    digest = hashlib.sha256(small_min_id.encode())
    digest.update(template_file("standin-ngc-min.Dockerfile.j2").read_bytes())
    digest.update(repr((recipe.cuda, recipe.env, recipe.families, recipe.tensorrt, recipe.generated,
                        pkgs.DEBIAN_TOOLS)).encode())
    digest.update(_file("debs.py").read_bytes())
    for path in sorted(_file("ngc", "tensorrt_libs").iterdir()) + [_file("ngc", "pad.sh")]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _random_file(path: Path, size: int, seed: str) -> None:
    """`size` deterministic pseudo-random (incompressible) bytes: generated bulk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    generator = random.Random(seed)
    with path.open("wb") as handle:
        left = size
        while left:
            chunk = min(left, 1 << 24)
            handle.write(generator.randbytes(chunk))
            left -= chunk


class _Packer:
    """Makes the .debs of the min image in `repo`, one staging tree at a time."""

    def __init__(self, repo: Path, on_line: LineSink):
        self.repo = repo
        self.on_line = on_line

    def pack(self, control: debs.Control, fill) -> None:
        staging = Path(tempfile.mkdtemp(prefix=f"{control.package}-", dir=self.repo.parent))
        try:
            fill(staging)
            deb = debs.build_deb(staging, control, self.repo)
            self.on_line(f"packed {deb.name} ({deb.stat().st_size / 1e6:.0f} MB)")
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _members(wheel_dir: Path) -> dict[str, Path]:
    """Which wheel holds each file."""
    found: dict[str, Path] = {}
    for wheel in sorted(wheel_dir.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                found.setdefault(name, wheel)
    return found


def _extract(wheel: Path, member: str, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        _copy_member(archive, member, dest)


def _copy_member(archive: zipfile.ZipFile, member: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(member) as src, dest.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 22)
    dest.chmod(0o644)


def _symlink(root: Path, path: str, target: str) -> None:
    link = root / path
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _wheel_of(family: pkgs.Family, wheel: Path) -> bool:
    """Whether `wheel` is the family's own (CUDA 13's wheels share one include folder)."""
    return wheel.name.split("-", 1)[0].lower() == family.wheel.split("==", 1)[0].replace("-", "_").lower()


def _family_debs(packer: _Packer, recipe: pkgs.Recipe, family: pkgs.Family, members: dict[str, Path],
                 claimed: set[str]) -> None:
    """The runtime and -dev packages of one library family."""
    description = f"NVIDIA {family.runtime} {family.version} (real libraries, from the {family.wheel} wheel)"

    def runtime(root: Path) -> None:
        for member, version in family.libs:
            name, soname = pkgs.versioned(member, version)
            _extract(members[member], member, root / family.lib_dir / name)
            if soname:
                _symlink(root, f"{family.lib_dir}/{soname}", name)
        if family is recipe.cudart:
            # What NVIDIA's CUDA images lay around the libraries: the cuda links, the loader's
            # path, and a compat folder that here holds no driver library.
            cuda = f"cuda-{recipe.cuda}"
            _symlink(root, "usr/local/cuda", cuda)
            _symlink(root, f"usr/local/{cuda}/lib64", "targets/x86_64-linux/lib")
            (root / f"usr/local/{cuda}/bin").mkdir(parents=True)
            compat = root / f"usr/local/{cuda}/compat/lib.real"
            compat.mkdir(parents=True)
            (compat.parent / "README.stand-in").write_text(
                "triton-composer stand-in: NGC's compat folder holds the CUDA forward-compatibility driver;\n"
                "this one holds none (the driver comes from the host at run time).\n"
            )
            conf = root / f"etc/ld.so.conf.d/988_cuda-{recipe.cuda_major}.conf"
            conf.parent.mkdir(parents=True)
            conf.write_text(f"/{pkgs.cuda_lib(recipe.cuda)}\n")

    def dev(root: Path) -> None:
        prefix = family.libs[0][0].rsplit("/lib/", 1)[0] + "/include/"
        for member, wheel in members.items():
            if (member.startswith(prefix) and not member.endswith("/") and "__init__" not in member
                    and _wheel_of(family, wheel)):
                path = f"{family.include_dir}/{member[len(prefix):]}"
                if path not in claimed:  # two wheels may ship the same header
                    claimed.add(path)
                    _extract(wheel, member, root / path)
        for member, version in family.libs:
            _name, soname = pkgs.versioned(member, version)
            if soname:
                _symlink(root, f"{family.lib_dir}/{soname.split('.so', 1)[0]}.so", soname)
        for name, size in family.static:
            _random_file(root / family.lib_dir / name, size, f"{family.dev}/{name}")

    packer.pack(debs.Control(family.runtime, family.version, description, ldconfig=True), runtime)
    packer.pack(
        debs.Control(family.dev, family.version,
                     f"NVIDIA {family.dev} {family.version} (real headers; static archives generated to about their size)",
                     depends=(f"{family.runtime} (= {family.version})",)),
        dev,
    )


def _generated_deb(packer: _Packer, spec: pkgs.Generated) -> None:
    def fill(root: Path) -> None:
        for path, size in spec.files:
            _random_file(root / path, size, f"{spec.package}/{path}")
        for path, target in spec.links:
            _symlink(root, path, target)

    packer.pack(
        debs.Control(spec.package, spec.version, f"{spec.what}: triton-composer size stand-in (generated bytes)",
                     depends=spec.depends, section="multiverse/devel"),
        fill,
    )


def build_needs() -> tuple[str, ...]:
    """The Debian packages the C/C++ build scripts of this scale name in their `# needs:` lines."""
    needs: set[str] = {"g++"}
    for script in sorted(_file("ngc").rglob("build.sh")):
        for line in script.read_text().splitlines()[:6]:
            if line.startswith("# needs:"):
                needs.update(line.split(":", 1)[1].split())
    return tuple(sorted(needs))


def tools_image(engine: Engine, on_line: LineSink) -> str:
    """A Debian image with the compilers the build scripts need (built once, by its needs)."""
    needs = build_needs()
    ref = f"{REGISTRY}/build-tools:{host.DEBIAN_SUITE}"
    digest = hashlib.sha256(" ".join(needs).encode()).hexdigest()[:16]
    info = engine.image(ref)
    if info is not None and info.labels.get("org.triton-composer.standin.recipe") == digest:
        return info.id
    base = _small_base(engine, on_line)
    with tempfile.TemporaryDirectory(prefix="standin-ngc-tools-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(
            f"FROM {base}\n"
            "RUN apt-get update -qq \\\n"
            f" && apt-get install -y -qq --no-install-recommends {' '.join(needs)} >/dev/null \\\n"
            " && rm -rf /var/lib/apt/lists/*\n"
        )
        on_line(f"building {ref} ({' '.join(needs)})")
        engine.build(Path(tmp), tag=ref, labels={"org.triton-composer.standin.recipe": digest}, on_line=on_line)
    return _replaced(engine, ref, info).id


# Labels the stages of a stand-in build carry (inherited from the images they start from).
STAGE_LABELS = ("org.triton-composer.standin", "org.triton-composer.standin.recipe")


def build_stages(engine: Engine) -> set[str]:
    """The untagged images stand-in builds left on the engine: their multi-stage builds' stages."""
    return {image for label in STAGE_LABELS for image in engine.images_labelled(label, untagged=True)}


def drop_build_stages(engine: Engine, before: set[str], on_line: LineSink) -> None:
    """Remove the stages an NGC-scale build made (not those in `before`). They hold GBs of their own
    (libtorch unpacked to build the pytorch backend, 2.3 GB; 4.3 GB for the three stand-ins) that
    only a rebuild of the same recipe would take, and the NGC tier's builds need the room."""
    dropped = 0
    for image in build_stages(engine) - before:
        if engine.image(image) is not None:
            engine.discard_untagged(image)  # (a parent of a tagged image stays: the engine refuses)
            dropped += engine.image(image) is None
    if dropped:
        on_line(f"  removed {dropped} build stage(s) of its own")


def _replaced(engine: Engine, ref: str, old: ImageInfo | None) -> ImageInfo:
    """The image just built as `ref`; the one an earlier recipe made goes (GBs each)."""
    built = engine.image(ref)
    if built is None:
        raise BuildFailed(f"the engine reported no image {ref} after building it")
    if old is not None and old.id != built.id:
        engine.discard_untagged(old.id)
    return built


def _tensorrt_libs(engine: Engine, recipe: pkgs.Recipe, members: dict[str, Path], dest: Path, on_line: LineSink) -> None:
    """The TensorRT stand-in libraries, compiled in the tools image, padded on the host to
    about the real files' sizes (pad.sh)."""
    source = _file("ngc", "tensorrt_libs")
    cudart = recipe.cudart_member
    with zipfile.ZipFile(members[cudart]) as wheel:
        files = {f"cudart/{cudart.rsplit('/', 1)[-1]}": wheel.read(cudart)}
    files.update({f"src/{p.name}": p.read_bytes() for p in source.iterdir() if p.is_file()})
    result = engine.run_once(
        tools_image(engine, on_line),
        ["sh", "-c", f"sh /src/build.sh /src /out /cudart {recipe.tensorrt.version} >&2 && tar -C /out -cf - . | base64 -w0"],
        files=files,
    )
    if result.exit_code != 0:
        raise BuildFailed(f"building the TensorRT stand-in libraries failed: {result.output.strip()[-300:]}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(result.output.strip()))) as archive:
        archive.extractall(dest, filter="data")
    for name, _package, size in recipe.tensorrt.files():
        host.run(["sh", str(_file("ngc", "pad.sh")), str(dest / name), str(size), f"tensorrt-{name}"],
                 f"padding {name}", on_line)


def _tensorrt_debs(packer: _Packer, recipe: pkgs.Recipe, built: Path) -> None:
    """libnvinfer10 and friends, from the stand-in libraries in `built`."""
    trt = recipe.tensorrt
    for package in dict.fromkeys(package for _name, package, _size in trt.files()):

        def fill(root: Path, package: str = package) -> None:
            lib_dir = root / pkgs.SYSTEM_LIB
            lib_dir.mkdir(parents=True)
            for name, owner, _size in trt.files():
                if owner != package:
                    continue
                shutil.copy2(built / name, lib_dir / name)
                soname = name.replace(f".so.{trt.version}", f".so.{trt.version.split('.')[0]}")
                if soname != name and "builder_resource" not in name:
                    (lib_dir / soname).symlink_to(name)

        packer.pack(
            debs.Control(package, trt.deb_version,
                         f"TensorRT {trt.version} STAND-IN (triton-composer): TensorRT's sonames and "
                         "entry points, padded to about the real size; not NVIDIA's library",
                         depends=(trt.depends,) if package == "libnvinfer10" else ("libnvinfer10",),
                         ldconfig=True),
            fill,
        )


def layers(recipe: pkgs.Recipe) -> tuple[Layer, ...]:
    """The RUN steps of the min image (each a layer well under NGC's largest, 4.8 GB)."""

    def runtime(layer: int) -> tuple[str, ...]:
        return tuple(f.runtime for f in recipe.families if f.layer == layer)

    env = dict(recipe.env)
    return (
        Layer(f"CUDA {recipe.cuda} runtime libraries", runtime(1)),
        Layer(f"cuDNN {env['CUDNN_VERSION']} and NCCL {env['NCCL_VERSION']} (and what else torch's build pins)", runtime(2)),
        Layer(f"TensorRT {recipe.tensorrt.version} (stand-in libraries)",
              tuple(dict.fromkeys(p for _n, p, _s in recipe.tensorrt.files()))),
        Layer("CUDA, cuDNN and NCCL development files", tuple(f.dev for f in recipe.families)),
        Layer("Nsight tools, HPC-X and Debian's compiler toolchain",
              tuple(g.package for g in recipe.generated) + pkgs.DEBIAN_TOOLS),
    )


def _small_base(engine: Engine, on_line: LineSink) -> str:
    from triton_standins import _base_image

    return _base_image(engine, force=False, on_line=on_line)


def build_min(engine: Engine, release: Release, small_min: ImageInfo, *, force: bool, on_line: LineSink) -> tuple[ImageInfo, bool]:
    """Build (or reuse) the NGC-scale min image on the small min stand-in; (image, built)."""
    recipe = check_ngc_scale_release(release)
    ref = release.min_ref(REGISTRY)
    labels = {
        "org.triton-composer.standin": "true",
        "org.triton-composer.standin.recipe": recipe_digest(small_min.id, recipe),
        "org.triton-composer.standin.flavour": "min",
        LABEL_SCALE: "ngc",
        LABEL_GENERATED: " ".join(g.package for g in recipe.generated) + " and the static archives of the -dev packages",
        LABEL_STANDIN_LIBS: " ".join(dict.fromkeys(p for _n, p, _s in recipe.tensorrt.files()))
        + f": TensorRT {recipe.tensorrt.version} stand-ins",
    }
    info = engine.image(ref)
    if info is not None and not force and all(info.labels.get(k) == v for k, v in labels.items()):
        on_line(f"reusing {ref} ({info.id[:19]})")
        return info, False
    started = time.monotonic()
    wheel_dir = host.wheels(f"ngc-cuda-{release.name}", recipe.wheel_requirements(), on_line)
    members = _members(wheel_dir)
    with tempfile.TemporaryDirectory(prefix="standin-ngc-min-", dir=host.cache_dir()) as tmp:
        work = Path(tmp)
        repo = work / "repo"
        repo.mkdir()
        packer = _Packer(repo, on_line)
        claimed: set[str] = set()
        for family in recipe.families:
            _family_debs(packer, recipe, family, members, claimed)
        for spec in recipe.generated:
            _generated_deb(packer, spec)
        _tensorrt_libs(engine, recipe, members, work / "tensorrt", on_line)
        _tensorrt_debs(packer, recipe, work / "tensorrt")
        shutil.rmtree(work / "tensorrt")
        debs.write_index(repo)
        on_line(f"packed {len(list(repo.glob('*.deb')))} packages in {time.monotonic() - started:.0f} s")
        context = work / "context"
        context.mkdir()
        with debs.served(repo) as apt_source:
            (context / "Dockerfile").write_text(
                templates().get_template("standin-ngc-min.Dockerfile.j2").render(
                    release=release.name, small_min=small_min.id, apt_source=apt_source,
                    layers=layers(recipe), labels=labels, env=recipe.env, cuda=recipe.cuda,
                    check_libraries=recipe.check_libraries(),
                )
            )
            on_line(f"building {ref}")
            engine.build(context, tag=ref, network_mode="host", nocache=force, on_line=on_line)
    built = _replaced(engine, ref, info)
    on_line(f"built {ref} in {time.monotonic() - started:.0f} s")
    return built, True


def build_standins(engine: Engine, release: Release, *, force: bool = False, on_line: LineSink = print) -> StandinResult:
    """Build (or reuse) localhost/standin-ngc/tritonserver:<release>-py3 and -py3-min."""
    check_ngc_scale_release(release)
    started = time.monotonic()
    small = build_small(engine, release, on_line=on_line)
    small_min = engine.image(small.min_ref)
    assert small_min is not None
    previous_min = engine.image(release.min_ref(REGISTRY))
    stages = build_stages(engine)
    min_info, min_built = build_min(engine, release, small_min, force=force, on_line=on_line)
    full_info, full_built = build_full(engine, release, min_info, force=force, on_line=on_line)
    if previous_min is not None and previous_min.id != min_info.id:
        engine.discard_untagged(previous_min.id)  # the old full image held it until now
    drop_build_stages(engine, stages, on_line)
    return StandinResult(
        release=release.name, full_ref=release.full_ref(REGISTRY), min_ref=release.min_ref(REGISTRY),
        full_id=full_info.id, min_id=min_info.id,
        full_built=full_built, min_built=min_built, seconds=time.monotonic() - started,
    )


# NGC's C/C++ backends built here -> the folder their build.sh takes as its 4th argument.
C_BACKENDS = {"tensorrt": "/trt", "onnxruntime": "/ort", "pytorch": "/torch"}


def _full_digest(min_id: str, recipe: pkgs.Recipe) -> str:
    """Everything that shapes the NGC-scale full image beyond its min image."""
    from triton_standins import _recipe_digest

    digest = hashlib.sha256(f"{min_id} {_recipe_digest(full=True)}".encode())
    digest.update(template_file("standin-ngc-full.Dockerfile.j2").read_bytes())
    digest.update(repr((recipe.ort_wheel, recipe.torch_wheel, pkgs.TORCH_LEAVE_OUT, recipe.size_standins,
                        C_BACKENDS)).encode())
    # What the build compiles or runs, not the notes beside it.
    for path in sorted(p for p in _file("ngc").rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".md"):
        digest.update(str(path.relative_to(_file("ngc"))).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _unpack(wheel_dir: Path, prefix: str, dest: Path, wanted) -> None:
    """The files under `prefix` of the one wheel in `wheel_dir` whose path below it `wanted` accepts."""
    wheels = sorted(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildFailed(f"expected one wheel in {wheel_dir}, found {len(wheels)}")
    with zipfile.ZipFile(wheels[0]) as archive:
        for member in archive.namelist():
            if member.startswith(prefix) and not member.endswith("/") and wanted(member[len(prefix):]):
                _copy_member(archive, member, dest / member[len(prefix):])


def _lay_out_onnxruntime(capi: Path, dest: Path, recipe: pkgs.Recipe) -> None:
    """ONNX Runtime's libraries under NGC's names: the versioned library, its links, the providers."""
    dest.mkdir(parents=True)
    for lib in sorted(capi.glob("lib*.so*")):
        lib.rename(dest / lib.name)
    versioned = f"libonnxruntime.so.{recipe.ort_version}"
    if not (dest / versioned).is_file():
        raise BuildFailed(f"the {recipe.ort_wheel} wheel has no {versioned}")
    (dest / "libonnxruntime.so.1").symlink_to(versioned)
    (dest / "libonnxruntime.so").symlink_to("libonnxruntime.so.1")


def build_full(engine: Engine, release: Release, min_info: ImageInfo, *, force: bool, on_line: LineSink) -> tuple[ImageInfo, bool]:
    """Build (or reuse) the NGC-scale full image on the NGC-scale min image; (image, built)."""
    import triton_standins as small

    ngc_recipe = check_ngc_scale_release(release)
    recipe = small.recipe_for(release)
    assert recipe is not None
    ref = release.full_ref(REGISTRY)
    labels = {
        **{k: v for k, v in min_info.labels.items() if k.startswith("org.triton-composer.standin")},
        small.LABEL_WHEEL: f"nvidia-pytriton=={recipe.pytriton}",
        small.LABEL_SERVER: recipe.server,
        small.LABEL_PYTHON: host.PYTHON_VERSION,
        small.LABEL_RECIPE: _full_digest(min_info.id, ngc_recipe),
        small.LABEL_MIN_ID: min_info.id,
        "org.triton-composer.standin.flavour": "full",
        LABEL_GENERATED: "backends " + " ".join(name for name, _files in ngc_recipe.size_standins)
        + " (size stand-ins: generated bytes, no backend library); the min image's: "
        + min_info.labels.get(LABEL_GENERATED, ""),
    }
    info = engine.image(ref)
    if info is not None and not force and all(info.labels.get(k) == v for k, v in labels.items()):
        on_line(f"reusing {ref} ({info.id[:19]})")
        return info, False
    started = time.monotonic()
    ort = host.wheels("onnxruntime-gpu", (ngc_recipe.ort_wheel,), on_line)
    torch = host.wheels("torch-cuda", (ngc_recipe.torch_wheel,), on_line)
    wheel_dir = host.wheels(f"ngc-cuda-{release.name}", ngc_recipe.wheel_requirements(), on_line)
    cudart = ngc_recipe.cudart_member
    tools = tools_image(engine, on_line)
    base_ref = f"{REGISTRY}/tritonserver:{release.name}-py3-base"
    try:
        base = small.build_full(engine, recipe, min_info.id, base_ref, labels, python_backends=False, force=force,
                                on_line=on_line)
        with tempfile.TemporaryDirectory(prefix="standin-ngc-full-", dir=host.cache_dir()) as tmp:
            context = Path(tmp)
            host.link_tree(_file("ngc"), context / "ngc")
            _extract(_members(wheel_dir)[cudart], cudart, context / "cudart" / cudart.rsplit("/", 1)[-1])
            on_line(f"unpacking {ngc_recipe.ort_wheel} and {ngc_recipe.torch_wheel}")
            _unpack(ort, "onnxruntime/capi/", context / "ort-capi", lambda name: ".so" in name and "pybind" not in name)
            _lay_out_onnxruntime(context / "ort-capi", context / "onnxruntime", ngc_recipe)
            shutil.rmtree(context / "ort-capi")
            _unpack(torch, "torch/lib/", context / "pytorch", lambda name: name not in pkgs.TORCH_LEAVE_OUT)
            _unpack(torch, "torch/include/", context / "torch-include", lambda name: True)
            for folder in ("ngc", "onnxruntime", "pytorch", "torch-include"):
                host.normalise_modes(context / folder)
            (context / "Dockerfile").write_text(
                templates().get_template("standin-ngc-full.Dockerfile.j2").render(
                    release=release.name, tools=tools, base=base.id,
                    libtritonserver=_libtritonserver(engine, base.id),
                    c_backends=C_BACKENDS, size_standins=dict(ngc_recipe.size_standins), labels=labels,
                    tensorrt_version=ngc_recipe.tensorrt.version, owner=None if recipe.root_owned else "1000:1000",
                )
            )
            on_line(f"building {ref}")
            engine.build(context, tag=ref, nocache=force, on_line=on_line)
    finally:
        engine.remove_image(base_ref)
    built = _replaced(engine, ref, info)
    on_line(f"built {ref} in {time.monotonic() - started:.0f} s")
    return built, True


def _libtritonserver(engine: Engine, image: str) -> str:
    """The file name of the server library in `image` (the wheel's, e.g. libtritonserver-<hash>.so)."""
    result = engine.run_once(image, ["sh", "-c", "readlink /opt/tritonserver/lib/libtritonserver.so"], entrypoint=[])
    name = result.output.strip()
    if result.exit_code != 0 or not name:
        raise BuildFailed(f"cannot find the server library in the full image: {result.output.strip()[-200:]}")
    return name
