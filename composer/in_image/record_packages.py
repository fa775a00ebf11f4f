"""Runs inside the build (packages stage); stdlib only.

Adds to the composition record what pip installed into the packages folder: each
distribution's name, version and top-level modules (so the smoke test knows what to import).

Usage: record_packages.py SITE_PACKAGES COMPOSITION_JSON
"""

import json
import os
import sys


def metadata(dist_info):
    fields = {}
    with open(os.path.join(dist_info, "METADATA"), encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return fields.get("Name", ""), fields.get("Version", "")


def top_level(dist_info):
    """Top-level importable names, from top_level.txt or else from RECORD."""
    path = os.path.join(dist_info, "top_level.txt")
    if os.path.isfile(path):
        with open(path) as fh:
            return sorted({line.strip() for line in fh if line.strip() and "/" not in line})
    names = set()
    record = os.path.join(dist_info, "RECORD")
    if os.path.isfile(record):
        with open(record, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                first = line.split(",", 1)[0].split("/", 1)[0]
                if first.endswith(".dist-info") or first.endswith(".data") or first in ("..", "bin", "__pycache__"):
                    continue
                if first.endswith(".py"):
                    names.add(first[:-3])
                elif "." not in first and first:
                    names.add(first)
    return sorted(n for n in names if not n.startswith("_") or n == "_cffi_backend")


def main(argv):
    site, record_path = argv[1], argv[2]
    packages = []
    for entry in sorted(os.listdir(site)):
        if entry.endswith(".dist-info"):
            name, version = metadata(os.path.join(site, entry))
            packages.append({"name": name, "version": version, "modules": top_level(os.path.join(site, entry))})
    with open(record_path) as fh:
        record = json.load(fh)
    record["packages"] = packages
    with open(record_path, "w") as fh:
        json.dump(record, fh, indent=2, sort_keys=True)
        fh.write("\n")
    for package in packages:
        print("packages: %s %s" % (package["name"], package["version"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
