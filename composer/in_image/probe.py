"""Probe a full Triton image from the inside: what it offers and what its parts need.

Runs INSIDE the image (`python3 /tmp/composer_probe.py [root]`, elfdeps.py copied beside it) and
prints one JSON document on stdout. It must stay stdlib-only, Python 3.8 compatible and free of
imports from the composer package, because it is copied into the container without it.

What each file needs is found by elfdeps.py, from the files themselves, as the loader would.
"""

from __future__ import annotations

import json
import os
import platform
import re
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elfdeps  # noqa: E402  (copied beside this script)

DEFAULT_ROOT = "/opt/tritonserver"
KIND_DIRS = (("backend", "backends"), ("cache", "caches"), ("repoagent", "repoagents"))
LIBRARY_PREFIX = {"backend": "libtriton_", "repoagent": "libtritonrepoagent_", "cache": "libtritoncache_"}
CORE_FILES = ("LICENSE", "TRITON_VERSION", "NVIDIA_Deep_Learning_Container_License.pdf")
STUB = "backends/python/triton_python_backend_stub"




def walk_files(top, skip=()):
    """Regular files and symlinks under `top` (a file or folder), never following links.

    Folders named in `skip` (full paths) are left out.
    """
    try:
        st = os.lstat(top)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        yield top, st
        return
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) not in skip)
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            try:
                yield path, os.lstat(path)
            except OSError:
                pass


def size_of(paths, skip=()):
    """Bytes of the files under `paths`; a hardlinked file counts once."""
    total = 0
    inodes = set()
    for top in paths:
        for _path, st in walk_files(top, skip):
            if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in inodes:
                    continue
                inodes.add(key)
            total += st.st_size
    return total


def elf_files(resolver, paths, suffix=None, skip=()):
    """Regular ELF files under `paths` (optionally only names containing `suffix`)."""
    found = []
    for top in paths:
        for path, st in walk_files(top, skip):
            if not stat.S_ISREG(st.st_mode) or st.st_size < 64:
                continue
            if suffix and suffix not in os.path.basename(path):
                continue
            if resolver.elf(path) is not None:
                found.append(path)
    return found


def local_sonames(resolver, files):
    """soname (and file name) -> path for the objects of one unit."""
    local = {}
    for path in files:
        info = resolver.elf(path)
        for name in (info.soname, os.path.basename(path)):
            if name and name not in local:
                local[name] = path
    return local


def find_library(folder, kind, name):
    expected = LIBRARY_PREFIX[kind] + name + ".so"
    if os.path.isfile(os.path.join(folder, expected)):
        return expected
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    for entry in names:
        if entry.startswith("libtriton") and entry.endswith(".so") and os.path.isfile(os.path.join(folder, entry)):
            return entry
    return None


def folder_roles(resolver, files, local, library=None):
    """(bundled, plugins) among the ELF `files` of one component folder.

    bundled: objects another object of the folder lists as NEEDED (found through its
    RUNPATH/RPATH, e.g. $ORIGIN); plugins: shared objects nothing in the folder needs, so
    loaded at run time with dlopen (the component's own library aside).
    """
    reached = set()
    for path in files:
        for soname, resolved in resolver.deps(path):
            resolved = resolved or local.get(soname)
            if resolved:
                reached.add(os.path.realpath(resolved))
    bundled, plugins = [], []
    for path in files:
        if os.path.realpath(path) in reached:
            bundled.append(path)
        elif ".so" in os.path.basename(path) and os.path.basename(path) != library and resolver.elf(path).type == 3:
            plugins.append(path)
    return sorted(bundled), sorted(plugins)


def probe_core(resolver, root):
    paths = [os.path.join(root, p) for p in ("bin", "lib") + CORE_FILES + ("include",)]
    paths = [p for p in paths if os.path.lexists(p)]
    include = os.path.join(root, "include")
    counted = [p for p in paths if p != include]
    files = elf_files(resolver, counted)
    needs, missing = resolver.closure(files, inside=[root], local=local_sonames(resolver, files))
    return {
        "paths": paths,
        "size": size_of(counted),
        "include_size": size_of([include]) if os.path.isdir(include) else 0,
        "needs": needs,
        "missing": missing,
    }


