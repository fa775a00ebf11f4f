"""Image size against its lower bound, for a few selections.

For each selection: the full image, the composed image, and the lower bound: the min image plus
the bytes of the selected components, the core, and what they need that the min image lacks
(libraries, the python runtime). Overhead is how far the composed image is above that bound.
Goal: under 10%.

What the min image lacks is decided by the product's own collect step (composer/in_image/collect.py,
run in the full image with the min image's loader cache, as the build runs it), so the bound and
the build can never disagree about it.

    .venv/bin/python benchmarks/size.py --registry localhost/standin --version 24.09
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from dataclasses import replace
from importlib import resources

from composer.catalog.catalog import Catalog
from composer.resolve.contents import inspect_full
from composer.engine.connect import connect
from composer.core.errors import ComposerError
from composer.pipeline import build_image
from composer.resolve.resolve import resolve
from composer.resolve.plan_types import ROOT
from composer.render.render import collect_paths
from composer.config.types import CompositionSpec

SELECTIONS = (("python",), ("onnxruntime", "python"), ("identity", "python"), ("onnxruntime", "python", "pytorch"))
LABEL = {"triton-composer.benchmark": "1"}
MIN_CACHE = "/composer/min-ld.so.cache"


def mb(n: int) -> str:
    return f"{n / 1e6:9.1f}"


def min_loader_cache(engine, min_ref: str) -> bytes:
    """The min image's /etc/ld.so.cache, which the build's collect stage reads."""
    result = engine.run_once(min_ref, ["base64", "/etc/ld.so.cache"], entrypoint=[])
    if result.exit_code != 0:
        raise ComposerError(f"cannot read the loader cache of {min_ref}: {result.output.strip()[-200:]}")
    return base64.b64decode(result.output)


def collected(engine, plan, cache: bytes) -> dict:
    """The manifest collect.py writes for `plan`: the libraries it copies and the python (or None)."""
    scripts = resources.files("composer.in_image")
    files = {f"/composer/{name}": scripts.joinpath(name).read_bytes() for name in ("collect.py", "probe.py")}
    files[MIN_CACHE] = cache
    command = ["python3", "/composer/collect.py", "--root", ROOT, "--min-ld-cache", MIN_CACHE,
               "--out", "/composer/rootfs", *collect_paths(plan)]
    result = engine.run_once(plan.full.ref, ["sh", "-c", '"$@" >&2 && cat /composer/collected.json', "sh", *command],
                             entrypoint=[], files=files, user="root")
    if result.exit_code != 0:
        raise ComposerError(f"collect.py failed in {plan.full.ref}: {result.output.strip()[-200:]}")
    return json.loads(result.output)


def lower_bound(plan, contents, manifest: dict, min_size: int) -> int:
    parts = [c for c in contents.components if c.kind == "backend" and c.name in plan.backends]
    parts += [c for c in contents.components if c.kind == "repoagent" and c.name in plan.repoagents]
    parts += [c for c in contents.components if c.kind == "cache" and c.name in plan.caches]
    python = contents.python if manifest.get("python") else None
    needs = list(contents.core_needs) + [n for c in parts for n in c.needs] + list(python.needs if python else ())
    sizes = {n.realpath: n.size for n in needs}
    libraries = sum(sizes.get(path, 0) for path in manifest["libraries"])
    return min_size + contents.core_size + sum(c.size for c in parts) + libraries + (python.size if python else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default="localhost/standin")
    parser.add_argument("--version", default="24.09")
    parser.add_argument("--keep", action="store_true", help="keep the composed images")
    args = parser.parse_args()
    try:
        engine = connect()
        catalog = Catalog.load()
        release = catalog.release(args.version)
        full_ref, min_ref = release.full_ref(args.registry), release.min_ref(args.registry)
        full_size = engine.require_image(full_ref).size
        min_size = engine.require_image(min_ref).size
        contents = inspect_full(engine, full_ref)
        cache = min_loader_cache(engine, min_ref)
        print(f"full {full_ref}: {full_size / 1e6:.1f} MB; min {min_ref}: {min_size / 1e6:.1f} MB")
        print(f"{'selection':36} {'full MB':>9} {'composed':>9} {'bound MB':>9} {'overhead':>9}")
        for selection in SELECTIONS:
            spec = CompositionSpec().with_fields({
                "selection.backends": selection, "images.version": args.version, "images.registry": args.registry,
                "result.tag": f"triton-composer-bench/tritonserver:{'-'.join(selection)}"})
            plan = replace(resolve(engine, spec, catalog).plan, smoke=None)  # sizes only
            result = build_image(engine, plan, labels=LABEL)
            bound = lower_bound(plan, contents, collected(engine, plan, cache), min_size)
            overhead = (result.size - bound) / bound * 100
            print(f"{'+'.join(selection):36} {mb(full_size)} {mb(result.size)} {mb(bound)} {overhead:8.1f}%")
            if not args.keep:
                engine.remove_image(result.tag)
    except ComposerError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
