"""Runs inside the full image during the build (collect stage); stdlib only.

Gathers into an output tree what the selected parts of /opt/tritonserver need at run time and
the min image lacks: shared libraries (from ELF dependencies, via probe.py) and, when the
python backend or a Python-based backend is selected, the python its stub was built for with
its standard library and numpy. The final stage copies that tree onto the min image.

Usage: collect.py --root /opt/tritonserver --min-ld-cache FILE --out DIR PATH...
PATH is relative to the root: a core entry (bin, lib, LICENSE, ...) or backends/NAME,
repoagents/NAME, caches/NAME.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402  (copied beside this script)

FOLDER_KINDS = {"backends": "backend", "repoagents": "repoagent", "caches": "cache"}
# Parts of the standard library a server never imports; ensurepip would bring pip back.
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages", "dist-packages"}


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
                if any(probe.is_under(target, r) for r in roots):
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
    """Library needs of the selected parts, and whether they need the python runtime."""
    needs, missing, python = [], [], False
    wanted = set()
    for path in paths:
        head, _, name = path.partition("/")
        if head in FOLDER_KINDS and name:
            wanted.add((FOLDER_KINDS[head], name))
        elif head in ("bin", "lib"):
            wanted.add(("core", ""))
    if ("core", "") in wanted:
        needs += report["core"]["needs"]
        missing += report["core"]["missing"]
    for component in report["components"]:
        if (component["kind"], component["name"]) in wanted:
            needs += component["needs"]
            missing += component["missing"]
            if component["kind"] == "backend" and (component["name"] == "python" or component["python_based"]):
                python = True
    return needs, missing, python


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/opt/tritonserver")
    parser.add_argument("--min-ld-cache", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv[1:])

    report = probe.probe(args.root)
    if "error" in report:
        print("collect: " + report["error"], file=sys.stderr)
        return 2
    needs, missing, with_python = selected_needs(report, args.paths)
    runtime = report.get("python") if with_python else None
    if with_python and not runtime:
        print("collect: the selection needs the python backend's python, which the full image lacks", file=sys.stderr)
        return 3
    if runtime:
        needs += runtime["needs"]
        missing += runtime["missing"]

    present = min_sonames(args.min_ld_cache)
    out = args.out
    os.makedirs(out, exist_ok=True)
    copied = {}
    for need in needs:
        if os.path.basename(need["path"]) in present or need["soname"] in present:
            continue
        if need["realpath"] not in copied:
            copy_library(out, need)
            copied[need["realpath"]] = need
    python_bytes = 0
    if runtime:
        exe = runtime["executable_realpath"]
        copy_file(exe, out_path(out, exe))
        for name in (runtime["executable"], "/usr/bin/python3"):
            name = placed(name)
            if name != exe:
                link(out_path(out, name), os.path.relpath(exe, os.path.dirname(name)))
        stdlib = os.path.realpath(runtime["stdlib"])
        roots = [stdlib] + [os.path.realpath(p) for p in (runtime["numpy"] or {}).get("paths", [])]
        copy_tree(out, stdlib, roots, skip=STDLIB_SKIP)
        for path in (runtime["numpy"] or {}).get("paths", []):
            real = os.path.realpath(path)
            if os.path.isdir(real):
                copy_tree(out, real, roots)
            else:
                copy_file(real, out_path(out, placed(path)))
        python_bytes = runtime["size"]

    lib_bytes = sum(n["size"] for n in copied.values())
    manifest = {
        "libraries": sorted(copied),
        "python": runtime["version"] if runtime else None,
        "missing": sorted(set(missing) - present),
    }
    with open(os.path.join(os.path.dirname(out.rstrip("/")), "collected.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
    print("collect: %d libraries the min image lacks (%.1f MB)" % (len(copied), lib_bytes / 1e6))
    for path in sorted(copied):
        print("collect:   " + path)
    if runtime:
        print("collect: python %s runtime with numpy %s (%.1f MB)" % (
            runtime["version"], (runtime["numpy"] or {}).get("version", "-"), python_bytes / 1e6))
    if manifest["missing"]:
        print("collect: not found in the full image either: " + ", ".join(manifest["missing"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
