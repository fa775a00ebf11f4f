"""Cold start: from an empty node to the first answer (issue 37), on nodes simulated on this machine.

For each image, a fresh node pulls it from a registry on 127.0.0.1 (Debian's docker-registry, the
tests' own) and serves one sample model (ONNX for onnxruntime+python; TorchScript for
pytorch+python); the clock runs from the start of the pull to the first answer checked against the
sample's expected values. A node is a fresh containerd (its own root, state and socket, no CRI:
`ctr content fetch` downloads, `ctr images pull` unpacks what is then local, `ctr run --net-host`
starts tritonserver on 127.0.0.1) or a fresh Docker data root (a second dockerd, its pull as one);
with --runtime, also containerd v2 (containerd2: the pruned image pulled apart and as one) and
containerd v2 with stargz-snapshotter (containerd-stargz: the eStargz image mounted from the registry,
read on demand; the clock from the start of `ctr-remote images rpull` to the first checked answer).

Rows (the 24.09 NGC-scale stand-ins by default):
  composepy  onnxruntime+python made as compose.py makes it, pushed by the engine (gzip)
  min        onnxruntime+python on the min image (--base min), gzip; then pytorch+python on the same node
  pruned     onnxruntime+python --base pruned, gzip; pytorch+python after it; zstd; uncompressed;
             and the floor: the uncompressed layers imported from a local file (no network, no
             decompression) plus the server's start; estargz (its build's smoke test lists the
             files the server opened: the prefetch lists), on containerd 1.6 (pulled whole, as gzip)
             and lazily on a stargz node, beside its floor (the server started again on the same
             node, its files local, plus the prefetched bytes at the link's rate) and the bytes the
             node was sent before its first answer and in all (a counting proxy)
Every image is built with the composer and pushed through its registry client (composer build
--push --compression), but the compose.py-style one, which the engine pushes as a user of
compose.py would. Docker 20.10 (Debian 12's) cannot pull zstd layers: its zstd rows are left out.

    .venv/bin/python benchmarks/coldstart.py --json coldstart.json      (needs `triton-standin --scale ngc`)
    .venv/bin/python benchmarks/coldstart.py --source localhost/standin  (the small stand-ins: a check)
    ... --bandwidth none,1gbit,10gbit   (each row behind each cap: a proxy on 127.0.0.1)
    ... --only pruned --runtime containerd
    ... --only pruned,composepy --runtime containerd-stargz,containerd2,containerd \
        --compression gzip,zstd,estargz --lazy-bandwidth none,1gbit --registry-gone   (issue 46)

It checks free disk (and memory, for a registry in memory) first and says what it needs; it
removes as it goes: each node's root, the registry's storage, the images it built, its blob cache;
at the end, what its builds left untagged (a compose.py-style build's stages).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import docker
import requests


if __package__ in (None, ""):  # run as a script (python benchmarks/X.py): the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet_images import _start_registry_on, _stop
from benchmarks.ngc_scale import compose_py_dockerfile
from benchmarks._leftovers import remove_new_untagged, untagged
from composer.catalog.catalog import Catalog
from composer.config.types import CompositionSpec
from composer.core.errors import ComposerError
from composer.core.units import human_size
from composer.engine.connect import connect
from composer.engine.interface import Engine
from composer.pipeline import build_image
from composer.publish.blobs import BlobCache
from composer.publish.image_push import push_assembled
from composer.registry.client import Registries
from composer.registry.estargz import PREFETCH_BYTES_ANNOTATION
from composer.resolve.resolve import resolve
from composer.verify.samples import load_samples
from triton_standins import NUMPY_REQUIREMENT, host
from triton_standins.engines import Dockerd
from triton_standins.nodes import (
    Containerd2Node, ContainerdNode, BandwidthProxy, DiskPeak, TRITONSERVER, first_answer, free_port, go_tool,
    parse_bandwidth, server_args, wait_ready,
)

NGC_SOURCE = "localhost/standin-ngc"
VERSION = "24.09"
FIRST = ("onnxruntime", "python")
SECOND = ("pytorch", "python")
SAMPLE_ORDER = ("onnx_affine", "torchscript_affine", "identity_int32", "add_sub")  # the first one the image serves
# compose.py installs numpy<2 from PyPI for the python backend (benchmarks/ngc_scale.py leaves it out:
# containers here cannot reach PyPI); the small stand-ins' ONNX backend is Python-based and needs it,
# so the compose.py-style image here installs the same wheel, downloaded on the host.
COMPOSE_PY_NUMPY = ("COPY wheels /tmp/wheels\n"
                    "RUN pip3 install --no-index --no-deps --break-system-packages /tmp/wheels/*.whl && rm -rf /tmp/wheels\n")
BENCH_KEY = "org.triton-composer.bench"
LABELS = {BENCH_KEY: "coldstart"}
GROUPS = ("composepy", "min", "pruned")
RUNTIMES = ("containerd", "docker", "containerd2", "containerd-stargz")
DEFAULT_RUNTIMES = ("containerd", "docker")
LAZY = "containerd-stargz"  # containerd v2 with stargz-snapshotter: eStargz images only, mounted from the registry
PULLS = ("apart", "together")  # containerd: fetch then unpack, each timed; or one pull unpacking as layers arrive
COMPRESSIONS = ("gzip", "zstd", "none", "estargz")  # the pruned group's pushes, in this order
# With the registry gone: read every file of 256 KB or more of two folders in the container (each
# at most 20 s); how many, and how many could not be read.
GONE_READ = ("n=0; bad=0; for f in $(find /opt/tritonserver /usr/lib -xdev -type f -size +256k 2>/dev/null); do "
             "n=$((n+1)); timeout 20 cat \"$f\" >/dev/null 2>&1 || bad=$((bad+1)); done; echo $n $bad")
# A lazy node keeps fetching its layers behind the server (the snapshotter's background fetch): its
# bytes in total are read once every mounted layer is whole, or after this many seconds.
BACKGROUND_WAIT = 120
READY_TIMEOUT = 600
DOCKER_SLOT = 236  # the second dockerd's addresses (unused: its servers run on the host's network)
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFESTS = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
# What one group holds at its peak, in units of its largest image's size: the registry's copy (about
# 0.8x compressed, 1x uncompressed), the node's content store and snapshots (containerd keeps both),
# the blob cache of a base no registry holds; the figures of the NGC-scale stand-ins' first run.
GB = 1e9
# min: the registry holds both min-based images, 8.0 GB and the second's own layers (a run with 11 GB
# of tmpfs failed the second push with HTTP 500, the tmpfs full).
NEEDS_NGC = {"composepy": (21 * GB, 10 * GB), "min": (22 * GB, 13 * GB), "pruned": (15 * GB, 6 * GB)}
NEEDS_SMALL = {"composepy": (6 * GB, 2 * GB), "min": (6 * GB, 2 * GB), "pruned": (6 * GB, 2 * GB)}


@dataclass
class Row:
    """One node that pulled one image and served (or failed to serve) the sample."""

    selection: str
    build: str  # composepy, min, pruned
    compression: str  # gzip, zstd, none
    runtime: str  # containerd, docker
    node: str  # empty, or the image the node already holds (its selection and build)
    bandwidth: str  # none, 1gbit, ...; file: the floor, imported from a local file
    download_s: float | None = None
    unpack_s: float | None = None
    ready_s: float | None = None
    first_answer_s: float | None = None
    total_s: float | None = None
    bytes_moved: int | None = None
    served: bool = False  # true only when the answer was checked and correct
    peak_disk: int | None = None  # the most the node's filesystem held above its start, during the row
    image_size: int | None = None  # the image's layers, uncompressed
    layers: list[dict] = field(default_factory=list)  # each layer: digest, size, done_s (its download's end)
    error: str | None = None
    # containerd: "apart" (ctr content fetch, then ctr images pull of what is local: each timed) or
    # "together" (one ctr images pull, unpacking each layer as it arrives; unpack_s is what is left
    # after the last byte). Docker and the floor: "together" and "file".
    pull: str = "apart"
    # Through the link's proxy (every lazy row has one, capped or not): the bytes the node was sent
    # up to its first checked answer (a pull's rows: all of them), and in total (a lazy row: after its
    # background fetch ended or BACKGROUND_WAIT); bytes_moved stays the registry's access log.
    bytes_first: int | None = None
    bytes_total: int | None = None
    # A lazy row: the bytes its layers' prefetch lists hold (their annotations); the layers the
    # snapshotter mounted from the registry and those it fetched whole; whether the background fetch
    # made every layer whole within BACKGROUND_WAIT; the server started again on the same node (its
    # files local now), to ready and answer; and the floor: that start plus the prefetched bytes at
    # the link's rate (floor_rate: the cap, or with none the pruned gzip row's download rate).
    prefetch_bytes: int | None = None
    layers_mounted: int | None = None
    layers_fetched_whole: int | None = None
    background_done: bool | None = None
    restart_s: float | None = None
    floor_s: float | None = None
    floor_rate: float | None = None


@dataclass
class Image:
    """An image in the benchmark's registry."""

    selection: tuple[str, ...]
    build: str
    compression: str
    repository: str
    tag: str
    manifest: dict
    size: int  # uncompressed (the sum of its layers' tar sizes, from the engine)

    @property
    def name(self) -> str:
        return f"{'+'.join(self.selection)} {self.build}"

    def ref(self, host: str) -> str:
        return f"{host}/{self.repository}:{self.tag}"

    @property
    def layers(self) -> list[dict]:
        return list(self.manifest["layers"])


