"""Runs inside the full image during the build (collect stage); stdlib only.

Gathers into an output tree what the selected parts of /opt/tritonserver need at run time and
the min image lacks, and the final stage copies that tree onto the min image:
- system libraries, from the ELF dependencies of every file of the selected parts (probe.py,
  elfdeps.py);
- libraries loaded at run time with dlopen, which no ELF entry names: each system library
  taken brings the runtime shared libraries of the dpkg package that installed it (the
  full image's /var/lib/dpkg/info/*.list), as DCGM's modules come with libdcgm. Libraries
  inside a component's folder (bundled ones found through RUNPATH $ORIGIN, plugins) need
  nothing here: the whole folder is copied;
- the python the python backend stub was built for, with its standard library and numpy,
  when the python backend or a Python-based backend is selected.
A needed library found nowhere fails the build, naming it; driver libraries (libcuda,
libnvidia-ml, ...) are never copied: the NVIDIA container runtime injects them.

It writes a report of what it took: on stdout (the build log), beside the output folder
(collected.json) and into the output tree as ROOT/collected.json.

Usage: collect.py --root /opt/tritonserver --min-ld-cache FILE --out DIR [--python-out DIR] PATH...
PATH is relative to the root: a core entry (bin, lib, LICENSE, ...) or backends/NAME,
repoagents/NAME, caches/NAME.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elfdeps  # noqa: E402  (copied beside this script)
import probe  # noqa: E402

FOLDER_KINDS = {"backends": "backend", "repoagents": "repoagent", "caches": "cache"}
# Parts of the standard library a server never imports; ensurepip would bring pip back.
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages", "dist-packages"}
DPKG_INFO = "/var/lib/dpkg/info"
# Libraries of the GPU driver: the NVIDIA container runtime mounts them into the container
# at run time, matching the host's driver; a copy in the image would shadow them.
DRIVER_LIBRARY = re.compile(
    r"^lib(cuda|cudadebugger|nvidia-[\w.-]+|nvcuvid|nvoptix|nvidia|GLX_nvidia|EGL_nvidia|GLESv\d_nvidia)\.so(\.|$)")
# Runtime shared libraries in a package's file list (libfoo.so.1, engines-3/afalg.so, ...).
RUNTIME_LIBRARY = re.compile(r"\.so(\.\d+)*$")
NOT_RUNTIME = ("/usr/share/", "/usr/include/", "/usr/src/", "/etc/")
# NVIDIA's user-space libraries (CUDA toolkit, cuDNN, NCCL, TensorRT), for the report of what
# each backend reaches; the driver's are DRIVER_LIBRARY.
NVIDIA_LIBRARY = re.compile(
    r"^lib(cudart|cublas|cublasLt|nvblas|cufft\w*|curand|cusparse\w*|cusolver\w*|nvJitLink|nvrtc[\w-]*|cupti|"
    r"nvperf_\w+|nvToolsExt|cudnn\w*|nccl|nvinfer\w*|nvonnxparser)([-.]|$)")


def min_sonames(cache):
    """Sonames the min image's loader knows, read from a copy of its /etc/ld.so.cache."""
    try:
        out = subprocess.run(["ldconfig", "-p", "-C", cache], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, check=True).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.CalledProcessError):
        return set()
    names = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if line:
            names.add(line.split()[0])
    return names


