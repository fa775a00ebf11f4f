"""A fleet of compositions in a registry and on a node: pruned bases of family layers against the min base.

Builds four selections (python; onnxruntime+python; pytorch+python; onnxruntime+python+tensorrt+
pytorch) on pruned bases and on the min image, from the NGC-scale 24.09 stand-ins, pushes each fleet
to a local registry on 127.0.0.1 (through the composer's own client, as composer build --push does), and prints each image's size, what the registry stores for the
fleet (the sum of its unique blobs, compressed as pushed), and what a node pulls for the 2nd, 3rd
and 4th image once it holds the ones before: the blobs it does not hold yet (containerd, which
fetches by digest), and what the Docker engine pulls, which fetches every layer above the first
whose chain (that layer and every one below it) it lacks.

    .venv/bin/python benchmarks/fleet_images.py                  (needs `triton-standin --scale ngc`)
    .venv/bin/python benchmarks/fleet_images.py --source localhost/standin --small   (the small stand-ins)

Each fleet is pushed, measured and removed in turn (images, bases it made, the registry's storage),
so the disk holds one fleet at a time; the registry it starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from composer.assembly.pruning import sweep_stages
from composer.core.units import human_size
from composer.engine.connect import connect
from composer.engine.interface import Engine
from composer.pipeline import build_image
from composer.publish.blobs import BlobCache
from composer.publish.image_push import push_assembled
from composer.registry.client import Registries
from composer.resolve.resolve import resolve
from composer.catalog.catalog import Catalog
from composer.config.types import CompositionSpec

NGC_SOURCE = "localhost/standin-ngc"
FLEET = (("python",), ("onnxruntime", "python"), ("pytorch", "python"), ("onnxruntime", "python", "tensorrt", "pytorch"))
# The small stand-ins have no tensorrt: identity stands in for it, and for pytorch, as in the small
# figures in README (their pytorch takes a pruned base too since the proof leaves what the full image
# could not resolve either, such as torch/bin/test_shim's libtorch.so).
SMALL_FLEET = (("python",), ("onnxruntime", "python"), ("identity",), ("identity", "onnxruntime", "python"))
BENCH_KEY = "org.triton-composer.bench"
LABEL = {BENCH_KEY: "fleet"}  # on every image it builds, the bases included
MANIFEST = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
REGISTRY_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "registry"


@dataclass(frozen=True)
class Pushed:
    selection: str
    size: int  # the image's size in the engine (uncompressed)
    blobs: tuple[tuple[str, int], ...]  # (digest, compressed size): the config, then the layers, oldest first


def fleet_figures(engine: Engine, registry_host: str, *, source: str = NGC_SOURCE, fleet=FLEET,
                  on_line=print, between_fleets=lambda: None) -> dict:
    """Both fleets' figures: {"pruned": ..., "min": ..., "ratios": ...}, each with its images and
    totals; `between_fleets` may empty the registry (main does) so the disk holds one fleet."""
    figures = {}
    for base in ("pruned", "min"):
        pushed = _push_fleet(engine, registry_host, base, source, fleet, on_line)
        figures[base] = _totals(pushed)
        between_fleets()
    pruned, minimal = figures["pruned"], figures["min"]
    figures["ratios"] = {
        "pruned stored / sum of pruned sizes": pruned["stored"] / pruned["sum_of_sizes"],
        "pruned stored / min-based stored": pruned["stored"] / minimal["stored"],
    }
    return figures


def _push_fleet(engine: Engine, registry_host: str, base: str, source: str, fleet, on_line) -> list[Pushed]:
    catalog, made, pushed = Catalog.load(), [], []
    run = uuid.uuid4().hex[:8]
    cache_root = Path(tempfile.mkdtemp(prefix="fleet-blob-cache-"))
    cache = BlobCache(cache_root)  # the fleet's base layers, compressed once (as on a build machine)
    try:
        for backends in fleet:
            name = "-".join(backends)
            tag = f"{registry_host}/fleet-{base}/tritonserver:{name}-{run}"
            spec = CompositionSpec().with_fields({
                "selection.backends": backends, "images.version": "24.09", "images.registry": source,
                "result.tag": tag, "selection.base": base, "result.smoke_test": False})
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="fleet-layers-") as layers, \
                    tempfile.TemporaryDirectory(prefix="fleet-blobs-") as folder:
                result = build_image(engine, resolve(engine, spec, catalog).plan, labels=LABEL, layers_dir=Path(layers))
                made.append(tag)
                if result.pruned_base is not None and result.pruned_base.made:
                    made.append(result.pruned_base.tag)
                # As composer build --push does: the composer's own client, its layers compressed one fixed way.
                push_assembled(engine, result.assembled, tag, Registries(engine), compression="gzip",
                               folder=Path(folder), cache=cache)
            blobs = _blobs(registry_host, f"fleet-{base}/tritonserver", f"{name}-{run}")
            pushed.append(Pushed("+".join(backends), result.size, blobs))
            on_line(f"{base:6s} {'+'.join(backends):42s} {human_size(result.size):>9s}  "
                    f"{len(blobs) - 1} layers  built and pushed in {time.monotonic() - started:.0f} s")
    finally:
        for tag in reversed(made):
            engine.remove_image(tag, force=True)
        for image in engine.images_labelled(f"{BENCH_KEY}={LABEL[BENCH_KEY]}"):  # a base made by a build that failed after
            engine.remove_image(image, force=True)
        sweep_stages(engine)
        shutil.rmtree(cache_root, ignore_errors=True)
    return pushed


def _blobs(host: str, name: str, tag: str) -> tuple[tuple[str, int], ...]:
    request = urllib.request.Request(f"http://{host}/v2/{name}/manifests/{tag}", headers={"Accept": MANIFEST})
    with urllib.request.urlopen(request, timeout=30) as response:
        manifest = json.load(response)
    return ((manifest["config"]["digest"], manifest["config"]["size"]),
            *((layer["digest"], layer["size"]) for layer in manifest["layers"]))


def _totals(pushed: list[Pushed]) -> dict:
    """Registry: unique blobs. Node: what the k-th image adds, by digest and by the engine's chains."""
    stored: dict[str, int] = {}
    held: set[str] = set()
    chains: set[tuple[str, ...]] = set()
    images = []
    for index, image in enumerate(pushed):
        config, layers = image.blobs[0], image.blobs[1:]
        new_blobs = sum(size for digest, size in image.blobs if digest not in held)
        shared = 0  # layers whose whole chain the node holds: Docker pulls every layer above them
        while shared < len(layers) and tuple(d for d, _ in layers[:shared + 1]) in chains:
            shared += 1
        docker = config[1] + sum(size for _, size in layers[shared:])
        images.append({"selection": image.selection, "size": image.size,
                       "compressed": sum(size for _, size in image.blobs),
                       "node_pull_containerd": new_blobs if index else None,
                       "node_pull_docker": docker if index else None})
        for digest, size in image.blobs:
            stored[digest] = size
            held.add(digest)
        chains.update(tuple(d for d, _ in layers[:n]) for n in range(1, len(layers) + 1))
    return {"images": images, "stored": sum(stored.values()), "sum_of_sizes": sum(i["size"] for i in images),
            "sum_of_compressed": sum(i["compressed"] for i in images)}