class Registry:
    """Debian's docker-registry on 127.0.0.1, no auth, storage on disk or in memory (a tmpfs the
    benchmark mounts); its access log tells the bytes it sent."""

    def __init__(self, root: Path, memory: int | None):
        self.root, self.memory = root, memory
        self.port = free_port()
        self.pid: int | None = None
        self.data = root / "data"
        self.mounted = False

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / f"registry-{self.port}.log"

    def start(self) -> "Registry":
        self.root.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(exist_ok=True)
        if self.memory and not self.mounted:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(self.memory)},mode=0700", "coldstart-registry",
                            str(self.data)], check=True, capture_output=True)
            self.mounted = True
        (self.root / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.data}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n")
        self.port, self.pid = _start_registry_on(self.root, self.port)
        return self

    def empty(self) -> None:
        """Stop, drop every blob, start again on the same port."""
        self.stop()
        for child in self.data.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        self.port, self.pid = _start_registry_on(self.root, self.port)

    def stop(self) -> None:
        if self.pid is not None:
            _stop(self.pid)
            self.pid = None

    def close(self) -> None:
        self.stop()
        if self.mounted:
            subprocess.run(["umount", str(self.data)], capture_output=True)
            self.mounted = False
        shutil.rmtree(self.root, ignore_errors=True)

    def manifest(self, repository: str, tag: str) -> dict:
        response = requests.get(f"http://{self.host}/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFESTS},
                                timeout=30)
        response.raise_for_status()
        return response.json()

    def blob_path(self, digest: str) -> Path:
        hexa = digest.partition(":")[2]
        return self.data / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexa[:2] / hexa / "data"

    def log_offset(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def sent_since(self, offset: int) -> int:
        """The bytes of every GET the registry answered since `offset` of its access log."""
        with open(self.log, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
        return sum(int(size) for status, size in re.findall(r'"GET \S+ HTTP/[\d.]+" (\d{3}) (\d+)', text)
                   if status.startswith("2"))


class Bench:
    def __init__(self, engine: Engine, source: str, scratch: Path, registry: Registry, bandwidths: list[str],
                 runtimes: tuple[str, ...], pulls: tuple[str, ...] = ("apart",),
                 compressions: tuple[str, ...] = COMPRESSIONS, lazy_bandwidths: list[str] | None = None,
                 second: bool = True):
        self.engine, self.source, self.scratch, self.registry = engine, source, scratch, registry
        self.bandwidths, self.runtimes, self.pulls, self.compressions = bandwidths, runtimes, pulls, compressions
        self.lazy_bandwidths = lazy_bandwidths or bandwidths
        self.second = second
        self.check_gone = False  # after the lazy rows, the registry taken away from a lazily pulled server
        self.gone: list[dict] = []
        self.rows: list[Row] = []
        self.catalog = Catalog.load()
        self.registries = Registries(engine)
        self.made: list[str] = []  # images this run built (removed as soon as they are pushed)
        self.found = set(engine.images_labelled(f"{BENCH_KEY}=coldstart"))  # another run's, left alone

    # Images

    def build(self, selection: tuple[str, ...], base: str, layers: Path, reads: bool = False):
        """The composer's build; with `reads` (an eStargz push to come) its smoke test serves the
        row's sample alone and lists the files the server opened, as `composer build --push REF
        --compression estargz` does: that push's prefetch list."""
        tag = f"coldstart/{'-'.join(selection)}:{base}-{uuid.uuid4().hex[:8]}"
        fields = {"selection.backends": selection, "images.version": VERSION, "images.registry": self.source,
                  "selection.base": base, "result.tag": tag, "result.smoke_test": reads,
                  "result.labels": tuple(LABELS.items())}
        if reads:
            fields.update({"result.model_repository": self.models(selection)[1], "result.samples": False})
        spec = CompositionSpec().with_fields(fields)
        plan = resolve(self.engine, spec, self.catalog).plan
        layers.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        result = build_image(self.engine, plan, labels=LABELS, layers_dir=layers, record_reads=reads,
                             smoke_always=reads)
        if reads:
            say(f"  its smoke test saw the server open {len(result.smoke.reads if result.smoke else ())} file(s)")
        made = [tag] + ([result.pruned_base.tag] if result.pruned_base is not None and result.pruned_base.made else [])
        self.made += made
        say(f"built {'+'.join(selection)} --base {base}: {human_size(result.size)} in {time.monotonic() - started:.0f} s")
        return result, made

    def push(self, result, selection, build: str, compression: str) -> Image:
        repository = f"coldstart/{'-'.join(selection)}"
        tag = f"{build}-{compression}"
        folder = self.scratch / "push"
        folder.mkdir(exist_ok=True)
        started = time.monotonic()
        prefetch = tuple(result.smoke.reads) if compression == "estargz" and result.smoke else ()
        push_assembled(self.engine, result.assembled, f"{self.registry.host}/{repository}:{tag}", self.registries,
                       compression=compression, folder=folder, cache=BlobCache(self.scratch / "blob-cache"),
                       prefetch=prefetch)
        shutil.rmtree(folder, ignore_errors=True)
        image = Image(selection, build, compression, repository, tag, self.registry.manifest(repository, tag),
                      result.size)
        say(f"pushed {image.name} ({compression}): {human_size(sum(l['size'] for l in image.layers))} "
            f"in {time.monotonic() - started:.0f} s"
            + (f"; {human_size(_prefetched(image))} of {len(prefetch)} file(s) prefetched" if prefetch else ""))
        return image

    def composepy(self, selection: tuple[str, ...]) -> Image:
        """The compose.py-style image (benchmarks/ngc_scale.py's recipe), pushed by the engine (gzip)."""
        release = self.catalog.release(VERSION)
        full = self.engine.require_image(release.full_ref(self.source))
        minimal = self.engine.require_image(release.min_ref(self.source))
        tag = f"coldstart/{'-'.join(selection)}:composepy-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        wheels = host.wheels("numpy", (NUMPY_REQUIREMENT,), say)
        with tempfile.TemporaryDirectory(prefix="compose-py-", dir=self.scratch) as tmp:
            shutil.copytree(wheels, Path(tmp) / "wheels")
            (Path(tmp) / "Dockerfile").write_text(compose_py_dockerfile(full.id, minimal.id, selection, release)
                                                  + COMPOSE_PY_NUMPY)
            self.engine.build(Path(tmp), tag=tag, labels=LABELS, network_mode="host")
        self.made.append(tag)
        size = self.engine.require_image(tag).size
        say(f"built {'+'.join(selection)} compose.py-style: {human_size(size)} in {time.monotonic() - started:.0f} s")
        repository, ref_tag = f"coldstart/{'-'.join(selection)}", "composepy-gzip"
        ref = f"{self.registry.host}/{repository}:{ref_tag}"
        self.engine.tag(tag, ref)
        started = time.monotonic()
        try:
            self.engine.push(ref)
        finally:
            self.engine.remove_image(ref)
        image = Image(selection, "composepy", "gzip", repository, ref_tag, self.registry.manifest(repository, ref_tag),
                      size)
        say(f"pushed {image.name} (gzip, by the engine): {human_size(sum(l['size'] for l in image.layers))} "
            f"in {time.monotonic() - started:.0f} s")
        return image

    def forget(self, made: list[str]) -> None:
        """Images of one build (its image, then its base when the build made it)."""
        for tag in made:
            self.engine.remove_image(tag, force=True)
            if tag in self.made:
                self.made.remove(tag)

    def forget_built(self) -> None:
        """The images this run built, once pushed (their bases last), and any other image with the
        benchmark's label that was not there at the start (a base made by a build that failed)."""
        for tag in self.made:
            self.engine.remove_image(tag, force=True)
        self.made.clear()
        for image in self.engine.images_labelled(f"{BENCH_KEY}=coldstart"):
            if image not in self.found:
                self.engine.remove_image(image, force=True)

    # Nodes

    def models(self, selection: tuple[str, ...]):
        """The sample this image serves, and a model repository holding it alone."""
        samples = {s.model: s for s in load_samples()}
        sample = next(samples[m] for m in SAMPLE_ORDER if set(samples[m].needs) <= set(selection))
        folder = self.scratch / f"models-{sample.model}"
        if not folder.exists():
            shutil.copytree(sample.path, folder / sample.model)
            for path in [folder, *folder.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)  # the server may run as a user of the image's
        return sample, folder

    def row(self, image: Image, runtime: str, held: Image | None, bandwidth: str) -> Row:
        return Row("+".join(image.selection), image.build, image.compression, runtime,
                   f"{'+'.join(held.selection)} {held.build}" if held else "empty", bandwidth, image_size=image.size)

    def containerd_rows(self, images: list[Image], bandwidth: str, pull: str = "apart",
                        runtime: str = "containerd") -> None:
        """A fresh containerd node pulls each image in turn (the second on a node holding the first):
        Debian's containerd 1.6, or (runtime containerd2) containerd v2 without a snapshotter of its own."""
        kind = Containerd2Node if runtime == "containerd2" else ContainerdNode
        node = kind(self.scratch / f"node-{uuid.uuid4().hex[:6]}").start()
        try:
            held = None
            for image in images:
                row = self.row(image, runtime, held, bandwidth)
                row.pull = pull
                with _link(self.registry, bandwidth) as link:
                    self._containerd(node, image, image.ref(link.host), row)
                self._done(row)
                held = image
        finally:
            node.stop()

    def _containerd(self, node: ContainerdNode, image: Image, ref: str, row: Row) -> None:
        sample, models = self.models(image.selection)
        offset = self.registry.log_offset()
        task = f"server-{uuid.uuid4().hex[:6]}"
        try:
            with DiskPeak(node.root) as disk:
                started = time.monotonic()
                if row.pull == "together":
                    seconds, arrivals = node.pull(ref)
                    row.download_s = max(arrivals.values(), default=0.0)
                    row.unpack_s = seconds - row.download_s
                else:
                    row.download_s, arrivals = node.fetch(ref)
                    row.unpack_s = node.unpack(ref)
                row.bytes_moved = row.bytes_first = self.registry.sent_since(offset)
                row.layers = _layer_times(image, arrivals)
                self._serve(row, sample, started, lambda args: node.run(
                    ref, task, args, mounts=((models, "/models"),), log=node.root / f"{task}.log"),
                    lambda: node.running(task), lambda: _tail(node.root / f"{task}.log"))
            row.peak_disk = disk.used
        except (RuntimeError, subprocess.SubprocessError, OSError) as error:
            row.error = str(error).splitlines()[-1][:300] if str(error) else type(error).__name__
        finally:
            node.remove_task(task)

    def floor_row(self, image: Image) -> None:
        """The uncompressed layers imported into a fresh containerd from a local OCI archive, then
        served: no network, no decompression."""
        archive = self.scratch / "floor.tar"
        name = f"localhost/coldstart/floor:{uuid.uuid4().hex[:6]}"
        _oci_archive(self.registry, image, name, archive)
        row = Row("+".join(image.selection), image.build, image.compression, "containerd", "empty", "file",
                  image_size=image.size, pull="file")
        node = ContainerdNode(self.scratch / f"node-{uuid.uuid4().hex[:6]}").start()
        sample, models = self.models(image.selection)
        task = f"server-{uuid.uuid4().hex[:6]}"
        try:
            with DiskPeak(node.root) as disk:
                started = time.monotonic()
                seconds, arrivals = node.import_archive(archive)
                row.layers = _layer_times(image, arrivals)
                row.download_s = max((l["done_s"] for l in row.layers if l["done_s"] is not None), default=0.0)
                row.unpack_s = seconds - row.download_s
                row.bytes_moved = archive.stat().st_size
                self._serve(row, sample, started, lambda args: node.run(
                    name, task, args, mounts=((models, "/models"),), log=node.root / f"{task}.log"),
                    lambda: node.running(task), lambda: _tail(node.root / f"{task}.log"))
            row.peak_disk = disk.used
        except (RuntimeError, subprocess.SubprocessError, OSError) as error:
            row.error = str(error).splitlines()[-1][:300] if str(error) else type(error).__name__
        finally:
            node.stop()
            archive.unlink(missing_ok=True)
        self._done(row)

    def lazy_row(self, image: Image, bandwidth: str) -> None:
        """A fresh containerd v2 node with stargz-snapshotter (its default background fetch) pulls the
        eStargz image lazily (ctr-remote images rpull: each layer mounted from the registry, its
        prefetched files fetched first) and serves; the clock runs from the start of the pull to the
        first checked answer. The link is always a proxy (capped or not), which counts the bytes the
        node was sent before the answer and, once the background fetch made every layer whole (or
        after BACKGROUND_WAIT), in total. Then the server is started again on the same node, its
        files local now: that start plus the prefetched bytes at the link's rate is the row's floor."""
        row = self.row(image, LAZY, None, bandwidth)
        row.pull = "lazy"
        row.prefetch_bytes = _prefetched(image)
        row.layers = _layer_times(image, {})  # none lands in the content store: mounted
        sample, models = self.models(image.selection)
        offset = self.registry.log_offset()
        task = f"server-{uuid.uuid4().hex[:6]}"
        with _link(self.registry, bandwidth, counted=True) as link:
            ref = image.ref(link.host)
            node = Containerd2Node(self.scratch / f"node-{uuid.uuid4().hex[:6]}", lazy=True,
                                   plain_http_hosts=(link.host,))
            try:
                node.start()
                with DiskPeak(node.root) as disk:
                    started = time.monotonic()
                    row.download_s = node.rpull(ref)  # the index, manifest, config; each layer mounted and prefetched
                    self._serve(row, sample, started, lambda args: node.run(
                        ref, task, args, mounts=((models, "/models"),), log=node.root / f"{task}.log"),
                        lambda: node.running(task), lambda: _tail(node.root / f"{task}.log"))
                    row.bytes_first = link.moved()
                    row.layers_mounted, row.layers_fetched_whole = node.remote_snapshots()
                    row.background_done = _wait_whole(node, link, BACKGROUND_WAIT)
                    row.bytes_total = link.moved()
                    row.bytes_moved = self.registry.sent_since(offset)
                    node.remove_task(task)
                    row.restart_s = self._start_again(node, ref, sample, models)
                row.peak_disk = disk.used
                row.floor_rate = parse_bandwidth(bandwidth) or self._link_rate()
                if row.floor_rate and row.restart_s is not None:
                    row.floor_s = row.restart_s + row.prefetch_bytes / row.floor_rate
            except (RuntimeError, subprocess.SubprocessError, OSError, requests.RequestException) as error:
                row.error = str(error).splitlines()[-1][:300] if str(error) else type(error).__name__
            finally:
                node.stop()
        self._done(row)

    def registry_gone(self, image: Image) -> None:
        """What a lazily pulled server does once its registry goes away (issue 46): a fresh stargz node
        without background fetch (so what the server did not read stays in the registry) pulls the
        eStargz image through a proxy and serves the row's sample, the python sample left unloaded
        (--model-control-mode=explicit); the proxy is then stopped (the registry unreachable: its
        connections cut, new ones refused); the loaded model is asked again, and the python sample is
        loaded (its backend's files were not in the prefetch list nor read). Each step's outcome and
        seconds go to self.gone (printed at the end, in --json as "registry_gone")."""
        samples = {s.model: s for s in load_samples()}
        sample, _ = self.models(image.selection)
        other = samples["add_sub"]
        folder = self.scratch / "models-gone"
        shutil.rmtree(folder, ignore_errors=True)
        for one in (sample, other):
            shutil.copytree(one.path, folder / one.model)
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        task = f"gone-{uuid.uuid4().hex[:6]}"
        found: dict = {"image": f"{image.name} {image.compression}"}
        session = requests.Session()
        session.trust_env = False
        link = _link(self.registry, "none", counted=True).__enter__()
        node = Containerd2Node(self.scratch / f"node-{uuid.uuid4().hex[:6]}", lazy=True, background_fetch=False,
                               plain_http_hosts=(link.host,))
        try:
            node.start()
            ref = image.ref(link.host)
            node.rpull(ref)
            http, grpc = free_port(), free_port()
            url = f"http://127.0.0.1:{http}"
            node.run(ref, task, [*server_args("/models", http, grpc), "--model-control-mode=explicit",
                                 f"--load-model={sample.model}"], mounts=((folder, "/models"),),
                     log=node.root / f"{task}.log")
            if not wait_ready(url, READY_TIMEOUT, lambda: node.running(task)):
                raise RuntimeError(f"the server did not become ready: {_tail(node.root / f'{task}.log')[-300:]}")
            found["before"] = first_answer(url, sample) or "answered, checked"
            found["moved_before"] = link.moved()
            fetched = node.fetched_bytes()
            found["fetched_of_layers"] = [sum(d for d, _ in fetched.values()), sum(z for _, z in fetched.values())]
            link.__exit__(None, None, None)  # the registry gone for this node
            link.proxy = None
            started = time.monotonic()
            found["loaded_model_after"] = first_answer(url, sample) or "answered, checked"
            found["loaded_model_after_s"] = round(time.monotonic() - started, 2)
            started = time.monotonic()
            try:
                answer = session.post(f"{url}/v2/repository/models/{other.model}/load", timeout=300)
                found["new_model_load"] = f"HTTP {answer.status_code}: {answer.text.strip()[:300]}"
            except requests.RequestException as error:
                found["new_model_load"] = f"no answer: {type(error).__name__} {str(error)[:200]}"
            found["new_model_load_s"] = round(time.monotonic() - started, 1)
            if found["new_model_load"].startswith("HTTP 200"):
                found["new_model_answer"] = first_answer(url, other) or "answered, checked"
            # Files no one read yet (so not fetched: no background fetch), read now in the container.
            started = time.monotonic()
            read = node.ctr("tasks", "exec", "--exec-id", f"read-{uuid.uuid4().hex[:6]}", task, "sh", "-c", GONE_READ,
                            timeout=400)
            found["unread_files"] = (f"exit {read.returncode}: {(read.stdout + read.stderr).strip()[-300:]} "
                                     "(files of 256 KB or more under /opt/tritonserver and /usr/lib; read whole; failed)")
            found["unread_files_s"] = round(time.monotonic() - started, 1)
            found["server_running"] = node.running(task)
            found["loaded_model_at_the_end"] = first_answer(url, sample) or "answered, checked"
            found["snapshotter_log"] = [line[:300] for line in _tail(node.stargz_log, 200).splitlines()
                                        if '"level":"error"' in line or '"level":"warning"' in line][-3:]
            found["server_log"] = _tail(node.root / f"{task}.log", 8)[-800:]
        except (RuntimeError, subprocess.SubprocessError, OSError, requests.RequestException) as error:
            found["error"] = str(error).splitlines()[-1][:300] if str(error) else type(error).__name__
        finally:
            node.stop()
            link.__exit__(None, None, None)
            shutil.rmtree(folder, ignore_errors=True)
        self.gone.append(found)
        for key, value in found.items():
            say(f"  registry gone: {key}: {value}")

    def _start_again(self, node: Containerd2Node, ref: str, sample, models: Path) -> float | None:
        """The server started again on a node that served once (what it read is local): seconds to
        its first checked answer, or None when it did not answer right."""
        task = f"again-{uuid.uuid4().hex[:6]}"
        again = Row("", "", "", LAZY, "", "")
        try:
            started = time.monotonic()
            self._serve(again, sample, started, lambda args: node.run(
                ref, task, args, mounts=((models, "/models"),), log=node.root / f"{task}.log"),
                lambda: node.running(task), lambda: _tail(node.root / f"{task}.log"))
            return again.total_s
        except RuntimeError as error:
            say(f"  started again: {' '.join(str(error).split())[:200]}")
            return None
        finally:
            node.remove_task(task)

    def _link_rate(self) -> float | None:
        """Bytes a second of the link without a cap, as this run measured it: the pruned gzip image's
        download on a containerd node (its bytes over its seconds)."""
        row = next((r for r in self.rows if r.served and r.build == "pruned" and r.compression == "gzip" and
                    r.runtime == "containerd" and r.node == "empty" and r.bandwidth == "none" and r.pull == "apart"
                    and r.download_s), None)
        return row.bytes_moved / row.download_s if row else None

    def docker_rows(self, images: list[Image], bandwidth: str) -> None:
        """A fresh Docker data root (a second dockerd) pulls each image in turn."""
        dockerd = Dockerd(self.scratch / f"dockerd-{uuid.uuid4().hex[:6]}", slot=DOCKER_SLOT).start()
        try:
            version = dockerd.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
            held = None
            for image in images:
                if image.compression == "zstd" and int(version.split(".")[0] or 0) < 23:
                    say(f"  docker {version} cannot pull zstd layers (Docker 23+ can): no docker row for {image.name} zstd")
                    continue
                row = self.row(image, "docker", held, bandwidth)
                row.pull = "together"  # docker pull extracts each layer as it arrives
                with _link(self.registry, bandwidth) as link:
                    self._docker(dockerd, image, image.ref(link.host), row)
                self._done(row)
                held = image
        finally:
            dockerd.stop()
            shutil.rmtree(dockerd.root, ignore_errors=True)

    def _docker(self, dockerd: Dockerd, image: Image, ref: str, row: Row) -> None:
        import docker

        sample, models = self.models(image.selection)
        offset = self.registry.log_offset()
        name = f"coldstart-{uuid.uuid4().hex[:6]}"
        api = docker.APIClient(base_url=dockerd.host, timeout=3600)
        try:
            with DiskPeak(dockerd.root) as disk:
                started = time.monotonic()
                downloaded: dict[str, float] = {}
                repo, _, tag = ref.rpartition(":")
                for event in api.pull(repo, tag=tag, stream=True, decode=True):
                    if "error" in event:
                        raise RuntimeError(f"docker pull {ref}: {event['error']}")
                    if event.get("status") in ("Download complete", "Pull complete") and event.get("id"):
                        downloaded.setdefault(event["id"], time.monotonic() - started)
                pulled = time.monotonic() - started
                # Docker extracts each layer as soon as it is down: what is left after the last
                # byte arrived is the unpacking the node waits for.
                row.layers = [{"digest": l["digest"], "size": l["size"],
                               "done_s": _round(downloaded.get(l["digest"].partition(":")[2][:12]))}
                              for l in image.layers]
                row.download_s = max(downloaded.values(), default=pulled)
                row.unpack_s = pulled - row.download_s
                row.bytes_moved = row.bytes_first = self.registry.sent_since(offset)

                def start(args: list[str]) -> None:
                    done = dockerd.docker("run", "-d", "--name", name, "--network", "host", "--label",
                                          f"{BENCH_KEY}=coldstart", "-v", f"{models}:/models:ro", "--entrypoint",
                                          args[0], ref, *args[1:], timeout=300)
                    if done.returncode != 0:
                        raise RuntimeError(f"docker run: {done.stderr.strip()[-300:]}")

                def alive() -> bool:
                    done = dockerd.docker("inspect", "-f", "{{.State.Running}}", name, timeout=60)
                    return done.stdout.strip() == "true"

                self._serve(row, sample, started, start, alive,
                            lambda: dockerd.docker("logs", "--tail", "5", name, timeout=60).stderr.strip())
            row.peak_disk = disk.used
        except (RuntimeError, subprocess.SubprocessError, OSError, docker.errors.DockerException) as error:
            row.error = str(error).splitlines()[-1][:300] if str(error) else type(error).__name__
        finally:
            dockerd.docker("rm", "-f", name, timeout=120)
            api.close()

    def _serve(self, row: Row, sample, started: float, start, alive, log_tail) -> None:
        """Start the server, wait until it is ready, send the sample's request and check the answer."""
        http, grpc = free_port(), free_port()
        url = f"http://127.0.0.1:{http}"
        launched = time.monotonic()
        start(server_args("/models", http, grpc))
        if not wait_ready(url, READY_TIMEOUT, alive):
            raise RuntimeError(f"the server did not become ready: {log_tail()[-300:]}")
        ready = time.monotonic()
        row.ready_s = ready - launched
        problem = first_answer(url, sample)
        answered = time.monotonic()
        if problem:
            raise RuntimeError(f"wrong answer: {problem}")
        row.first_answer_s = answered - ready
        row.total_s = answered - started
        row.served = True

    def _done(self, row: Row) -> None:
        self.rows.append(row)
        say("  " + line_of(row))
        if row.layers and row.runtime != LAZY and row.bandwidth != "file":
            say("    " + layer_line(row))

    # Groups

    def group(self, name: str) -> None:
        layers = self.scratch / "layers"
        try:
            if name == "composepy":
                image = self.composepy(FIRST)
                self.forget_built()
                self.nodes([image])
                return
            compressions = self.compressions if name == "pruned" else ("gzip",)
            first, first_made = self.build(FIRST, name, layers / "first", reads="estargz" in compressions)
            # Both images with the first compression (the second image on a node holding the first);
            # a pruned image then with each other compression asked for.
            images = [self.push(first, FIRST, name, compressions[0])]
            if self.second:
                second, second_made = self.build(SECOND, name, layers / "second", reads=compressions[0] == "estargz")
                images.append(self.push(second, SECOND, name, compressions[0]))
                self.forget(second_made)  # pushed: the disk goes to the nodes
                shutil.rmtree(layers / "second", ignore_errors=True)
            if name != "pruned":
                self.forget(first_made)
                shutil.rmtree(layers / "first", ignore_errors=True)
            self.nodes(images)
            if name == "pruned":  # the same image with zstd, then uncompressed (and the floor)
                for compression in compressions[1:]:
                    self.registry.empty()
                    image = self.push(first, FIRST, name, compression)
                    self.nodes([image])
                    if compression == "none" and "containerd" in self.runtimes:
                        self.floor_row(image)
        finally:
            self.forget_built()
            shutil.rmtree(layers, ignore_errors=True)
            self.registry.empty()

    def nodes(self, images: list[Image]) -> None:
        """Each runtime asked for pulls the images: containerd (1.6) and Docker every image; containerd2
        the first pruned one, not eStargz, pulled apart and as one (does it overlap download and unpack?); the
        lazy node the first if eStargz, behind each of its links."""
        shutil.rmtree(self.scratch / "blob-cache", ignore_errors=True)  # bases compressed for the pushes before
        for bandwidth in self.bandwidths:
            if "containerd" in self.runtimes:
                for pull in self.pulls:
                    self.containerd_rows(images, bandwidth, pull)
            if "containerd2" in self.runtimes and images[0].build == "pruned" and images[0].compression != "estargz":
                for pull in PULLS:
                    self.containerd_rows(images[:1], bandwidth, pull, runtime="containerd2")
            if "docker" in self.runtimes:
                self.docker_rows(images, bandwidth)
        if LAZY in self.runtimes and images[0].compression == "estargz":
            for bandwidth in self.lazy_bandwidths:
                self.lazy_row(images[0], bandwidth)
            if self.check_gone:
                self.registry_gone(images[0])


class _link:
    """The registry's address as a node reaches it: directly, or through a proxy, capped, or (with
    `counted`) at least counting the bytes it relays."""

    def __init__(self, registry: Registry, bandwidth: str, counted: bool = False):
        self.registry, self.rate, self.counted = registry, parse_bandwidth(bandwidth), counted
        self.proxy: BandwidthProxy | None = None
        self.host = registry.host

    def __enter__(self) -> "_link":
        if self.rate is not None or self.counted:
            self.proxy = BandwidthProxy(("127.0.0.1", self.registry.port), self.rate).start()
            self.host = self.proxy.host
        return self

    def moved(self) -> int | None:
        """The bytes the node was sent through the proxy so far (None without one)."""
        return self.proxy.moved()[0] if self.proxy is not None else None

    def __exit__(self, *exc) -> None:
        if self.proxy is not None:
            self.proxy.stop()


def _prefetched(image: Image) -> int:
    """The bytes of an eStargz image's prefetch lists (each layer's annotation)."""
    return sum(int(l.get("annotations", {}).get(PREFETCH_BYTES_ANNOTATION, 0)) for l in image.layers)


def _compressed(image: Image) -> int:
    return sum(int(l["size"]) for l in image.layers)


def _wait_whole(node: Containerd2Node, link: _link, timeout: float) -> bool:
    """Wait until the snapshotter's background fetch made every mounted layer whole (its metrics),
    or the link has carried nothing for 15 s, or `timeout`: whether every layer is whole."""
    deadline = time.monotonic() + timeout
    last, quiet_since = link.moved(), time.monotonic()
    while time.monotonic() < deadline:
        try:
            layers = node.fetched_bytes()
        except requests.RequestException:
            layers = {}
        if layers and all(size and done >= size for done, size in layers.values()):
            return True
        moved = link.moved()
        if moved != last:
            last, quiet_since = moved, time.monotonic()
        elif time.monotonic() - quiet_since > 15:
            return False
        time.sleep(1)
    return False


def _layer_times(image: Image, arrivals: dict[str, float]) -> list[dict]:
    return [{"digest": l["digest"], "size": l["size"], "done_s": _round(arrivals.get(l["digest"]))}
            for l in image.layers]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _oci_archive(registry: Registry, image: Image, name: str, out: Path) -> None:
    """An OCI image archive (oci-layout, index.json, blobs) of `image` as the registry stores it,
    its blobs read from the registry's storage, the index naming it `name`."""
    manifest_bytes = json.dumps(image.manifest, separators=(",", ":")).encode()
    import hashlib

    digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{
        "mediaType": image.manifest.get("mediaType", "application/vnd.oci.image.manifest.v1+json"),
        "digest": digest, "size": len(manifest_bytes),
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rpartition(":")[2]}}]}

    def add_bytes(tar: tarfile.TarFile, path: str, data: bytes) -> None:
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = 0o644
        import io

        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(out, "w") as tar:
        add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add_bytes(tar, "index.json", json.dumps(index).encode())
        add_bytes(tar, f"blobs/sha256/{digest.partition(':')[2]}", manifest_bytes)
        for blob in [image.manifest["config"], *image.layers]:
            tar.add(registry.blob_path(blob["digest"]), arcname=f"blobs/sha256/{blob['digest'].partition(':')[2]}")