def placed(path):
    """Where a file goes in the output: its folder resolved, so that no symlinked folder of
    the min image (/lib -> usr/lib) is ever replaced by a real one."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def out_path(out, path):
    return os.path.join(out, path.lstrip("/"))


def copy_file(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if not os.path.lexists(dst):
        shutil.copy2(src, dst)


def link(dst, target):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if not os.path.lexists(dst):
        os.symlink(target, dst)


def copy_library(out, need):
    """The library file, and the name the loader looks for as a link to it."""
    real = need["realpath"]
    copy_file(real, out_path(out, real))
    name = placed(need["path"])
    if name != real:
        link(out_path(out, name), os.path.relpath(real, os.path.dirname(name)))


def is_driver_library(name):
    return bool(DRIVER_LIBRARY.match(os.path.basename(name)))


class Packages(object):
    """Which dpkg package installed a file, and its runtime shared libraries."""

    def __init__(self, info_dir=DPKG_INFO):
        self.files = {}  # package -> listed paths
        self.owner = {}  # placed path -> package
        for listing in sorted(glob.glob(os.path.join(info_dir, "*.list"))):
            package = os.path.basename(listing)[:-len(".list")]
            try:
                with open(listing, "r", errors="replace") as fh:
                    paths = [line.rstrip("\n") for line in fh if line.startswith("/")]
            except OSError:
                continue
            self.files[package] = paths
            for path in paths:
                self.owner.setdefault(placed(path), package)

    def package_of(self, path):
        """The package that installed `path` (through /lib -> usr/lib and the like), or None."""
        for candidate in (placed(path), os.path.realpath(path)):
            if candidate in self.owner:
                return self.owner[candidate]
        return None

    def runtime_libraries(self, package):
        """The package's runtime shared libraries: no headers, archives, docs; none of a -dev."""
        if package is None or package.split(":")[0].endswith(("-dev", "-dbg")):
            return []
        found = []
        for path in self.files.get(package, ()):
            if path.startswith(NOT_RUNTIME) or not RUNTIME_LIBRARY.search(os.path.basename(path)):
                continue
            if os.path.isfile(path):  # follows links: a dangling one is no library
                found.append(placed(path))
        return sorted(set(found))


def copy_tree(out, top, roots, skip=()):
    """Copy `top` keeping links inside `roots`; a link leading outside is replaced by what it
    points to (or dropped when that is gone), so nothing in the result dangles."""
    top = os.path.realpath(top)
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in list(dirnames) + filenames:
            src = os.path.join(dirpath, name)
            dst = out_path(out, src)
            if os.path.islink(src):
                target = os.path.realpath(src)
                if any(elfdeps.is_under(target, r) for r in roots):
                    link(dst, os.readlink(src))
                elif os.path.isfile(target):
                    copy_file(target, dst)
                if name in dirnames:
                    dirnames.remove(name)
            elif os.path.isfile(src):
                copy_file(src, dst)
            elif os.path.isdir(src):
                os.makedirs(dst, exist_ok=True)


def selected_needs(report, paths):
    """Library needs of the selected parts, what they miss (soname, part), whether they need
    the python runtime, and their folders' bundled libraries and plugins."""
    needs, missing, python = [], [], False
    folders = {}
    wanted = set()
    for path in paths:
        head, _, name = path.partition("/")
        if head in FOLDER_KINDS and name:
            wanted.add((FOLDER_KINDS[head], name))
        elif head in ("bin", "lib"):
            wanted.add(("core", ""))
    if ("core", "") in wanted:
        needs += report["core"]["needs"]
        missing += [(soname, "the server") for soname in report["core"]["missing"]]
    for component in report["components"]:
        if (component["kind"], component["name"]) in wanted:
            label = "%s %s" % (component["kind"], component["name"])
            needs += component["needs"]
            missing += [(soname, label) for soname in component["missing"]]
            folders[label] = {"bundled": component.get("bundled", []), "plugins": component.get("plugins", [])}
            if component["kind"] == "backend" and (component["name"] == "python" or component["python_based"]):
                python = True
    return needs, missing, python, folders


def gather(needs, present, resolver, packages, root):
    """What to copy: the needs the min image lacks and, for each one taken from a system
    folder, its package's runtime libraries with what they need in turn.

    Returns (system, siblings, drivers, skipped): system and siblings are need dicts with
    their "package" (siblings also "for": the system library that brought them); drivers
    are the driver sonames left out; skipped are siblings the full image cannot load either.
    """
    system, siblings, drivers, skipped = {}, {}, set(), []
    queue = [(need, None) for need in needs]
    seen_packages = set()
    while queue:
        need, sibling_of = queue.pop(0)
        if is_driver_library(need["soname"]) or is_driver_library(need["path"]):
            drivers.add(os.path.basename(need["soname"]))
            continue
        real = need["realpath"]
        if os.path.basename(need["path"]) in present or need["soname"] in present:
            continue
        if real in system or real in siblings:
            continue
        package = packages.package_of(need["path"])
        if sibling_of is None:
            system[real] = dict(need, package=package)
        else:
            siblings[real] = dict(need, package=package, **{"for": sibling_of})
        if package is None or package in seen_packages:
            continue
        seen_packages.add(package)
        for path in packages.runtime_libraries(package):
            if path == placed(need["path"]) or os.path.realpath(path) in system or os.path.realpath(path) in siblings:
                continue
            if os.path.basename(path) in present or resolver.elf(path) is None:
                continue
            extra, lacking = resolver.closure([path], inside=[root])
            lacking = [s for s in lacking if not is_driver_library(s) and s not in present]
            if lacking:
                skipped.append({"path": path, "package": package, "reason": "needs " + ", ".join(lacking)})
                continue
            brought_by = sibling_of or need["soname"]
            queue.append((resolver.need(os.path.basename(path), path), brought_by))
            queue.extend((n, brought_by) for n in extra)
    return list(system.values()), list(siblings.values()), sorted(drivers), skipped


