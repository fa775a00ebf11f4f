"""Cold start: from an empty node to the first answer (issue 37), on nodes simulated on this machine.

For each image, a fresh node pulls it from a registry on 127.0.0.1 (Debian's docker-registry, the
tests' own) and serves one sample model (ONNX for onnxruntime+python; TorchScript for
pytorch+python); the clock runs from the start of the pull to the first answer checked against the
sample's expected values. A node is a fresh containerd (its own root, state and socket, no CRI:
`ctr content fetch` downloads, `ctr images pull` unpacks what is then local, `ctr run --net-host`
starts tritonserver on 127.0.0.1) or a fresh Docker data root (a second dockerd, its pull as one).

Rows (the 24.09 NGC-scale stand-ins by default):
  composepy  onnxruntime+python made as compose.py makes it, pushed by the engine (gzip)
  min        onnxruntime+python on the min image (--base min), gzip; then pytorch+python on the same node
  pruned     onnxruntime+python --base pruned, gzip; pytorch+python after it; zstd; uncompressed;
             and the floor: the uncompressed layers imported from a local file (no network, no
             decompression) plus the server's start
Every image is built with the composer and pushed through its registry client (composer build
--push --compression), but the compose.py-style one, which the engine pushes as a user of
compose.py would. Docker 20.10 (Debian 12's) cannot pull zstd layers: its zstd rows are left out.

    .venv/bin/python benchmarks/coldstart.py --json coldstart.json      (needs `triton-standin --scale ngc`)
    .venv/bin/python benchmarks/coldstart.py --source localhost/standin  (the small stand-ins: a check)
    ... --bandwidth none,1gbit,10gbit   (each row behind each cap: a proxy on 127.0.0.1)
    ... --only pruned --runtime containerd

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
from composer.resolve.resolve import resolve
from composer.verify.samples import load_samples
from triton_standins import NUMPY_REQUIREMENT, host
from triton_standins.engines import Dockerd
from triton_standins.nodes import (
    ContainerdNode, BandwidthProxy, DiskPeak, TRITONSERVER, first_answer, free_port, parse_bandwidth, server_args,
    wait_ready,
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
RUNTIMES = ("containerd", "docker")
PULLS = ("apart", "together")  # containerd: fetch then unpack, each timed; or one pull unpacking as layers arrive
COMPRESSIONS = ("gzip", "zstd", "none")  # the pruned group's pushes, in this order
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
                 compressions: tuple[str, ...] = COMPRESSIONS):
        self.engine, self.source, self.scratch, self.registry = engine, source, scratch, registry
        self.bandwidths, self.runtimes, self.pulls, self.compressions = bandwidths, runtimes, pulls, compressions
        self.rows: list[Row] = []
        self.catalog = Catalog.load()
        self.registries = Registries(engine)
        self.made: list[str] = []  # images this run built (removed as soon as they are pushed)
        self.found = set(engine.images_labelled(f"{BENCH_KEY}=coldstart"))  # another run's, left alone

    # Images

    def build(self, selection: tuple[str, ...], base: str, layers: Path):
        tag = f"coldstart/{'-'.join(selection)}:{base}-{uuid.uuid4().hex[:8]}"
        spec = CompositionSpec().with_fields({
            "selection.backends": selection, "images.version": VERSION, "images.registry": self.source,
            "selection.base": base, "result.tag": tag, "result.smoke_test": False,
            "result.labels": tuple(LABELS.items())})
        plan = resolve(self.engine, spec, self.catalog).plan
        layers.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        result = build_image(self.engine, plan, labels=LABELS, layers_dir=layers)
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
        push_assembled(self.engine, result.assembled, f"{self.registry.host}/{repository}:{tag}", self.registries,
                       compression=compression, folder=folder, cache=BlobCache(self.scratch / "blob-cache"))
        shutil.rmtree(folder, ignore_errors=True)
        image = Image(selection, build, compression, repository, tag, self.registry.manifest(repository, tag),
                      result.size)
        say(f"pushed {image.name} ({compression}): {human_size(sum(l['size'] for l in image.layers))} "
            f"in {time.monotonic() - started:.0f} s")
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

    def containerd_rows(self, images: list[Image], bandwidth: str, pull: str = "apart") -> None:
        """A fresh containerd node pulls each image in turn (the second on a node holding the first)."""
        node = ContainerdNode(self.scratch / f"node-{uuid.uuid4().hex[:6]}").start()
        try:
            held = None
            for image in images:
                row = self.row(image, "containerd", held, bandwidth)
                row.pull = pull
                with _link(self.registry, bandwidth) as host:
                    self._containerd(node, image, image.ref(host), row)
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
                row.bytes_moved = self.registry.sent_since(offset)
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
                with _link(self.registry, bandwidth) as host:
                    self._docker(dockerd, image, image.ref(host), row)
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
                row.bytes_moved = self.registry.sent_since(offset)

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
        if row.layers and row.runtime in ("containerd", "docker") and row.bandwidth != "file":
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
            first, first_made = self.build(FIRST, name, layers / "first")
            second, second_made = self.build(SECOND, name, layers / "second")
            # Both images with the first compression (the second image on a node holding the first);
            # a pruned image then with each other compression asked for.
            compressions = self.compressions if name == "pruned" else ("gzip",)
            images = [self.push(first, FIRST, name, compressions[0]), self.push(second, SECOND, name, compressions[0])]
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
        shutil.rmtree(self.scratch / "blob-cache", ignore_errors=True)  # bases compressed for the pushes before
        for bandwidth in self.bandwidths:
            if "containerd" in self.runtimes:
                for pull in self.pulls:
                    self.containerd_rows(images, bandwidth, pull)
            if "docker" in self.runtimes:
                self.docker_rows(images, bandwidth)


class _link:
    """The registry's address as a node reaches it: directly, or through a capped proxy."""

    def __init__(self, registry: Registry, bandwidth: str):
        self.registry, self.rate = registry, parse_bandwidth(bandwidth)
        self.proxy: BandwidthProxy | None = None

    def __enter__(self) -> str:
        if self.rate is None:
            return self.registry.host
        self.proxy = BandwidthProxy(("127.0.0.1", self.registry.port), self.rate).start()
        return self.proxy.host

    def __exit__(self, *exc) -> None:
        if self.proxy is not None:
            self.proxy.stop()


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
    return (f"{row.selection} {row.build} {row.compression} {row.runtime} node={row.node} bw={row.bandwidth} "
            f"pull={row.pull}: total {row.total_s:.1f} s (download {row.download_s:.1f}, unpack {row.unpack_s:.1f}, ready "
            f"{row.ready_s:.1f}, answer {row.first_answer_s:.2f}); moved {human_size(row.bytes_moved or 0)}; "
            f"peak disk {human_size(row.peak_disk or 0)}")


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
          "first answer s", "total s", "moved", "peak disk", "served")


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table (as README and docs/benchmarks.md show it)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        lines.append("| " + " | ".join([
            r.selection, r.build, r.compression, r.runtime + (" (pull together)" if r.pull == "together" and
                                                              r.runtime == "containerd" else ""), r.node, r.bandwidth, _s(r.download_s), _s(r.unpack_s),
            _s(r.ready_s), "-" if r.first_answer_s is None else f"{r.first_answer_s:.2f}", _s(r.total_s),
            human_size(r.bytes_moved) if r.bytes_moved is not None else "-",
            human_size(r.peak_disk) if r.peak_disk is not None else "-", "yes" if r.served else "no"]) + " |")
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
    parser.add_argument("--runtime", default=",".join(RUNTIMES), help="nodes: containerd, docker (comma-separated)")
    parser.add_argument("--bandwidth", default="none", help="the node's link, comma-separated: none (no cap) or a cap "
                        "such as 1gbit, 10gbit, 500mbit (a proxy on 127.0.0.1)")
    parser.add_argument("--registry-storage", choices=("memory", "disk"), default="memory",
                        help="where the registry keeps its blobs: a tmpfs (the default: a remote registry does not "
                             "read from the node's disk) or the scratch folder")
    parser.add_argument("--scratch", default=None, help="folder for nodes, registry and archives (default: a new one "
                        "under $TMPDIR)")
    parser.add_argument("--pull", default="apart", help="containerd nodes, comma-separated: apart (fetch, then "
                        "unpack: each timed) or together (one pull unpacking layers as they arrive, as a kubelet's)")
    parser.add_argument("--compression", default=",".join(COMPRESSIONS), help="the pruned group's pushes, "
                        "comma-separated, the first for both images: gzip, zstd, none (none adds the floor)")
    parser.add_argument("--json", metavar="FILE", help="write every row as JSON")
    args = parser.parse_args()
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    runtimes = tuple(r.strip() for r in args.runtime.split(",") if r.strip())
    bandwidths = [b.strip().lower() for b in args.bandwidth.split(",") if b.strip()]
    pulls = tuple(dict.fromkeys(p.strip() for p in args.pull.split(",") if p.strip()))
    compressions = tuple(dict.fromkeys(c.strip() for c in args.compression.split(",") if c.strip()))
    bad = [g for g in groups if g not in GROUPS] + [r for r in runtimes if r not in RUNTIMES] + \
        [p for p in pulls if p not in PULLS] + [c for c in compressions if c not in COMPRESSIONS]
    if bad or not groups or not runtimes or not pulls or not compressions:
        parser.error(f"--only takes {', '.join(GROUPS)}; --runtime {', '.join(RUNTIMES)}; --pull {', '.join(PULLS)}; "
                     f"--compression {', '.join(COMPRESSIONS)} (got {', '.join(bad)})")
    for bandwidth in bandwidths:
        try:
            parse_bandwidth(bandwidth)
        except ValueError as error:
            parser.error(f"--bandwidth: {error}")
    missing = [tool for tool in ("containerd", "ctr", "dockerd", "docker-registry") if shutil.which(tool) is None]
    if missing:
        print(f"needs {', '.join(missing)} (apt: containerd, docker.io, docker-registry)", file=sys.stderr)
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
        bench = Bench(engine, args.source, scratch, registry, bandwidths, runtimes, pulls, compressions)
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
    if skipped:
        print(f"groups left out for want of disk: {', '.join(skipped)}", file=sys.stderr)
    if failed:
        print(f"groups that failed: {', '.join(failed)}", file=sys.stderr)
    return 0 if all(r.served for r in rows) and not skipped and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
