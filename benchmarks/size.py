"""Image size against its lower bound, for a few selections.

For each selection: the full image, the composed image, and the lower bound: the min image plus
the bytes of the selected components, the core, and what they need that the min image lacks
(libraries, the python runtime). Overhead is how far the composed image is above that bound.
Goal: under 10%.

    .venv/bin/python benchmarks/size.py --registry localhost/standin --version 24.09
"""

from __future__ import annotations

import argparse
import sys

from composer.catalog import Catalog
from composer.contents import inspect_full, inspect_min, runtime_files
from composer.engine import Engine
from composer.errors import ComposerError
from composer.pipeline import build_image, plan_from_engine
from composer.spec import CompositionSpec

SELECTIONS = (("python",), ("onnxruntime", "python"), ("identity", "python"), ("onnxruntime", "python", "pytorch"))
LABEL = {"triton-composer.benchmark": "1"}


def mb(n: int) -> str:
    return f"{n / 1e6:9.1f}"


def lower_bound(plan, contents, min_contents, min_size: int) -> int:
    parts = [c for c in contents.components if c.kind == "backend" and c.name in plan.backends]
    parts += [c for c in contents.components if c.kind == "repoagent" and c.name in plan.repoagents]
    parts += [c for c in contents.components if c.kind == "cache" and c.name in plan.caches]
    needs = list(contents.core_needs) + [n for c in parts for n in c.needs]
    python = contents.python if any(c.name == "python" or c.python_based for c in parts) else None
    if python:
        needs += list(python.needs)
    libraries = runtime_files(contents, min_contents, needs)
    unique = {n.realpath: n.size for n in libraries}
    return min_size + contents.core_size + sum(c.size for c in parts) + sum(unique.values()) + (python.size if python else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default="localhost/standin")
    parser.add_argument("--version", default="24.09")
    parser.add_argument("--keep", action="store_true", help="keep the composed images")
    args = parser.parse_args()
    try:
        engine = Engine.connect()
        catalog = Catalog.load()
        release = catalog.release(args.version)
        full_ref, min_ref = release.full_ref(args.registry), release.min_ref(args.registry)
        full_size = engine.require_image(full_ref).size
        min_size = engine.require_image(min_ref).size
        contents = inspect_full(engine, full_ref)
        min_contents = inspect_min(engine, min_ref)
        print(f"full {full_ref}: {full_size / 1e6:.1f} MB; min {min_ref}: {min_size / 1e6:.1f} MB")
        print(f"{'selection':36} {'full MB':>9} {'composed':>9} {'bound MB':>9} {'overhead':>9}")
        for selection in SELECTIONS:
            spec = CompositionSpec().with_fields({
                "selection.backends": selection, "images.version": args.version, "images.registry": args.registry,
                "result.tag": f"triton-composer-bench/tritonserver:{'-'.join(selection)}"})
            plan, _ = plan_from_engine(engine, spec, catalog)
            result = build_image(engine, plan, smoke=False, labels=LABEL)
            bound = lower_bound(plan, contents, min_contents, min_size)
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