def is_nvidia_library(path):
    return bool(NVIDIA_LIBRARY.match(os.path.basename(path)))


def nvidia_reach(report, paths, present, packages):
    """Per selected backend, the NVIDIA libraries it reaches and where each comes from: its own
    folder, the min image (with the package, and the package's libraries loaded by name at run
    time, as cuDNN loads its sub-libraries) or the full image (copied by this collection)."""
    wanted = {path.partition("/")[2] for path in paths if path.startswith("backends/")}
    reach = {}
    for component in report["components"]:
        if component["kind"] != "backend" or component["name"] not in wanted:
            continue
        found, files = {}, set()  # one entry per file: its soname, not also its versioned name
        for path in component.get("bundled", []) + component.get("plugins", []):
            if is_nvidia_library(path):
                found[os.path.basename(path)] = {"from": "backend folder", "path": path}
        for need in component["needs"]:
            name = os.path.basename(need["soname"])
            if not is_nvidia_library(name) or name in found or os.path.realpath(need["path"]) in files:
                continue
            files.add(os.path.realpath(need["path"]))
            package = packages.package_of(need["path"])
            where = "min image" if (name in present or os.path.basename(need["path"]) in present) else "full image"
            found[name] = {"from": where, "path": need["path"], "package": package}
            if package is None:
                continue
            for sibling in packages.runtime_libraries(package):
                base = os.path.basename(sibling)
                if base not in found and is_nvidia_library(base) and os.path.realpath(sibling) not in files:
                    files.add(os.path.realpath(sibling))
                    found[base] = {"from": where, "path": sibling, "package": package,
                                   "loaded_by_name_with": name}
        reach["backend " + component["name"]] = [dict(item, library=name) for name, item in sorted(found.items())]
    return reach