def say(line: str) -> None:
    print(line, flush=True)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def line_of(row: Row) -> str:
    if not row.served:
        return f"{row.selection} {row.build} {row.compression} {row.runtime} node={row.node} bw={row.bandwidth}: " \
               f"NOT SERVED: {row.error}"
    if row.runtime == LAZY:
        return (f"{row.selection} {row.build} {row.compression} {row.runtime} node={row.node} bw={row.bandwidth}: "
                f"total {row.total_s:.1f} s (rpull {row.download_s:.1f}, ready {row.ready_s:.1f}, answer "
                f"{row.first_answer_s:.2f}); layers mounted from the registry {row.layers_mounted}, fetched whole "
                f"{row.layers_fetched_whole}; moved before the answer {_size(row.bytes_first)} (prefetch lists "
                f"{_size(row.prefetch_bytes)}), in total {_size(row.bytes_total)} "
                f"({'every layer whole' if row.background_done else 'background fetch not done'}; the registry's "
                f"log: {_size(row.bytes_moved)}); started again {_s(row.restart_s)} s; floor {_s(row.floor_s)} s"
                + (f" ({row.total_s / row.floor_s:.2f}x)" if row.floor_s else "")
                + f"; peak disk {_size(row.peak_disk)}" + (f"; after the answer: {row.error}" if row.error else ""))
    return (f"{row.selection} {row.build} {row.compression} {row.runtime} node={row.node} bw={row.bandwidth} "
            f"pull={row.pull}: total {row.total_s:.1f} s (download {row.download_s:.1f}, unpack {_s(row.unpack_s)}, ready "
            f"{row.ready_s:.1f}, answer {row.first_answer_s:.2f}); moved {human_size(row.bytes_moved or 0)}; "
            f"peak disk {human_size(row.peak_disk or 0)}")


