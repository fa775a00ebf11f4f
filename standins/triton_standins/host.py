"""Host-side steps of the stand-in build: a Debian root, wheel downloads, the build context.

These run on the host (containers cannot reach PyPI) and cache their results under
cache_dir(), so a machine does each download once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Sequence

from composer.core.errors import BuildFailed
from composer.core.progress import LineSink


DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# The python the stand-in's Debian ships, and so the stub and wheels it needs.
PYTHON_VERSION = "3.11"
PIP_PLATFORM = "manylinux_2_28_x86_64"
# Older manylinux tags the stand-in's glibc (2.36) also runs: numpy<2 ships only these.
# pip's --platform matches tags exactly: every older manylinux tag the machines' glibc runs
# (NVIDIA's CUDA 13 wheels are tagged anywhere from manylinux1 to manylinux_2_27).
OLDER_PLATFORMS = ("manylinux_2_27_x86_64", "manylinux_2_25_x86_64", "manylinux_2_18_x86_64",
                   "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_12_x86_64",
                   "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")


def cache_dir() -> Path:
    """Where downloads and the Debian root are kept between runs."""
    root = os.environ.get("COMPOSER_CACHE_DIR") or str(Path.home() / ".cache" / "triton-composer")
    return Path(root)


def run(command: Sequence[str], what: str, on_line: LineSink, *, keep: int = 30) -> None:
    """Run a host command, streaming its output; a failure is BuildFailed with the tail."""
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
    except FileNotFoundError as exc:
        raise BuildFailed(f"{what} failed: {command[0]} is not installed (run scripts/bootstrap)") from exc
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            tail = (tail + [line])[-keep:]
            on_line(line)
    code = proc.wait()
    if code != 0:
        last = tail[-1] if tail else "no output"
        raise BuildFailed(f"{what} failed (exit {code}): {last}", log_tail="\n".join(tail))


def debian_rootfs(on_line: LineSink) -> Path:
    """A tarball of a Debian minbase root, made with debootstrap once per machine."""
    target = cache_dir() / "rootfs" / f"debian-{DEBIAN_SUITE}-minbase.tar"
    if target.is_file():
        on_line(f"using cached Debian root {target}")
        return target
    if shutil.which("debootstrap") is None:
        raise BuildFailed(f"cannot make the Debian root: debootstrap is not installed ({_install_hint('debootstrap')})")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=target.parent))
    try:
        root = work / "root"
        on_line(f"debootstrap --variant=minbase {DEBIAN_SUITE} (about a minute, once per machine)")
        run(
            ["debootstrap", "--variant=minbase", DEBIAN_SUITE, str(root), DEBIAN_MIRROR],
            "debootstrap",
            on_line,
        )
        # Downloaded .debs and package lists are not part of a base image.
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / leftover).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = work / "rootfs.tar"
        run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], "packing the Debian root", on_line)
        partial.replace(target)
    finally:
        if _release_mounts(work):
            shutil.rmtree(work, ignore_errors=True)
    return target


def _release_mounts(folder: Path) -> bool:
    """Unmount what a failed debootstrap left mounted (proc, sys) under `folder`.

    True when nothing stays mounted, so deleting the folder cannot reach the host's /proc.
    """
    prefix = str(folder.resolve()) + "/"

    def mounted() -> list[str]:
        try:
            lines = Path("/proc/self/mounts").read_text().splitlines()
        except OSError:
            return []
        points = [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]
        return sorted((p for p in points if p.startswith(prefix)), reverse=True)

    for point in mounted():
        subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return not mounted()


def _pip(args: Sequence[str], what: str, on_line: LineSink) -> None:
    run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], what, on_line)


def pytriton_tree(version: str, on_line: LineSink) -> Path:
    """The unpacked nvidia-pytriton wheel `version` (downloaded on the host, cached)."""
    base = cache_dir() / "pytriton"
    tree = base / version

    def complete(folder: Path) -> bool:
        return (folder / "pytriton" / "tritonserver" / "bin" / "tritonserver").is_file()

    if complete(tree):
        return tree
    downloads = base / "wheels"
    downloads.mkdir(parents=True, exist_ok=True)
    wheels = sorted(downloads.glob(f"nvidia_pytriton-{version}-*.whl"))
    if not wheels:
        on_line(f"downloading nvidia-pytriton=={version}")
        _pip(
            ["download", "--no-deps", "--only-binary=:all:", "--dest", str(downloads), f"nvidia-pytriton=={version}"],
            f"downloading nvidia-pytriton=={version}",
            on_line,
        )
        wheels = sorted(downloads.glob(f"nvidia_pytriton-{version}-*.whl"))
        if not wheels:
            raise BuildFailed(f"downloading nvidia-pytriton=={version} gave no wheel in {downloads}")
    partial = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=base))
    try:
        with zipfile.ZipFile(wheels[-1]) as wheel:
            wheel.extractall(partial)
        _publish(partial, tree, complete)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BuildFailed(f"cannot unpack {wheels[-1].name}: {exc}") from exc
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return tree


def _publish(partial: Path, final: Path, complete: Callable[[Path], bool]) -> None:
    """Move a finished folder into the cache; a concurrent run may have got there first."""
    if final.exists() and complete(final):
        return
    shutil.rmtree(final, ignore_errors=True)  # a stale, incomplete leftover
    try:
        partial.replace(final)
    except OSError:
        if not (final.exists() and complete(final)):
            raise


def _cached(kind: str, name: str, requirements: Sequence[str], fill, complete_when=lambda folder: True) -> Path:
    """A cache folder of `kind` for `requirements`, filled once by `fill(partial_folder)` and
    published whole (a stamp of the requirement list marks it complete)."""
    if not requirements:
        raise ValueError("no requirements")
    wanted = "\n".join([f"# {PIP_PLATFORM} cp{PYTHON_VERSION}", *requirements])
    key = hashlib.sha256(wanted.encode()).hexdigest()[:12]
    folder = cache_dir() / kind / f"{name}-{key}"

    def complete(candidate: Path) -> bool:
        stamp = candidate / ".requirements"
        return stamp.is_file() and stamp.read_text() == wanted and complete_when(candidate)

    if complete(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        fill(partial)
        (partial / ".requirements").write_text(wanted)
        _publish(partial, folder, complete)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def site_packages(name: str, requirements: Sequence[str], on_line: LineSink) -> Path:
    """A folder holding `requirements` for the stand-in's python (no dependency resolution:
    the list is complete on purpose, so numpy stays the system's)."""

    def fill(partial: Path) -> None:
        on_line(f"downloading for the {name} backend: {' '.join(requirements)}")
        _pip(
            [
                "install", "--quiet", "--no-deps", "--only-binary=:all:", "--no-compile",
                "--target", str(partial), "--python-version", PYTHON_VERSION,
                "--implementation", "cp", "--platform", PIP_PLATFORM, *requirements,
            ],
            f"downloading the {name} backend's packages",
            on_line,
        )
        shutil.rmtree(partial / "bin", ignore_errors=True)  # console scripts are useless in a backend folder

    return _cached("site-packages", name, requirements, fill)


