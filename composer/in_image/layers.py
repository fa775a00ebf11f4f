"""Runs inside the full image during a `--base pruned` build (layers stage); stdlib only.

Assigns every file of a pruned base to one of its layers, so that a layer holds one family of
files (the distribution's core, python, the CUDA runtime, cuBLAS, ... the dpkg database) and its
bytes depend only on those files: two compositions keeping the same cuBLAS share that layer. The
files are the min image less what prune.py dropped, as listed in the pruned stage (type, size,
path); the rules are the catalog's (layers.json, from releases.yaml pruned_base_layers):
- a path the database family's `paths` matches goes there (the dpkg database, the last layer);
- a file of a kept package, to the first family whose `packages` matches the package's name; else
  to the distribution's family when the package is required by the distribution or something
  required depends on it (the same for every selection), else to the rest;
- a file no package owns, to the first family whose `paths` matches; else to the distribution's.
A family bigger than `layer_bytes` is split by its sorted paths into its parts, each under it; one
that does not fit its parts fails the build, naming it (some registries refuse a layer over 2 GB).

It writes into --out NAME.list for every layer of the table (sorted paths without the leading /,
empty where the family holds nothing) and layers.json (each layer: family, part, files, bytes).

Usage: layers.py --files FILE --min-dpkg DIR --kept STATUS --table layers.json --out DIR
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prune  # noqa: E402  (copied beside this script)

ENTRY_BYTES = 1024  # what a file costs a layer besides its bytes (its tar header, padding), counted as such


class TooBig(Exception):
    pass


def read_listing(path):
    """[(path, size)] from the pruned stage's `find -printf '%y\\t%s\\t%P\\n'` (no folders)."""
    files = []
    with open(path, errors="surrogateescape") as fh:
        for line in fh:
            kind, size, name = line.rstrip("\n").split("\t", 2)
            files.append((name, int(size) if kind == "f" else 0))
    return files


def distribution_core(db, kept):
    """The kept packages the distribution requires (Essential, Priority: required) and what they
    depend on, transitively: kept whatever the selection, so their layer is every selection's."""
    todo = sorted(p for p, f in db.fields.items()
                  if p in kept and (f.get("Essential") == "yes" or f.get("Priority") == "required"))
    core = set()
    while todo:
        package = todo.pop()
        if package in core:
            continue
        core.add(package)
        todo.extend(d for d in db.depends(package) if d in kept and d not in core)
    return core


def owners(db):
    """path (as placed: its folder resolved) -> every package listing it. Only the listings count:
    a link no package lists is no package's file, whatever it points to, so its layer is the same
    for every selection."""
    found = {}
    for package, paths in sorted(db.files.items()):
        for path in paths:
            found.setdefault(prune.collect.placed(path), []).append(package)
    return found


def family_of_package(package, families, core):
    for family in families:
        if family.get("packages") and re.search(family["packages"], package):
            return family["family"]
    takes = "distribution" if package in core else "rest"
    return next(f["family"] for f in families if f.get("takes") == takes)


def assign(files, owned, kept, core, families):
    """family -> [(path, size)]: each file of the listing to its family, by the rules above."""
    database = [f for f in families if f.get("takes") == "database"]
    distribution = next(f["family"] for f in families if f.get("takes") == "distribution")
    unowned_rules = [f for f in families if f.get("paths") and f.get("takes") != "database"]
    assigned = {f["family"]: [] for f in families}
    for path, size in files:
        family = None
        for rule in database:
            if re.search(rule["paths"], path):
                family = rule["family"]
        if family is None:
            package = next((p for p in owned.get("/" + path, ()) if p in kept), None)
            if package is not None:
                family = family_of_package(package, families, core)
            else:
                family = next((f["family"] for f in unowned_rules if re.search(f["paths"], path)), distribution)
        assigned[family].append((path, size))
    return assigned


def split(name, files, parts, limit):
    """`files` in `parts` lists by sorted path, each under `limit` bytes (a file counting ENTRY_BYTES
    more), the earlier ones filled first; TooBig when they do not fit."""
    chunks, total = [[]], 0
    for path, size in sorted(files):
        cost = size + ENTRY_BYTES
        if chunks[-1] and total + cost > limit:
            chunks.append([])
            total = 0
        chunks[-1].append(path)
        total += cost
    if len(chunks) > parts or total > limit:
        size = sum(s + ENTRY_BYTES for _, s in files)
        raise TooBig("pruned base: the %s family holds %.2f GB, more than its %d layer(s) of at most %.2f GB "
                     "(raise its parts in releases.yaml pruned_base_layers)" % (name, size / 1e9, parts, limit / 1e9))
    return chunks + [[] for _ in range(parts - len(chunks))]


def plan_layers(files, owned, kept, core, table):
    """[(slot, [paths], bytes)] for every slot of the table, in order."""
    assigned = assign(files, owned, kept, core, table["families"])
    sizes = dict(files)
    layers = []
    for family in table["families"]:
        slots = [s for s in table["slots"] if s["family"] == family["family"]]
        chunks = split(family["family"], assigned[family["family"]], len(slots), table["layer_bytes"])
        for slot, chunk in zip(slots, chunks):
            layers.append((slot, chunk, sum(sizes[p] for p in chunk)))
    return layers


def write_outputs(out, layers):
    os.makedirs(out, exist_ok=True)
    for slot, paths, _ in layers:
        with open(os.path.join(out, slot["name"] + ".list"), "w", errors="surrogateescape") as fh:
            fh.writelines(p + "\n" for p in paths)  # sorted as `LC_ALL=C sort` sorts: by code point
    report = [{"layer": slot["name"], "family": slot["family"], "part": slot["part"], "files": len(paths),
               "bytes": size} for slot, paths, size in layers]
    with open(os.path.join(out, "layers.json"), "w") as fh:
        json.dump({"layers": report}, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return report


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", required=True)
    parser.add_argument("--min-dpkg", required=True)
    parser.add_argument("--kept", required=True, help="the pruned base's dpkg status")
    parser.add_argument("--table", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv[1:])
    with open(args.table) as fh:
        table = json.load(fh)
    db = prune.Database(args.min_dpkg)
    with open(args.kept, errors="replace") as fh:
        kept = {prune.parse_stanza(text).get("Package") for text in fh.read().split("\n\n")} - {None}
    try:
        layers = plan_layers(read_listing(args.files), owners(db), kept, distribution_core(db, kept), table)
    except TooBig as error:
        print(error, file=sys.stderr)
        return 2
    for item in write_outputs(args.out, layers):
        print("layers: %-20s %6d files %8.1f MB" % (item["layer"], item["files"], item["bytes"] / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