def probe_components(resolver, root):
    core_stop = [os.path.join(root, "bin"), os.path.join(root, "lib")]
    core_local = local_sonames(resolver, elf_files(resolver, core_stop))
    components = []
    for kind, dirname in KIND_DIRS:
        parent = os.path.join(root, dirname)
        try:
            names = sorted(os.listdir(parent))
        except OSError:
            continue
        for name in names:
            folder = os.path.join(parent, name)
            if not os.path.isdir(folder):
                continue
            library = find_library(folder, kind, name)
            python_based = kind == "backend" and library is None and os.path.isfile(os.path.join(folder, "model.py"))
            files = elf_files(resolver, [folder])
            local = local_sonames(resolver, files)
            local.update((k, v) for k, v in core_local.items() if k not in local)
            needs, missing = resolver.closure(files, inside=[root], stop=core_stop, local=local)
            bundled, plugins = folder_roles(resolver, files, local, library)
            components.append({
                "kind": kind,
                "name": name,
                "path": folder,
                "size": size_of([folder]),
                "library": library,
                "python_based": python_based,
                "requires": ["python"] if python_based else [],
                "needs": needs,
                "missing": missing,
                "bundled": bundled,
                "plugins": plugins,
                "providers": ort_providers(folder),
            })
    return components


ORT_PROVIDER_PREFIX, ORT_PROVIDER_SUFFIX = "libonnxruntime_providers_", ".so"


