"""Reproducible images and the composer's own push, at NGC scale (issue 36's goal figures).

1. Reproducibility: the 24.09 pruned onnxruntime+python image built twice from nothing (the second
   build after the first's image, its pruned base and every stage image it made are removed, and
   with the engine's cache off), then each pushed through the composer's client to an empty
   registry: the two image ids, the two manifest digests, and `composer verify --rebuild`'s answer.
2. Push time: the same image pushed to an empty registry through the composer's client (its blob
   cache empty too, so every layer is read and compressed) and through the engine (docker push),
   in the same run, each timed from start to the digest.

    .venv/bin/python benchmarks/supply_chain.py          (needs `triton-standin --scale ngc`)
    .venv/bin/python benchmarks/supply_chain.py --source localhost/standin    (the small stand-ins)

Checks free space first (about 12 GB at NGC scale), and removes what it made as it goes: its images,
bases, stage images, the registries' storage and its blob cache.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path


if __package__ in (None, ""):  # run as a script (python benchmarks/X.py): the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet_images import _start_registry, _stop
from composer.catalog.catalog import Catalog
from composer.config.types import CompositionSpec
from composer.core.units import human_size
from composer.engine.connect import connect
from composer.engine.interface import Engine
from composer.assembly.pruning import sweep_stages
from composer.pipeline import build_image
from composer.publish.blobs import BlobCache
from composer.publish.image_push import push_assembled
from composer.registry.client import Registries
from composer.resolve.resolve import resolve

NGC_SOURCE = "localhost/standin-ngc"
BENCH_KEY = "org.triton-composer.bench"
NEEDED = {NGC_SOURCE: 12e9}


def _free(engine: Engine) -> tuple[str, int]:
    where, usage = engine.storage()
    return where, usage.free


def _spec(source: str, tag: str, push: str | None = None) -> CompositionSpec:
    return CompositionSpec().with_fields({
        "selection.backends": ("onnxruntime", "python"), "images.version": "24.09", "images.registry": source,
        "selection.base": "pruned", "result.tag": tag, "result.smoke_test": False, "result.push": push,
        "result.labels": ((BENCH_KEY, "supply-chain"),)})


def _build(engine: Engine, source: str, tag: str, layers: Path, labels: dict):
    plan = resolve(engine, _spec(source, tag), Catalog.load()).plan
    return build_image(engine, plan, labels=labels, layers_dir=layers)


def _forget(engine: Engine, image_id: str) -> None:
    """Everything a build made: its image, its pruned base (labelled as the benchmark's), its stages."""
    engine.remove_image(image_id, force=True)
    for image in engine.images_labelled(f"{BENCH_KEY}=supply-chain"):
        engine.remove_image(image, force=True)
    sweep_stages(engine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=NGC_SOURCE, help="where the 24.09 full and min images are")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON too")
    args = parser.parse_args()
    engine = connect()
    where, free = _free(engine)
    needed = NEEDED.get(args.source, 3e9)
    print(f"free at {where}: {human_size(free)}; this benchmark needs about {human_size(needed)}", flush=True)
    if free < needed:
        print(f"not enough room at {where}: free {human_size(needed - free)} more and run again", file=sys.stderr)
        return 1
    labels = {BENCH_KEY: "supply-chain"}
    figures: dict = {"source": args.source}
    scratch = Path(tempfile.mkdtemp(prefix="supply-chain-"))
    pid = None
    try:
        (scratch / "registry").mkdir()
        port, pid = _start_registry(scratch / "registry")
        host = f"127.0.0.1:{port}"
        registries = Registries(engine)
        runs = []
        for attempt in (1, 2):
            layers = scratch / f"layers{attempt}"
            layers.mkdir()
            tag = f"supply-chain/triton:{uuid.uuid4().hex[:8]}"
            started = time.monotonic()
            result = _build(engine, args.source, tag, layers, labels)
            built = time.monotonic() - started
            folder = scratch / f"blobs{attempt}"
            folder.mkdir()
            ref = f"{host}/supply/triton:{attempt}"
            started = time.monotonic()
            pushed = push_assembled(engine, result.assembled, ref, registries, compression="gzip", folder=folder,
                                    cache=BlobCache(scratch / f"cache{attempt}"), on_line=lambda _line: None)
            push_seconds = time.monotonic() - started
            runs.append({"image_id": result.image_id, "digest": pushed.digest, "build_s": round(built, 1),
                         "composer_push_s": round(push_seconds, 1), "size": result.size,
                         "pushed_bytes": pushed.bytes_moved})
            print(f"build {attempt}: {result.image_id[:19]} in {built:.0f} s; pushed {pushed.digest[:19]} "
                  f"({human_size(pushed.bytes_moved)}) in {push_seconds:.0f} s", flush=True)
            if attempt == 1:
                engine_ref = f"{host}/engine/triton:1"
                engine.tag(result.image_id, engine_ref)
                started = time.monotonic()
                engine.push(engine_ref)
                engine_seconds = time.monotonic() - started
                engine.remove_image(engine_ref)
                runs[0]["engine_push_s"] = round(engine_seconds, 1)
                print(f"the engine pushed the same image in {engine_seconds:.0f} s", flush=True)
                _forget(engine, result.image_id)  # the second build starts from nothing
            shutil.rmtree(layers, ignore_errors=True)
        first, second = runs
        figures["runs"] = runs
        figures["same_image_id"] = first["image_id"] == second["image_id"]
        figures["same_digest"] = first["digest"] == second["digest"]
        figures["push_ratio"] = first["composer_push_s"] / first["engine_push_s"]
        print(f"image ids {'equal' if figures['same_image_id'] else 'DIFFER'}; pushed digests "
              f"{'equal' if figures['same_digest'] else 'DIFFER'}; composer push / engine push = "
              f"{figures['push_ratio']:.2f} ({first['composer_push_s']:.0f} s / {first['engine_push_s']:.0f} s)")
        _forget(engine, second["image_id"])
    finally:
        if pid is not None:
            _stop(pid)
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
