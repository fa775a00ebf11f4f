"""Runs inside the full image during a `--base pruned` build (collect stage); stdlib only.

Decides what of the min image a pruned base keeps, from the min image's dpkg database (copied
in) and the files of the full image, which holds every file of the min image:
- kept packages: the distribution's required ones; each package owning a library in the NEEDED
  closure of the selected parts (searched as the loader searches); each package owning a library
  the catalog says a reached library loads by name at run time (cuDNN's sub-libraries, NVRTC's
  builtins, ...); and, until nothing changes, what kept packages depend on and what their own
  ELF files need. A -dev package is never kept.
- dropped files of kept packages: documentation (copyright files stay), headers, static
  archives, and TensorRT's builder resource library (unless --keep-tensorrt-builder).
- files no package owns stay (configuration, the CUDA compat folder, the entrypoint), except
  apt's caches.

It writes into --out: drop.txt (paths relative to /, for tar --exclude-from), the new dpkg
database (status, and the lists of kept packages that lost files), required.txt (the run-time
loaded libraries the proof requires: NAME<TAB>why) and pruned.json (each kept package with why,
each dropped package with its size).

With --python (a base holding pip-installed distributions, as NGC's vLLM image): the python
distributions the kept python code imports, those --python-dist names, and what they require
(pydists.py); every file of a kept distribution stays, with what its ELF files need or name; the
files of the others, and the files under the site folders that nothing kept owns, go. It then also
writes python/elf.txt and python/imports.txt, which the proof checks.

Usage: prune.py --root /opt/tritonserver --min-dpkg DIR --loaded FILE --out DIR [--keep-tensorrt-builder]
                [--python [--python-dist NAME]...] PATH...
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collect  # noqa: E402  (copied beside this script)
import elfdeps  # noqa: E402
import probe  # noqa: E402
import pydists  # noqa: E402

DOCUMENTATION = re.compile(r"/share/(doc|man|info|doc-base|lintian)/")
DEV_PACKAGE = re.compile(r"-(dev|dbg)(-|$)")  # libfoo-dev, NVIDIA's libcudnn9-dev-cuda-12
HEADER = re.compile(r"(^/usr/include/|/include/|\.(h|hpp|hxx|cuh|inl)$)")
BUILDER_RESOURCE = re.compile(r"^libnvinfer_builder_resource\.so")
# Unowned files a base never needs: apt's caches, dpkg's previous status.
UNOWNED_DROPS = ("var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin", "var/lib/dpkg/status-old")


def is_dev(package):
    return bool(DEV_PACKAGE.search(package.split(":")[0]))


def dropped_file(path, keep_builder):
    """Why a file of a kept package goes, or None: it stays."""
    if DOCUMENTATION.search(path) and not path.endswith("/copyright"):
        return "documentation"
    if HEADER.search(path):
        return "header"
    if path.endswith(".a"):
        return "static archive"
    if not keep_builder and BUILDER_RESOURCE.match(os.path.basename(path)):
        return "TensorRT builder resource"
    return None


class Database(object):
    """A dpkg database (status + info/*.list): the installed packages, their fields and files."""

    def __init__(self, root):
        self.root = root
        self.stanzas = {}  # package -> its status text
        self.fields = {}  # package -> {field: value}
        with open(os.path.join(root, "status"), errors="replace") as fh:
            for text in fh.read().split("\n\n"):
                fields = parse_stanza(text)
                if "Package" in fields and fields.get("Status", "").endswith(" installed"):
                    name = fields["Package"]
                    self.stanzas[name] = text.strip("\n")
                    self.fields[name] = fields
        self.provides = {}
        for name, fields in self.fields.items():
            for group in parse_relations(fields.get("Provides", "")):
                for virtual in group:
                    self.provides.setdefault(virtual, []).append(name)
        self.files = {name: self._listed(name) for name in self.fields}
        self.owner = {}
        for name, paths in sorted(self.files.items()):
            for path in paths:
                self.owner.setdefault(collect.placed(path), name)

    def info_name(self, package):
        """The stem of the package's info files: name, or name:arch for Multi-Arch: same."""
        fields = self.fields[package]
        if fields.get("Multi-Arch") == "same":
            return "%s:%s" % (package, fields.get("Architecture", ""))
        return package

    def _listed(self, package):
        try:
            with open(os.path.join(self.root, "info", self.info_name(package) + ".list"), errors="replace") as fh:
                return [line.rstrip("\n") for line in fh if line.startswith("/")]
        except OSError:
            return []

    def package_of(self, path):
        for candidate in (collect.placed(path), os.path.realpath(path)):
            if candidate in self.owner:
                return self.owner[candidate]
        return None

    def size(self, package):
        try:
            return int(self.fields[package].get("Installed-Size", "0")) * 1024
        except ValueError:
            return 0

    def depends(self, package):
        """Installed packages `package` depends on: the first installed one of each alternative."""
        fields = self.fields[package]
        found = []
        for group in parse_relations(fields.get("Pre-Depends", "") + "," + fields.get("Depends", "")):
            for name in group:
                installed = [name] if name in self.fields else self.provides.get(name, [])
                if installed:
                    found.append(installed[0])
                    break
        return found


def parse_stanza(text):
    fields, last = {}, None
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and last:
            fields[last] += "\n" + line
        elif ":" in line:
            last, _, value = line.partition(":")
            fields[last] = value.strip()
    return fields


def parse_relations(text):
    """'a (>= 1) | b, c:any' -> [['a', 'b'], ['c']]"""
    groups = []
    for group in text.split(","):
        names = [re.split(r"[\s(\[<]", alt.strip(), 1)[0].split(":")[0] for alt in group.split("|")]
        names = [n for n in names if n]
        if names:
            groups.append(names)
    return groups


class Keeper(object):
    """The keep decision: which packages stay and why, following needs until nothing changes.

    A library is reached through NEEDED entries and through the names reached files hold in their
    data (what they may dlopen: elfdeps.named_libraries), resolved as the loader would for the file
    that names them; the catalog adds what no string shows (`loaded`, per release family). Each
    named library the image will hold is required by the proof; one it will not hold (the CUDA
    driver, other platforms' libraries) is listed as named, not in the image."""

    def __init__(self, db, resolver, root, loaded, keep_builder, parts_paths=()):
        self.db, self.resolver, self.root = db, resolver, root
        self.loaded = loaded  # soname -> [libraries it loads by name] (the catalog's, for the family)
        self.keep_builder = keep_builder
        self.parts_paths = [os.path.join(root, p) for p in parts_paths]  # what the image copies of root
        self.why = {}  # package -> why it stays
        self.required = []  # (library, why): run-time loaded libraries the proof requires
        self.not_in_image = []  # (library, why): named, but the image will not hold it
        self.reached = set()  # real paths of ELF files walked
        self.triggered = set()
        self.seen_names = set()  # (real path of the naming file, name)
        self.dists = None  # pydists.Closure, with --python: the python distributions kept
        self.dist_owner = {}  # path -> the installed distribution whose RECORD lists it

    def keep_owner(self, path, why):
        """Keep what owns `path`: its dpkg package, or its python distribution (with --python)."""
        self.keep(self.db.package_of(path), why)
        name = self.dist_of(path)
        if name is not None:
            self.dists.add(name, why)

    def dist_of(self, path):
        if self.dists is None:
            return None
        return self.dist_owner.get(os.path.normpath(path)) or self.dist_owner.get(os.path.realpath(path))

    def keep(self, package, why):
        if package is None or package in self.why or is_dev(package):
            return False
        self.why[package] = why
        return True

    def walk(self, seeds, part):
        """Follow NEEDED and named libraries from `seeds` (files of `part`); keep each one's package."""
        stack = [(path, os.path.relpath(path, self.root) if elfdeps.is_under(path, self.root) else path)
                 for path in seeds]
        for path in seeds:  # a seed outside the Triton root (the python runtime) is the image's own file
            if not elfdeps.is_under(path, self.root):
                self.keep_owner(path, "%s: %s" % (part, path))
        while stack:
            path, chain = stack.pop()
            real = os.path.realpath(path)
            if real in self.reached:
                continue
            self.reached.add(real)
            info = self.resolver.elf(path)
            own = {os.path.basename(path), os.path.basename(real)} | ({info.soname} if info and info.soname else set())
            for name in sorted(own):
                self.trigger(path, name, part, chain, stack)
            for name in elfdeps.named_libraries(real):
                if name not in own:
                    self.load(path, name, "%s: %s names %s (loaded by name)" % (part, chain, name), chain, stack)
            for soname, resolved in self.resolver.deps(path):
                if resolved is None:
                    continue
                step = "%s -> %s" % (chain, soname)
                self.keep_owner(resolved, "%s: %s" % (part, step))
                stack.append((resolved, step))

    def trigger(self, path, name, part, chain, stack):
        """The catalog's run-time loads of library `name`, when reached."""
        if name not in self.loaded or name in self.triggered:
            return
        self.triggered.add(name)
        for library in self.loaded[name]:
            self.load(path, library, "%s: %s loads %s at run time (catalog)" % (part, chain, library), chain, stack)

    def load(self, path, name, why, chain, stack):
        """A library `path` loads by `name`: required, kept and walked if the image holds it."""
        key = (os.path.realpath(path), name)
        if key in self.seen_names:
            return
        self.seen_names.add(key)
        found = self.locate(path, name)
        if found is None or not self.in_image(found):
            self.not_in_image.append((name, why))
            return
        if found not in [library for library, _ in self.required]:
            self.required.append((found, why))
        self.keep_owner(found, why)
        stack.append((found, "%s -> %s (loaded by name)" % (chain, name)))

    def locate(self, path, name):
        """Where the loader would find `name` when `path` loads it (RUNPATH, LD_LIBRARY_PATH, the
        system's folders), named by its soname: a name without a version (libcudnn_ops.so, which
        the loading library completes with its major) is the versioned library beside it."""
        if name.startswith("/"):
            return name if os.path.lexists(name) else None
        info = self.resolver.elf(path)
        dirs = self.resolver.search_dirs(path, info) if info is not None else \
            self.resolver.ld_library_path + self.resolver.system_dirs
        for directory in dirs:
            candidates = [name] if os.path.exists(os.path.join(directory, name)) else []
            if name.endswith(".so"):
                try:
                    listing = os.listdir(directory)
                except OSError:
                    listing = []
                candidates += sorted((n for n in listing if re.match(re.escape(name) + r"(\.[0-9]+)+$", n)), key=len)
            for candidate in candidates:
                full = os.path.join(os.path.realpath(directory), candidate)
                found = self.resolver.elf(full)
                if found is None:
                    continue
                soname = os.path.join(os.path.dirname(full), found.soname) if found.soname else full
                return soname if os.path.lexists(soname) else full
        return None

    def in_image(self, path):
        """Whether the composed image holds `path`: a file of a selected part, or one of a package
        of the min image that stays (a file only the full image has, outside the selection, is not
        copied; a -dev package never stays)."""
        if elfdeps.is_under(path, self.root):
            return any(elfdeps.is_under(path, part) for part in self.parts_paths)
        package = self.db.package_of(path)
        return package is not None and not is_dev(package) or self.dist_of(path) is not None

    def settle(self):
        """Until nothing changes: what kept packages depend on, and what their ELF files need."""
        done, walked = set(), set()
        while True:
            if self.dists is not None:
                self.dists.settle()
            todo = sorted(set(self.why) - done)
            dists = sorted(set(self.dists.why) - walked) if self.dists is not None else []
            if not todo and not dists:
                return
            for name in dists:  # a python distribution: what its files' packages and ELF files need
                walked.add(name)
                dist = self.dists.dists[name]
                for path in dist.files:
                    self.keep(self.db.package_of(path), "python distribution %s holds files of it" % dist.shown)
                files = [p for p in dist.files if os.path.isfile(p) and not os.path.islink(p)
                         and os.path.getsize(p) >= 64 and self.resolver.elf(p) is not None]
                self.walk(files, "python distribution " + dist.shown)
                for script, interpreter in interpreters(dist.files):  # its commands' #! line names it
                    why = "python distribution %s: %s runs %s" % (dist.shown, script, interpreter)
                    self.keep_owner(interpreter, why)
                    self.walk([os.path.realpath(interpreter)], why)
            for package in todo:
                done.add(package)
                for dependency in self.db.depends(package):
                    self.keep(dependency, "%s depends on it" % package)
                files = [p for p in self.db.files[package] if dropped_file(p, self.keep_builder) is None
                         and os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) >= 64]
                self.walk([p for p in files if self.resolver.elf(p) is not None], "package " + package)


def interpreters(files):
    """(script, interpreter) for each file of `files` whose #! line names an interpreter the image
    holds (a distribution's commands: /usr/bin/python3, a link to python3.X)."""
    found = []
    for path in files:
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                head = fh.read(256)
        except OSError:
            continue
        if not head.startswith(b"#!"):
            continue
        words = head[2:].split(b"\n", 1)[0].split()
        interpreter = os.fsdecode(words[0]) if words else ""
        if interpreter.startswith("/") and os.path.isfile(interpreter):
            found.append((path, interpreter))
    return found


def selected_seeds(report, resolver, root, paths):
    """(part, ELF files) of each selected part, and the python runtime's when it is selected."""
    parts = []
    core = [os.path.join(root, p) for p in paths if p.partition("/")[0] in ("bin", "lib")]
    if core:
        parts.append(("the server", probe.elf_files(resolver, core)))
    for path in paths:
        head, _, name = path.partition("/")
        if head in collect.FOLDER_KINDS and name:
            parts.append(("%s %s" % (collect.FOLDER_KINDS[head], name),
                          probe.elf_files(resolver, [os.path.join(root, path)])))
    _, _, with_python, _ = collect.selected_needs(report, paths)
    runtime = report.get("python") if with_python else None
    if runtime:
        dynload = os.path.join(os.path.realpath(runtime["stdlib"]), "lib-dynload")
        parts.append(("python %s" % runtime["version"],
                      [runtime["executable_realpath"]] + probe.elf_files(resolver, [dynload])))
    return parts


def decide(db, resolver, root, parts, loaded, keep_builder, parts_paths=(), keeper=None):
    """The Keeper after every seed: the distribution's required packages, then each part (a
    keeper given already holds the python distributions' roots)."""
    keeper = keeper or Keeper(db, resolver, root, loaded, keep_builder, parts_paths)
    for package, fields in sorted(db.fields.items()):
        if fields.get("Essential") == "yes" or fields.get("Priority") == "required":
            keeper.keep(package, "required by the distribution (Priority: %s)" % fields.get("Priority", "?"))
    for part, files in parts:
        keeper.walk(files, part)
    keeper.settle()
    return keeper


def write_outputs(out, db, keeper, keep_builder, info_dir):
    """drop.txt, the new dpkg database, required.txt and pruned.json into `out`."""
    kept = set(keeper.why)
    kept_paths = set()
    drops, changed_lists = set(), {}
    dropped_bytes = 0
    for package in sorted(kept):
        stays = []
        for path in db.files[package]:
            reason = dropped_file(path, keep_builder)
            if reason is None or os.path.isdir(path) and not os.path.islink(path):
                stays.append(path)
                kept_paths.add(collect.placed(path))
            else:
                drops.add(collect.placed(path))
                dropped_bytes += _size(path)
        if len(stays) != len(db.files[package]):
            changed_lists[package] = stays
    dropped = sorted(set(db.fields) - kept)
    for package in dropped:
        for path in db.files[package]:
            placed = collect.placed(path)
            if placed not in kept_paths and not (os.path.isdir(path) and not os.path.islink(path)):
                drops.add(placed)
        stem = db.info_name(package) + "."
        drops.update(os.path.join("/var/lib/dpkg/info", n) for n in os.listdir(info_dir) if n.startswith(stem))
    drops.update("/" + p for p in UNOWNED_DROPS)

    os.makedirs(os.path.join(out, "dpkg", "info"), exist_ok=True)
    with open(os.path.join(out, "drop.txt"), "w") as fh:
        fh.writelines(p.lstrip("/") + "\n" for p in sorted(drops))
    with open(os.path.join(out, "dpkg", "status"), "w") as fh:
        fh.write("\n\n".join(db.stanzas[p] for p in sorted(kept)) + "\n\n")
    for package, stays in changed_lists.items():
        stem = os.path.join(out, "dpkg", "info", db.info_name(package))
        with open(stem + ".list", "w") as fh:
            fh.writelines(p + "\n" for p in stays)
        _filter_md5sums(os.path.join(info_dir, db.info_name(package) + ".md5sums"), stem + ".md5sums", set(stays))
    with open(os.path.join(out, "required.txt"), "w") as fh:
        fh.writelines("%s\t%s\n" % (library, why) for library, why in keeper.required)
    report = {
        "kept": [{"package": p, "size": db.size(p), "why": keeper.why[p]} for p in sorted(kept)],
        "dropped": [{"package": p, "size": db.size(p)} for p in dropped],
        "dropped_files_of_kept_packages": {"count": sum(len(db.files[p]) - len(s) for p, s in changed_lists.items()),
                                           "bytes": dropped_bytes},
        "loaded_at_run_time": [{"library": library, "why": why} for library, why in keeper.required],
        "named_not_in_image": [{"library": library, "why": why} for library, why in keeper.not_in_image],
        "keep_tensorrt_builder": keep_builder,
    }
    with open(os.path.join(out, "pruned.json"), "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return report


def write_unresolved(out, resolver, root, parts):
    """unresolved.txt: each ELF file of the selected parts (under the Triton root) with the NEEDED
    entries it cannot resolve before pruning (file TAB names,...): the proof does not blame the
    pruned base for those (torch's test binaries, say, which have no RUNPATH to torch/lib)."""
    lines = []
    for _, files in parts:
        for path in files:
            if not elfdeps.is_under(path, root):
                continue
            missing = [name for name, found in resolver.deps(path) if found is None]
            if missing:
                lines.append("%s\t%s\n" % (path, ",".join(missing)))
    with open(os.path.join(out, "unresolved.txt"), "w", errors="surrogateescape") as fh:
        fh.writelines(sorted(set(lines)))
    return len(lines)


def python_roots(keeper, dists, root, paths, names):
    """Seed the python closure: what the kept python code of the selected parts imports (mapped to
    distributions through their RECORD), and the distributions named (--pip, model environments).
    Returns {module: distribution} of the imports found, which the proof imports."""
    keeper.dists = pydists.Closure(dists, pydists.environment())
    keeper.dist_owner = keeper.dists.owners()
    code = [path for top in paths for path, _ in probe.walk_files(os.path.join(root, top), ())
            if path.endswith(".py")]
    imported = {}
    for module, path in sorted(pydists.imported_modules(code).items()):
        name = keeper.dists.by_module.get(module)
        if name is not None:
            imported[module] = name
            keeper.dists.add(name, "%s (imported by %s)" % (dists[name].shown, os.path.relpath(path, root)))
    for name in names:
        requirement = pydists.Requirement(name)
        if requirement.name not in dists:
            keeper.dists.missing.append((name, "asked for (--pip or a model environment)"))
        keeper.dists.add(requirement.name, "%s (asked for)" % requirement.name, requirement.extras)
    return imported


def write_python_outputs(out, db, keeper, sites, imported, result):
    """With --python, after write_outputs: the files of the dropped distributions and the files
    nothing kept owns under the site folders join drop.txt; pruned.json gains `python`; python/
    elf.txt (each kept ELF file, with the names it already could not resolve before pruning) and
    python/imports.txt (the modules the kept code imports) are for the proof."""
    closure = keeper.dists
    kept_files = set()
    for name in closure.why:
        kept_files.update(closure.dists[name].files)
    kept_packages = set(keeper.why)

    def goes(path):
        if path in kept_files or os.path.realpath(path) in kept_files:
            return False
        return db.package_of(path) not in kept_packages or db.package_of(path) is None

    drops, unowned = set(), [0, 0]
    dropped = sorted(set(closure.dists) - set(closure.why))
    for name in dropped:
        drops.update(p for p in closure.dists[name].files if os.path.lexists(p) and not os.path.isdir(p) and goes(p))
    for site in sites:
        for path, st in probe.walk_files(site, ()):
            if path not in drops and not os.path.isdir(path) and goes(path) and path not in keeper.dist_owner:
                drops.add(path)
                unowned[0] += 1
                unowned[1] += st.st_size
    with open(os.path.join(out, "drop.txt")) as fh:
        drops.update("/" + line.rstrip("\n") for line in fh if line.strip())
    with open(os.path.join(out, "drop.txt"), "w") as fh:
        fh.writelines(p.lstrip("/") + "\n" for p in sorted(drops))

    elves = []
    for name in sorted(closure.why):
        for path in closure.dists[name].files:
            if os.path.isfile(path) and not os.path.islink(path) and keeper.resolver.elf(path) is not None:
                unresolved = [soname for soname, found in keeper.resolver.deps(path) if found is None]
                elves.append((path, unresolved))
    os.makedirs(os.path.join(out, "python"), exist_ok=True)
    with open(os.path.join(out, "python", "elf.txt"), "w") as fh:
        fh.writelines("%s\t%s\n" % (path, ",".join(names)) for path, names in elves)
    with open(os.path.join(out, "python", "imports.txt"), "w") as fh:
        fh.writelines(m + "\n" for m in sorted(m for m, d in imported.items() if d in closure.why))

    dist = closure.dists
    result["python"] = {
        "kept": [{"distribution": dist[n].shown, "version": dist[n].version, "size": dist[n].size(),
                  "why": closure.why[n]} for n in sorted(closure.why)],
        "dropped": [{"distribution": dist[n].shown, "version": dist[n].version, "size": dist[n].size()}
                    for n in dropped],
        "missing": [{"requirement": r, "why": w} for r, w in closure.missing],
        "conditional_not_installed": [{"requirement": r, "why": w} for r, w in closure.absent],
        "unowned_files_dropped": {"count": unowned[0], "bytes": unowned[1]},
        "unresolved_before_pruning": [{"file": p, "needs": n} for p, n in elves if n],
        "imports": sorted(m for m, d in imported.items() if d in closure.why),
    }
    with open(os.path.join(out, "pruned.json"), "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return result


def _size(path):
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _filter_md5sums(source, target, stays):
    """The package's md5sums without the lines of files that went (paths there have no leading /)."""
    try:
        with open(source, errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return
    with open(target, "w") as fh:
        fh.writelines(line for line in lines if "/" + line.rstrip("\n").split("  ", 1)[-1] in stays)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/opt/tritonserver")
    parser.add_argument("--min-dpkg", required=True)
    parser.add_argument("--loaded", required=True, help="JSON: soname -> libraries it loads by name")
    parser.add_argument("--out", required=True)
    parser.add_argument("--keep-tensorrt-builder", action="store_true")
    parser.add_argument("--python", action="store_true", help="prune the python distributions too")
    parser.add_argument("--python-dist", action="append", default=[], help="a distribution kept, with what it requires")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv[1:])

    root = os.path.normpath(args.root)
    report = probe.probe(root)
    if "error" in report:
        print("prune: " + report["error"], file=sys.stderr)
        return 2
    with open(args.loaded) as fh:
        loaded = json.load(fh)
    db = Database(args.min_dpkg)
    resolver = elfdeps.Resolver(root, report["system_dirs"], report["ld_library_path"])
    parts = selected_seeds(report, resolver, root, args.paths)
    keeper = Keeper(db, resolver, root, loaded, args.keep_tensorrt_builder, args.paths)
    sites, imported = [], {}
    if args.python:
        sites = pydists.site_folders()
        imported = python_roots(keeper, pydists.installed(sites), root, args.paths, args.python_dist)
    keeper = decide(db, resolver, root, parts, loaded, args.keep_tensorrt_builder, args.paths, keeper)
    result = write_outputs(args.out, db, keeper, args.keep_tensorrt_builder, os.path.join(args.min_dpkg, "info"))
    unresolved = write_unresolved(args.out, resolver, root, parts)
    if unresolved:
        print("prune: %d files of the selection have NEEDED entries unresolved before pruning (unresolved.txt)"
              % unresolved)
    if args.python:
        result = write_python_outputs(args.out, db, keeper, sites, imported, result)
        python = result["python"]
        print("prune: keeps %d python distributions (%.2f GB), drops %d (%.2f GB)" % (
            len(python["kept"]), sum(d["size"] for d in python["kept"]) / 1e9, len(python["dropped"]),
            sum(d["size"] for d in python["dropped"]) / 1e9))
        for item in python["missing"]:
            print("prune:   not installed: %s (%s)" % (item["requirement"], item["why"]))
    kept = sum(item["size"] for item in result["kept"])
    gone = sum(item["size"] for item in result["dropped"])
    print("prune: keeps %d packages (%.2f GB), drops %d (%.2f GB) and %.2f GB of files of kept packages" % (
        len(result["kept"]), kept / 1e9, len(result["dropped"]), gone / 1e9,
        result["dropped_files_of_kept_packages"]["bytes"] / 1e9))
    for item in result["kept"]:
        print("prune:   keep %-32s %s" % (item["package"], item["why"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