def ort_providers(folder):
    """ONNX Runtime's execution provider libraries in a backend folder, by name
    (libonnxruntime_providers_cuda.so -> cuda; "shared" included): none outside onnxruntime's."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [n[len(ORT_PROVIDER_PREFIX):-len(ORT_PROVIDER_SUFFIX)] for n in names
            if n.startswith(ORT_PROVIDER_PREFIX) and n.endswith(ORT_PROVIDER_SUFFIX)
            and len(n) > len(ORT_PROVIDER_PREFIX) + len(ORT_PROVIDER_SUFFIX)]


def stub_python(resolver, root):
    """(version, libpython soname) the python backend stub was linked against, or (None, None)."""
    stub = os.path.join(root, STUB)
    info = resolver.elf(stub) if os.path.isfile(stub) else None
    for name in (info.needed if info else []):
        match = re.match(r"libpython(\d+\.\d+)", name)
        if match:
            return match.group(1), name
    return None, None


def _numpy_version(site_dir, entries):
    """numpy's version from its dist-info/egg-info metadata, else its name, else version.py."""
    for entry in entries:
        match = re.match(r"numpy-([^-]+?)(?:-py[\d.]+)?\.(dist-info|egg-info)$", entry)
        if not match:
            continue
        meta = os.path.join(site_dir, entry)
        if os.path.isdir(meta):
            meta = os.path.join(meta, "METADATA" if entry.endswith("dist-info") else "PKG-INFO")
        try:
            with open(meta, "r", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return match.group(1)
    try:
        with open(os.path.join(site_dir, "numpy", "version.py"), "r", errors="replace") as fh:
            match = re.search(r"""^(?:full_)?version\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", fh.read(), re.M)
            return match.group(1) if match else None
    except OSError:
        return None


def find_numpy(site_dirs):
    """The numpy the interpreter would import first: {"version", "paths"} or None."""
    for site_dir in site_dirs:
        if not os.path.isfile(os.path.join(site_dir, "numpy", "__init__.py")):
            continue
        entries = sorted(os.listdir(site_dir))
        paths = [os.path.join(site_dir, "numpy")]
        paths += [os.path.join(site_dir, e) for e in entries
                  if re.match(r"numpy-.*\.(dist-info|egg-info)$", e) or e == "numpy.libs"]
        return {"version": _numpy_version(site_dir, entries), "paths": paths}
    return None


def _interpreter_layout(version):
    """(executable, stdlib, site_dirs) of python `version`, from this interpreter when it is that one."""
    current = "%d.%d" % sys.version_info[:2]
    exe = None
    for candidate in ("/usr/bin/python" + version, "/usr/local/bin/python" + version):
        if os.path.isfile(candidate):
            exe = candidate
            break
    if version == current:  # this interpreter: trust its own layout over guesses
        import site
        import sysconfig

        paths = sysconfig.get_paths()
        stdlib = paths["stdlib"]
        site_dirs = list(site.getsitepackages()) + [paths["purelib"], paths["platlib"]]
        site_dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        exe = os.path.realpath(sys.executable) if sys.executable else exe
    else:
        prefixes = ["/usr/local", "/usr"]
        stdlib = next((p + "/lib/python" + version for p in prefixes[::-1]
                       if os.path.isdir(p + "/lib/python" + version)), "/usr/lib/python" + version)
        site_dirs = []
        for prefix in prefixes:
            for sub in ("dist-packages", "site-packages"):
                site_dirs.append("%s/lib/python%s/%s" % (prefix, version, sub))
            site_dirs.append("%s/lib/python3/dist-packages" % prefix)
    return exe, stdlib, elfdeps.unique(os.path.normpath(d) for d in site_dirs if os.path.isdir(d))


def probe_python(resolver, wanted, libpython):
    """The python the stub needs (or python3 when none/absent), or None if there is none."""
    version = wanted
    exe, stdlib, site_dirs = _interpreter_layout(version) if version else (None, None, [])
    if exe is None:  # no python of the stub's version: describe python3 instead
        version = "%d.%d" % sys.version_info[:2]
        exe, stdlib, site_dirs = _interpreter_layout(version)
        libpython = None
    if exe is None or not os.path.exists(exe):
        return None
    libpython = libpython or "libpython%s.so.1.0" % version
    numpy = find_numpy(site_dirs)
    pip = any(os.path.isfile(os.path.join(d, "pip", "__init__.py")) for d in site_dirs)
    numpy_paths = numpy["paths"] if numpy else []
    # Some layouts (pyenv, venvs) keep site-packages inside the stdlib: not part of the runtime.
    skip = {os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages")}
    own = [os.path.realpath(exe), stdlib] + numpy_paths
    seeds = [os.path.realpath(exe)] + elf_files(resolver, [stdlib], ".so", skip) + elf_files(resolver, numpy_paths, ".so")
    local = local_sonames(resolver, seeds)
    needs, missing = resolver.closure(seeds, inside=own, local=local)
    exe_info = resolver.elf(exe)
    dirs = resolver.search_dirs(exe, exe_info) if exe_info else resolver.system_dirs
    found = resolver.find(libpython, dirs, exe_info.machine if exe_info else 62)
    if found is None:
        missing = sorted(set(missing) | {libpython})
    else:
        extra, extra_missing = resolver.closure([found], inside=own, local=local)
        byp = {n["path"]: n for n in needs + [resolver.need(libpython, found)] + extra}
        needs = [byp[p] for p in sorted(byp)]
        missing = sorted(set(missing) | set(extra_missing))
    return {
        "version": version,
        "executable": exe,
        "executable_realpath": os.path.realpath(exe),
        "stdlib": stdlib,
        "libpython": libpython,
        "numpy": numpy,
        "site_dirs": site_dirs,
        "pip": pip,
        "externally_managed": os.path.isfile(os.path.join(stdlib, "EXTERNALLY-MANAGED")),
        "needs": needs,
        "missing": missing,
        "size": size_of(elfdeps.unique([exe, os.path.realpath(exe)] + numpy_paths)) + size_of([stdlib], skip),
    }


def probe_image(root):
    """What the final stage of NGC's composition takes from the full image: who owns the Triton
    tree (and whether group or others may write it), the entrypoint scripts, SageMaker's serve."""
    server = os.path.join(root, "bin", "tritonserver")
    info = os.stat(server if os.path.exists(server) else root)
    shared_writable = False
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if not os.path.islink(path) and os.lstat(path).st_mode & 0o022:
                shared_writable = True
                break
        if shared_writable:
            break
    return {
        "owner": [info.st_uid, info.st_gid],
        "shared_writable": shared_writable,
        "entrypoint_d": os.path.isdir("/opt/nvidia/entrypoint.d"),
        "serve": os.path.isfile("/usr/bin/serve"),
    }


def cudart_sonames(resolver):
    """The sonames of CUDA's runtime (libcudart.so.N) the loader finds, in its search order: the
    CUDA major an image's backends were built for (two images to mix must agree on it)."""
    found = []
    for folder in resolver.ld_library_path + resolver.system_dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if re.match(r"^libcudart\.so\.[0-9]+$", name) and name not in found:
                found.append(name)
    return found


def probe(root=DEFAULT_ROOT, system_dirs=None, ld_library_path=None, python=True):
    """The whole report for the Triton tree at `root` (see the module docstring)."""
    root = os.path.normpath(root)
    if not os.path.isdir(root):
        return {"root": root, "error": "%s does not exist" % root}
    if system_dirs is None:
        system_dirs = elfdeps.default_system_dirs()
    if ld_library_path is None:
        ld_library_path = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    resolver = elfdeps.Resolver(root, system_dirs, ld_library_path)
    version, libpython = stub_python(resolver, root)
    machine = os.uname().machine
    return {
        "root": root,
        "machine": machine,
        # The C library decides which manylinux wheels fit: read here, so no second container asks.
        "libc": platform.libc_ver()[1],
        "system_dirs": resolver.system_dirs,
        "ld_library_path": resolver.ld_library_path,
        "core": probe_core(resolver, root),
        "components": probe_components(resolver, root),
        "python": probe_python(resolver, version, libpython) if python else None,
        "stub_python": version,
        "stub_libpython": libpython,
        "cudart": cudart_sonames(resolver),
        "facts": probe_image(root),
    }


def main(argv):
    root = argv[1] if len(argv) > 1 else DEFAULT_ROOT
    report = probe(root)
    json.dump(report, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 2 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