def _size(value: int | None) -> str:
    return "-" if value is None else human_size(value)


def layer_line(row: Row) -> str:
    """When each layer's download ended (largest five), and the spread between the first and last
    of the large ones: do parallel downloads finish together?"""
    done = [l for l in row.layers if l["done_s"] is not None]
    if not done:
        return "layers: none downloaded (all held)"
    large = sorted(done, key=lambda l: -l["size"])[:5]
    big = [l for l in done if l["size"] >= 0.05 * max(l["size"] for l in done)]
    spread = max(l["done_s"] for l in big) - min(l["done_s"] for l in big)
    return ("layers done at: " + ", ".join(f"{human_size(l['size'])} {l['done_s']:.1f} s" for l in large)
            + f"; the {len(big)} large ones end {spread:.1f} s apart")


HEADER = ("selection", "build", "compression", "runtime", "node", "bandwidth", "download s", "unpack s", "ready s",
          "first answer s", "total s", "moved", "moved before the answer", "floor s", "peak disk", "served")


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table (as README and docs/benchmarks.md show it)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        lines.append("| " + " | ".join([
            r.selection, r.build, r.compression, r.runtime + (" (pull together)" if r.pull == "together" and
                                                              r.runtime in ("containerd", "containerd2") else ""),
            r.node, r.bandwidth, _s(r.download_s), _s(r.unpack_s),
            _s(r.ready_s), "-" if r.first_answer_s is None else f"{r.first_answer_s:.2f}", _s(r.total_s),
            _size(r.bytes_total if r.runtime == LAZY else r.bytes_moved), _size(r.bytes_first),
            "-" if not r.floor_s else f"{r.floor_s:.1f} ({r.total_s / r.floor_s:.2f}x)",
            _size(r.peak_disk), "yes" if r.served else "no"]) + " |")
    return "\n".join(lines)