def wheels(name: str, requirements: Sequence[str], on_line: LineSink) -> Path:
    """A folder of wheels for the stand-in's python, for pip to install inside the build
    (containers cannot reach PyPI). Cached per requirement list; no dependencies fetched."""

    def fill(partial: Path) -> None:
        on_line(f"downloading wheels: {' '.join(requirements)}")
        _pip(
            [
                "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", str(partial),
                "--python-version", PYTHON_VERSION, "--implementation", "cp",
                *(f"--platform={tag}" for tag in (PIP_PLATFORM, *OLDER_PLATFORMS)), *requirements,
            ],
            f"downloading {' '.join(requirements)}",
            on_line,
        )

    return _cached("wheels", name, requirements, fill, complete_when=lambda folder: any(folder.glob("*.whl")))


def normalise_modes(folder: Path) -> None:
    """Folders 0755, files 0755 or 0644: readable by all, writable by the owner only, as in
    NGC's images (cached downloads keep the 0700 of their temporary folders otherwise)."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        wanted = 0o755 if path.is_dir() or mode & 0o111 else 0o644
        if mode & 0o7777 != wanted:
            path.chmod(wanted)


def link_tree(src: Path, dst: Path) -> None:
    """Copy a folder into a build context, hard-linking when the filesystem allows."""

    def link_or_copy(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link_or_copy, symlinks=True, dirs_exist_ok=True)


def _install_hint(package: str) -> str:
    """How to get a host tool on this machine's distribution."""
    import distro

    if distro.id() in ("debian", "ubuntu") or "debian" in distro.like().split():
        return f"run scripts/bootstrap, or apt-get install {package}"
    name = distro.name(pretty=True) or "this system"
    return f"install {package} with the package manager of {name}"
