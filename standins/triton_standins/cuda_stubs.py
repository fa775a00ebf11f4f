"""Stub CUDA libraries for a Python-based backend whose PyPI wheel is a CUDA build (torch).

PyPI's Linux torch wheels NEED CUDA's libraries (libcudart, libcublas, cuDNN, NCCL, ...) and
expect them from NVIDIA's wheels, gigabytes the small stand-ins cannot carry. NVIDIA's own
toolkit solves the same problem for its driver with link stubs: a library of the right soname
and symbol versions whose functions only report an error. This module writes such stubs from
the wheel's own ELF tables (read with binutils' readelf on the host), to be compiled in the
image: every library the wheel NEEDS and does not carry gets a soname, its version node and the
functions the wheel calls; each returns "no device" (100) for CUDA's runtime and driver entry
points, 1 ("not initialized") for the rest, or an error text for the *GetErrorString family.
torch then runs on the CPU exactly as it does on a host with CUDA installed and no GPU.

Older torch wheels (and NGC's torch folders) also hold test binaries that NEED libtorch.so with no
RUNPATH to torch/lib, which no loader resolves; the composer's pruned-base proof must tell those
from what pruning broke. PyPI's 2.13 wheel has none, so the stand-in carries one such binary.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# Libraries of the C runtime every image has: their symbols never need a stub.
SYSTEM_LIBRARIES = (
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
    "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libgomp.so.1",
)
# The GPU driver's libraries come from the host at run time (the NVIDIA container runtime), never
# from an image: no stub stands in for them, as no copy would.
_DRIVER = re.compile(r"^(libcuda\.so|libnvidia-)")
# Functions returning a text rather than a status.
_STRING_FUNCTION = re.compile(r"Get(Error|Status)(String|Name)$")
_CUDA_NO_DEVICE = re.compile(r"^cu(da)?[A-Z]")
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[(.+)\]")
_RPATH = re.compile(r"\((?:RPATH|RUNPATH)\)\s+Library (?:rpath|runpath): \[(.+)\]")
_VERNEED_FILE = re.compile(r"Version: \d+\s+File: (\S+)")
_VERNEED_NAME = re.compile(r"Name: (\S+)\s+Flags")


@dataclass
class _Elf:
    needed: list[str] = field(default_factory=list)
    rpath: list[str] = field(default_factory=list)
    defined: set[str] = field(default_factory=set)
    undefined: list[tuple[str, str, str]] = field(default_factory=list)  # (name, version, type)
    version_file: dict[str, str] = field(default_factory=dict)


def _readelf(path: Path, *flags: str) -> str:
    return subprocess.run(["readelf", "-W", *flags, str(path)], check=True, capture_output=True, text=True).stdout


def _read(path: Path) -> _Elf:
    elf = _Elf()
    for line in _readelf(path, "-d").splitlines():
        if m := _NEEDED.search(line):
            elf.needed.append(m.group(1))
        elif m := _RPATH.search(line):
            elf.rpath.extend(m.group(1).split(":"))
    current = ""
    for line in _readelf(path, "-V").splitlines():
        if m := _VERNEED_FILE.search(line):
            current = m.group(1)
        elif current and (m := _VERNEED_NAME.search(line)):
            elf.version_file[m.group(1)] = current
    for line in _readelf(path, "--dyn-syms").splitlines():
        cols = line.split()
        if len(cols) < 8 or not cols[0].rstrip(":").isdigit():
            continue
        kind, bind, ndx, name = cols[3], cols[4], cols[6], cols[7]
        base, _, version = name.partition("@")
        version = version.lstrip("@")
        if ndx != "UND":
            elf.defined.add(base)
        elif bind == "GLOBAL" and base:
            elf.undefined.append((base, version, kind))
    return elf


def _system_symbols() -> set[str]:
    """Symbols the C runtime of this (Debian, like the image's) host defines."""
    listing = subprocess.run(["ldconfig", "-p"], check=True, capture_output=True, text=True).stdout
    paths = {}
    for line in listing.splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and "x86-64" in parts[0]:
            paths.setdefault(parts[0].split()[0], Path(parts[1]))
    symbols: set[str] = set()
    for name in SYSTEM_LIBRARIES:
        if name in paths:
            symbols |= _read(paths[name]).defined
    return symbols


def write_stubs(lib_dir: Path, extra: list[Path], dest: Path) -> str | None:
    """Write `<soname>.c` and `<soname>.map` into `dest` for every library the ELF files in
    `lib_dir` (and `extra`) NEED and do not carry, and `build.sh`, which compiles them into
    OUT/<where> (the first RPATH entry below the wheel's nvidia/ tree, relative to the folder
    above `lib_dir`'s package) and a test binary into OUT/<package>/bin/ (test_shim); returns <where>, or
    None when nothing is missing."""
    files = sorted(p for p in lib_dir.iterdir() if p.is_file() and ".so" in p.name) + extra
    elves = {p: _read(p) for p in files}
    own = {p.name for p in files}
    needed = {n for e in elves.values() for n in e.needed if not _DRIVER.match(n)}
    missing = sorted(needed - own - set(SYSTEM_LIBRARIES))
    if not missing:
        return None
    defined = set().union(*(e.defined for e in elves.values())) | _system_symbols()
    per_lib: dict[str, dict[str, str]] = defaultdict(dict)
    version_of: dict[str, str] = {}
    for elf in elves.values():
        for name, version, kind in elf.undefined:
            owner = elf.version_file.get(version) if version else None
            if owner in missing:
                per_lib[owner][name] = kind
                version_of[owner] = version
            elif not version and name not in defined:
                # Unversioned and defined nowhere: libcudart is in every CUDA file's closure.
                host = next((m for m in missing if m.startswith("libcudart.")), missing[0])
                per_lib[host][name] = kind
    dest.mkdir(parents=True, exist_ok=True)
    for soname in missing:
        symbols = per_lib.get(soname, {})
        lines = [f"/* Stub of {soname} for the stand-in: CUDA is not available. */"]
        for name, kind in sorted(symbols.items()):
            if kind == "OBJECT":
                lines.append(f"char {name}[256];")
            elif _STRING_FUNCTION.search(name):
                lines.append(f'const char *{name}(void) {{ return "CUDA is not available (stand-in stub)"; }}')
            else:
                code = 100 if _CUDA_NO_DEVICE.match(name) else 1
                lines.append(f"long {name}(void) {{ return {code}; }}")
        (dest / f"{soname}.c").write_text("\n".join(lines) + "\n")
        version = version_of.get(soname, soname)
        (dest / f"{soname}.map").write_text(f"{version} {{\n  global: *;\n}};\n")
    rpath = next((r for r in elves[files[0]].rpath if "/nvidia/" in r), "$ORIGIN")
    package = lib_dir.parent.name  # torch
    where = posixpath.normpath(f"{package}/lib/" + rpath.replace("$ORIGIN", ".", 1))
    (dest / "test_shim.c").write_text("int main(void) { return 0; }\n")
    (dest / "build.sh").write_text(_BUILD.format(where=where, package=package,
                                                 stubs=" ".join(missing)))
    return where


# Compiles the stubs (BUILD SRC OUT) and the unresolvable test binary, laid out as the wheel's tree
# so one COPY (with its owner) puts every folder in place.
_BUILD = """#!/bin/sh
set -eu
src=$1 out=$2
mkdir -p "$out/{where}" "$out/{package}/bin" /tmp/fake-libtorch
for lib in {stubs}; do
  gcc -shared -fPIC -O1 -w -Wl,-soname,$lib -Wl,--version-script,"$src/$lib.map" -o "$out/{where}/$lib" "$src/$lib.c"
done
echo 'void torch_test_helper(void) {{}}' > /tmp/fake-libtorch/t.c
gcc -shared -fPIC -o /tmp/fake-libtorch/libtorch.so -Wl,-soname,libtorch.so /tmp/fake-libtorch/t.c
gcc -o "$out/{package}/bin/test_shim" "$src/test_shim.c" -Wl,--no-as-needed -L/tmp/fake-libtorch -ltorch
"""