def _floor(imported: Row | None, uncompressed: Row | None) -> tuple[float, str] | None:
    """What this machine cannot go below for the pruned image, from rows of this run: the lower of
    the issue's floor (its uncompressed layers imported from a local archive, then served) and the
    uncompressed row's unpack and start alone (its layers already on the node: no network, no
    decompression). The import is no floor when it is slower than a pull from the registry (ctr
    import reads the archive in one stream and writes each blob before it unpacks)."""
    found = []
    if imported is not None:
        found.append((imported.total_s, "uncompressed from a local file"))
    if uncompressed is not None:
        found.append((uncompressed.unpack_s + uncompressed.ready_s + uncompressed.first_answer_s,
                      "uncompressed layers already on the node: unpack and start"))
    return min(found) if found else None


def goals(rows: list[Row]) -> list[str]:
    """The issue's goal figures, from rows measured in this run (none is estimated)."""

    def find(**keys) -> Row | None:
        return next((r for r in rows if r.served and all(getattr(r, k) == v for k, v in keys.items())), None)

    lines = []
    first = "+".join(FIRST)
    for bandwidth in dict.fromkeys(r.bandwidth for r in rows if r.bandwidth != "file"):
        base = dict(selection=first, runtime="containerd", node="empty", bandwidth=bandwidth, pull="apart")
        style = find(build="composepy", compression="gzip", **base)
        gzip = find(build="pruned", compression="gzip", **base)
        zstd = find(build="pruned", compression="zstd", **base)
        floor = _floor(find(build="pruned", compression="none", runtime="containerd", node="empty", bandwidth="file",
                            pull="file"),
                       find(build="pruned", compression="none", **base))
        if zstd and style:
            ratio = zstd.total_s / style.total_s
            lines.append(f"[{bandwidth}] pruned zstd / compose.py-style gzip, time to first answer: {ratio:.2f}x "
                         f"(goal <= 0.25x: {'met' if ratio <= 0.25 else 'NOT met'})")
        if gzip and style:
            lines.append(f"[{bandwidth}] pruned gzip / compose.py-style gzip: {gzip.total_s / style.total_s:.2f}x")
        together = find(build="pruned", compression="zstd", **{**base, "pull": "together"})
        for row, how_pulled in ((zstd, ""), (together, ", pulled as one (layers unpacked as they arrive)")):
            if row and floor:
                seconds, how = floor
                ratio = row.total_s / seconds
                lines.append(f"[{bandwidth}] pruned zstd{how_pulled} / the floor ({how}, {seconds:.1f} s): {ratio:.2f}x "
                             f"(goal <= 1.3x: {'met' if ratio <= 1.3 else 'NOT met'})")
        if zstd and gzip:
            pull_gzip, pull_zstd = gzip.download_s + gzip.unpack_s, zstd.download_s + zstd.unpack_s
            ratio = pull_gzip / pull_zstd
            lines.append(f"[{bandwidth}] pull, gzip / zstd: {ratio:.2f}x faster with zstd "
                         f"(goal >= 1.5x: {'met' if ratio >= 1.5 else 'NOT met'})")
        estargz = find(build="pruned", compression="estargz", **base)
        if estargz and gzip:
            pull_gzip, pull_esgz = gzip.download_s + gzip.unpack_s, estargz.download_s + estargz.unpack_s
            ratio = pull_esgz / pull_gzip
            lines.append(f"[{bandwidth}] pull on containerd 1.6 (no lazy pull), estargz / gzip: {pull_esgz:.1f} / "
                         f"{pull_gzip:.1f} s = {ratio:.2f}x (goal <= 1.15x: {'met' if ratio <= 1.15 else 'NOT met'})")
        for compression in ("gzip", "zstd"):
            apart = find(build="pruned", compression=compression, **{**base, "runtime": "containerd2"})
            together = find(build="pruned", compression=compression, **{**base, "runtime": "containerd2",
                                                                       "pull": "together"})
            if apart and together:
                lines.append(f"[{bandwidth}] containerd2, pruned {compression}: fetch then unpack {apart.download_s:.1f} + "
                             f"{apart.unpack_s:.1f} s; one pull {together.download_s + together.unpack_s:.1f} s, "
                             f"{together.unpack_s:.1f} s of it after the last byte (download and unpack overlap "
                             f"{'yes' if together.unpack_s < 0.5 * apart.unpack_s else 'no'})")
        lazy = find(build="pruned", compression="estargz", selection=first, runtime=LAZY, node="empty",
                    bandwidth=bandwidth)
        if lazy:
            limit = {"none": 8.0, "1gbit": 15.0}.get(bandwidth)
            lines.append(f"[{bandwidth}] empty stargz node to the first answer, pruned estargz: {lazy.total_s:.1f} s"
                         + (f" (goal <= {limit:.0f} s: {'met' if lazy.total_s <= limit else 'NOT met'})" if limit else ""))
            plain = find(build="composepy", compression="gzip", selection=first, runtime="containerd", node="empty",
                         bandwidth=bandwidth, pull="apart")
            if plain:
                ratio = lazy.total_s / plain.total_s
                lines.append(f"[{bandwidth}] against the compose.py-style image on a containerd node ({plain.total_s:.1f} s): "
                             f"{ratio:.3f}x (goal <= 0.05x: {'met' if ratio <= 0.05 else 'NOT met'})")
            if lazy.floor_s:
                ratio = lazy.total_s / lazy.floor_s
                lines.append(f"[{bandwidth}] against its floor ({lazy.restart_s:.1f} s started again on the node + "
                             f"{human_size(lazy.prefetch_bytes)} prefetched at {human_size(lazy.floor_rate)}/s = "
                             f"{lazy.floor_s:.1f} s): {ratio:.2f}x (goal <= 2x: {'met' if ratio <= 2 else 'NOT met'})")
            if lazy.bytes_first is not None:
                size = sum(int(l["size"]) for l in lazy.layers) or None
                if size:
                    ratio = lazy.bytes_first / size
                    lines.append(f"[{bandwidth}] moved before the first answer {human_size(lazy.bytes_first)} of the image's "
                                 f"{human_size(size)} compressed: {ratio:.2f}x (goal <= 0.25x: "
                                 f"{'met' if ratio <= 0.25 else 'NOT met'}); in total {_size(lazy.bytes_total)}")
        for runtime in RUNTIMES:
            for build in ("pruned", "min"):
                second = next((r for r in rows if r.served and r.runtime == runtime and r.build == build and
                               r.bandwidth == bandwidth and r.node != "empty" and
                               (r.pull != "together" or runtime == "docker")), None)
                if second and second.image_size:
                    ratio = second.bytes_moved / second.image_size
                    lines.append(f"[{bandwidth}] {second.selection} {build} on a {runtime} node holding "
                                 f"{second.node}: moved {ratio:.2f}x its size (goal <= 0.5x: "
                                 f"{'met' if ratio <= 0.5 else 'NOT met'})")
    return lines