def _start_registry(root: Path) -> tuple[int, int]:
    """A registry of our own on a free port of 127.0.0.1 (scripts/registry), storing under root/data: (port, pid)."""
    port = _free_port()
    (root / "config.yml").write_text(
        "version: 0.1\nlog:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n")
    return _start_registry_on(root, port)


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def report(figures: dict) -> str:
    lines = []
    for base in ("pruned", "min"):
        fleet = figures[base]
        lines.append(f"== {base} base")
        for image in fleet["images"]:
            pulls = "" if image["node_pull_containerd"] is None else (
                f"   node pulls after the ones above: {human_size(image['node_pull_containerd'])} (by digest), "
                f"{human_size(image['node_pull_docker'])} (Docker, by chain)")
            lines.append(f"  {image['selection']:42s} {human_size(image['size']):>9s} "
                         f"(pushed {human_size(image['compressed'])}){pulls}")
        lines.append(f"  registry stores {human_size(fleet['stored'])} of {human_size(fleet['sum_of_compressed'])} "
                     f"pushed; the images' sizes sum to {human_size(fleet['sum_of_sizes'])}")
    for what, ratio in figures["ratios"].items():
        lines.append(f"{what}: {ratio:.2f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=NGC_SOURCE, help="where the 24.09 full and min images are")
    parser.add_argument("--small", action="store_true", help="the small stand-ins' fleet (no tensorrt there)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    engine = connect()
    root = Path(tempfile.mkdtemp(prefix="fleet-registry-"))
    pid = None
    try:
        port, pid = _start_registry(root)
        host = f"127.0.0.1:{port}"

        def wipe() -> None:
            nonlocal pid
            _stop(pid)
            shutil.rmtree(root / "data", ignore_errors=True)
            _, pid = _start_registry_on(root, port)

        figures = fleet_figures(engine, host, source=args.source, fleet=SMALL_FLEET if args.small else FLEET,
                                on_line=lambda line: print(line, flush=True), between_fleets=wipe)
        print(json.dumps(figures, indent=1) if args.json else report(figures))
    finally:
        if pid is not None:
            _stop(pid)
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _start_registry_on(root: Path, port: int) -> tuple[int, int]:
    (root / "data").mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(REGISTRY_SCRIPT), str(port), str(root / "config.yml")], capture_output=True, text=True,
                          timeout=120, check=True)
    return port, int(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