def write_report(out, root, report):
    """collected.json beside the output folder and inside the output tree (ROOT/collected.json)."""
    text = json.dumps(report, indent=1, sort_keys=True)
    for path in (os.path.join(os.path.dirname(out.rstrip("/")), "collected.json"),
                 out_path(out, os.path.join(root, "collected.json"))):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text + "\n")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/opt/tritonserver")
    parser.add_argument("--min-ld-cache", required=True)
    parser.add_argument("--dpkg-info", default=DPKG_INFO)
    parser.add_argument("--out", required=True)
    # The python runtime in a tree of its own, so the image holds it as a layer of its own (and the
    # size report can tell it from the libraries); by default it goes into --out.
    parser.add_argument("--python-out")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv[1:])

    report = probe.probe(args.root)
    if "error" in report:
        print("collect: " + report["error"], file=sys.stderr)
        return 2
    needs, missing, with_python, folders = selected_needs(report, args.paths)
    runtime = report.get("python") if with_python else None
    if with_python and not runtime:
        print("collect: the selection needs the python backend's python, which the full image lacks", file=sys.stderr)
        return 3
    if runtime:
        needs += runtime["needs"]
        missing += [(soname, "python %s" % runtime["version"]) for soname in runtime["missing"]]

    present = min_sonames(args.min_ld_cache)
    lost = sorted({(soname, who) for soname, who in missing if soname not in present and not is_driver_library(soname)})
    if lost:
        for soname, who in lost:
            print("collect: %s needs %s, found in neither the full image nor the min image" % (who, soname),
                  file=sys.stderr)
        return 4
    resolver = elfdeps.Resolver(os.path.normpath(args.root), report["system_dirs"], report["ld_library_path"])
    packages = Packages(args.dpkg_info)
    system, siblings, drivers, skipped = gather(needs, present, resolver, packages, os.path.normpath(args.root))
    drivers = sorted(set(drivers) | {s for s, _ in missing if is_driver_library(s)})

    out = args.out
    os.makedirs(out, exist_ok=True)
    python_out = args.python_out or out
    os.makedirs(python_out, exist_ok=True)
    for need in system + siblings:
        copy_library(out, need)
    python_bytes = 0
    if runtime:
        exe = runtime["executable_realpath"]
        copy_file(exe, out_path(python_out, exe))
        for name in (runtime["executable"], "/usr/bin/python3"):
            name = placed(name)
            if name != exe:
                link(out_path(python_out, name), os.path.relpath(exe, os.path.dirname(name)))
        stdlib = os.path.realpath(runtime["stdlib"])
        roots = [stdlib] + [os.path.realpath(p) for p in (runtime["numpy"] or {}).get("paths", [])]
        copy_tree(python_out, stdlib, roots, skip=STDLIB_SKIP)
        for path in (runtime["numpy"] or {}).get("paths", []):
            real = os.path.realpath(path)
            if os.path.isdir(real):
                copy_tree(python_out, real, roots)
            else:
                copy_file(real, out_path(python_out, placed(path)))
        python_bytes = runtime["size"]

    def entry(need):
        item = {"path": need["realpath"], "soname": need["soname"], "package": need.get("package"), "size": need["size"]}
        if "for" in need:
            item["for"] = need["for"]
        return item

    manifest = {
        "libraries": sorted({n["realpath"] for n in system + siblings}),
        "system": sorted((entry(n) for n in system), key=lambda e: e["path"]),
        "package_siblings": sorted((entry(n) for n in siblings), key=lambda e: e["path"]),
        "bundled": {label: f["bundled"] for label, f in sorted(folders.items()) if f["bundled"]},
        "plugins": {label: f["plugins"] for label, f in sorted(folders.items()) if f["plugins"]},
        "skipped": skipped,
        "drivers": drivers,
        "python": runtime["version"] if runtime else None,
        "missing": [],
        "nvidia": nvidia_reach(report, args.paths, present, packages),
    }
    write_report(out, args.root, manifest)
    print_report(manifest, runtime, python_bytes)
    return 0


def print_report(manifest, runtime, python_bytes):
    """The report in the build log, one line per library."""
    system_bytes = sum(e["size"] for e in manifest["system"])
    print("collect: %d system libraries the min image lacks (%.1f MB)" % (len(manifest["system"]), system_bytes / 1e6))
    for item in manifest["system"]:
        print("collect:   system  %s (%s)" % (item["path"], item["package"] or "no package"))
    sibling_bytes = sum(e["size"] for e in manifest["package_siblings"])
    print("collect: %d more from their packages, for loading at run time (%.1f MB)" % (
        len(manifest["package_siblings"]), sibling_bytes / 1e6))
    for item in manifest["package_siblings"]:
        print("collect:   dlopen  %s (%s, with %s)" % (item["path"], item["package"], item["for"]))
    for item in manifest["skipped"]:
        print("collect:   left out %s (%s): the full image cannot load it either, it %s" % (
            item["path"], item["package"], item["reason"]))
    if manifest["bundled"] or manifest["plugins"]:
        print("collect: libraries inside the selected folders (copied with their folder):")
    for label, paths in manifest["bundled"].items():
        for path in paths:
            print("collect:   bundled %s (%s, found through its RUNPATH)" % (path, label))
    for label, paths in manifest["plugins"].items():
        for path in paths:
            print("collect:   dlopen  %s (%s, needed by no file: loaded at run time)" % (path, label))
    for label, libraries in manifest["nvidia"].items():
        if libraries:
            print("collect: NVIDIA libraries %s reaches:" % label)
        for item in libraries:
            how = " (%s)" % item["package"] if item.get("package") else ""
            if item.get("loaded_by_name_with"):
                how += ", loaded by name with %s" % item["loaded_by_name_with"]
            print("collect:   %-40s from the %s%s" % (item["library"], item["from"], how))
    if manifest["drivers"]:
        print("collect: driver libraries left to the NVIDIA container runtime: " + ", ".join(manifest["drivers"]))
    if runtime:
        print("collect: python %s runtime with numpy %s (%.1f MB)" % (
            runtime["version"], (runtime["numpy"] or {}).get("version", "-"), python_bytes / 1e6))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