def _needs(source: str, groups: list[str], memory: bool) -> tuple[int, int]:
    """Free disk and memory the largest group needs at its peak."""
    table_ = NEEDS_NGC if source == NGC_SOURCE else NEEDS_SMALL
    disk = max(table_[g][0] for g in groups)
    registry = max(table_[g][1] for g in groups)
    return (disk, registry) if memory else (disk + registry, 0)


def _available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=NGC_SOURCE, help="where the 24.09 full and min images are")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"groups of rows, comma-separated: {', '.join(GROUPS)}")
    parser.add_argument("--runtime", default=",".join(DEFAULT_RUNTIMES),
                        help="nodes, comma-separated: containerd (Debian's 1.6), docker, containerd2 (v2.4.2, pulled "
                             "apart and as one), containerd-stargz (v2.4.2 with stargz-snapshotter: the estargz "
                             "image, lazily) (default: containerd,docker; the last two need scripts/go-tools)")
    parser.add_argument("--bandwidth", default="none", help="the node's link, comma-separated: none (no cap) or a cap "
                        "such as 1gbit, 10gbit, 500mbit (a proxy on 127.0.0.1)")
    parser.add_argument("--lazy-bandwidth", default=None, help="the containerd-stargz rows' links, comma-separated "
                        "(default: --bandwidth's): a lazy row is short, so it can take caps the others do not")
    parser.add_argument("--registry-gone", action="store_true", help="containerd-stargz: then stop the registry's "
                        "link under a lazily pulled server: is the loaded model still answered, can a new one load?")
    parser.add_argument("--no-second", action="store_true", help="no second image (pytorch+python) on a node "
                        "holding the first")
    parser.add_argument("--registry-storage", choices=("memory", "disk"), default="memory",
                        help="where the registry keeps its blobs: a tmpfs (the default: a remote registry does not "
                             "read from the node's disk) or the scratch folder")
    parser.add_argument("--scratch", default=None, help="folder for nodes, registry and archives (default: a new one "
                        "under $TMPDIR)")
    parser.add_argument("--pull", default="apart", help="containerd nodes, comma-separated: apart (fetch, then "
                        "unpack: each timed) or together (one pull unpacking layers as they arrive, as a kubelet's)")
    parser.add_argument("--compression", default=",".join(COMPRESSIONS), help="the pruned group's pushes, "
                        "comma-separated, the first for both images: gzip, zstd, none (none adds the floor), estargz "
                        "(the build's smoke test then lists the files the server opens: the prefetch lists)")
    parser.add_argument("--json", metavar="FILE", help="write every row as JSON")
    args = parser.parse_args()
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    runtimes = tuple(r.strip() for r in args.runtime.split(",") if r.strip())
    bandwidths = [b.strip().lower() for b in args.bandwidth.split(",") if b.strip()]
    lazy_bandwidths = [b.strip().lower() for b in (args.lazy_bandwidth or args.bandwidth).split(",") if b.strip()]
    pulls = tuple(dict.fromkeys(p.strip() for p in args.pull.split(",") if p.strip()))
    compressions = tuple(dict.fromkeys(c.strip() for c in args.compression.split(",") if c.strip()))
    bad = [g for g in groups if g not in GROUPS] + [r for r in runtimes if r not in RUNTIMES] + \
        [p for p in pulls if p not in PULLS] + [c for c in compressions if c not in COMPRESSIONS]
    if bad or not groups or not runtimes or not pulls or not compressions:
        parser.error(f"--only takes {', '.join(GROUPS)}; --runtime {', '.join(RUNTIMES)}; --pull {', '.join(PULLS)}; "
                     f"--compression {', '.join(COMPRESSIONS)} (got {', '.join(bad)})")
    for bandwidth in [*bandwidths, *lazy_bandwidths]:
        try:
            parse_bandwidth(bandwidth)
        except ValueError as error:
            parser.error(f"--bandwidth: {error}")
    missing = [tool for tool in ("containerd", "ctr", "dockerd", "docker-registry") if shutil.which(tool) is None]
    if missing:
        print(f"needs {', '.join(missing)} (apt: containerd, docker.io, docker-registry)", file=sys.stderr)
        return 1
    if {"containerd2", LAZY} & set(runtimes):
        try:
            for tool in ("containerd", "ctr", "containerd-shim-runc-v2",
                         *(("containerd-stargz-grpc", "ctr-remote") if LAZY in runtimes else ())):
                go_tool(tool)
        except RuntimeError as error:
            print(f"{error} (scripts/go-tools containerd2 ctr2 containerd-shim2 containerd-stargz-grpc ctr-remote)",
                  file=sys.stderr)
            return 1
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="coldstart-"))
    scratch.mkdir(parents=True, exist_ok=True)
    engine = connect()
    memory = args.registry_storage == "memory"
    disk_need, memory_need = _needs(args.source, groups, memory)
    free_scratch = shutil.disk_usage(scratch).free
    where, usage = engine.storage()
    print(f"free: {human_size(free_scratch)} at {scratch}, {human_size(usage.free)} at {where}, "
          f"{human_size(_available_memory())} of memory; this run needs about {human_size(disk_need)} of disk"
          + (f" and {human_size(memory_need)} of memory (the registry's tmpfs)" if memory else ""), flush=True)
    if free_scratch < disk_need or (memory and _available_memory() < memory_need + 4 * GB):
        print("not enough room: free more disk (or memory), or run fewer groups (--only)", file=sys.stderr)
        shutil.rmtree(scratch, ignore_errors=True) if not args.scratch else None
        return 1
    registry = Registry(scratch / "registry", memory_need if memory else None)
    client = docker.from_env(timeout=600)
    untagged_before = untagged(client)  # what the engine held untagged: not this run's to remove
    bench = None
    skipped: list[str] = []
    failed: list[str] = []
    try:
        registry.start()
        bench = Bench(engine, args.source, scratch, registry, bandwidths, runtimes, pulls, compressions,
                      lazy_bandwidths, second=not args.no_second)
        bench.check_gone = args.registry_gone
        needs = NEEDS_NGC if args.source == NGC_SOURCE else NEEDS_SMALL
        for group in groups:
            say(f"== {group}")
            need = needs[group][0] + (0 if memory else needs[group][1])
            free = shutil.disk_usage(scratch).free
            if free < need:  # the disk went to something else since the start
                say(f"  left out: this group needs about {human_size(need)} of disk, {human_size(free)} is free")
                skipped.append(group)
                continue
            try:
                bench.group(group)
            except (ComposerError, RuntimeError, OSError, subprocess.SubprocessError) as error:
                message = error.message if isinstance(error, ComposerError) else str(error)
                say(f"  error: {' '.join(message.split())[:400]}")
                failed.append(group)
    finally:
        if bench is not None:
            bench.forget_built()
        remove_new_untagged(client, untagged_before)
        registry.close()
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = bench.rows
    print()
    print(table(rows))
    for line in goals(rows):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
        if bench.gone:
            Path(args.json).with_suffix(".registry-gone.json").write_text(json.dumps(bench.gone, indent=1) + "\n")
    if skipped:
        print(f"groups left out for want of disk: {', '.join(skipped)}", file=sys.stderr)
    if failed:
        print(f"groups that failed: {', '.join(failed)}", file=sys.stderr)
    return 0 if all(r.served for r in rows) and not skipped and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
