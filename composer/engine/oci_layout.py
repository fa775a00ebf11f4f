"""An engine's local image as an OCI image layout on this machine, so a builder that cannot see the
engine's images (BuildKit) can build FROM it: `--registry localhost/standin` names images the
engine holds, not a registry.

One layout per engine in the machine's cache (locks.cache_dir), its blobs shared by every image written into it (a
min image's layers are the full image's first ones): each layer stored uncompressed by its diff
id, as the engine's `save` gives it (no compression to pay, and BuildKit reads them as they are),
the configuration as the engine has it, and an OCI manifest naming them. An image is written once
per id; a second run finds it (its manifest's blobs all there) and writes nothing. Blobs are
written to a temporary name and renamed, so runs at once never read half a blob.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from composer.core.errors import BuildFailed
from composer.core.files import write_file
from composer.core.progress import LineSink, quiet
from composer.core.units import human_size
from composer.engine import locks
from composer.engine.archives import ChunkReader, may_be_layer
from composer.engine.interface import Engine

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
IMAGE_ID = "org.triton-composer.image-id"  # the engine's image a manifest of the layout stands for


@dataclass(frozen=True)
class Layout:
    """Where an image is in a layout: the layout's folder and the image's manifest digest."""

    folder: Path
    manifest: str
    image_id: str


def folder_for(engine: Engine) -> Path:
    name = hashlib.sha256(engine.identity().encode()).hexdigest()[:16]
    return locks.cache_dir() / "oci-layouts" / name


def ensure(engine: Engine, image: str, on_line: LineSink = quiet) -> Layout:
    """The engine's image `image` in this engine's layout, written if it is not there yet (one
    writer at a time: a second run waits, then finds it)."""
    info = engine.image(image)
    if info is None:
        raise BuildFailed(f"cannot hand {image} to the builder: the engine has no such image")
    folder = folder_for(engine)
    blobs = folder / "blobs" / "sha256"
    with locks.making_host(engine.identity(), "oci-layout"):
        known = _manifest_of(folder, info.id)
        if known:
            return Layout(folder, known, info.id)
        blobs.mkdir(parents=True, exist_ok=True)
        write_file(folder / "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        on_line(f"handing {image} ({info.id[:19]}) to the builder as an OCI layout in {folder}")
        config = _save_into(engine, info.id, blobs)
        digest, size = _record(folder, info.id, config, image)
        on_line(f"handed {image}: {human_size(size)}")
        return Layout(folder, digest, info.id)


def add_written(engine: Engine, image_id: str, config: bytes, base: str, files: Iterable[tuple[str, Path]],
                on_line: LineSink = quiet) -> Layout:
    """An image the composer wrote and loaded (its configuration, its layers on the engine's image
    `base`) in this engine's layout, with no save of it: the base's layers as ensure() writes them,
    the others from `files` (diff id, the layer's tar), linked where the file system allows, else
    copied. A layer of no file (the engine held it, the composer did not write it): the engine's save."""
    files = list(files)
    if any(not path.exists() for _diff_id, path in files):
        return ensure(engine, image_id, on_line)
    folder = ensure(engine, base, on_line).folder
    blobs = folder / "blobs" / "sha256"
    with locks.making_host(engine.identity(), "oci-layout"):
        known = _manifest_of(folder, image_id)
        if known:
            return Layout(folder, known, image_id)
        for diff_id, path in files:
            target = blobs / diff_id.split(":", 1)[1]
            if not target.exists():
                _link_or_copy(path, target)
        write_file(blobs / image_id.split(":", 1)[1], config)
        digest, _size = _record(folder, image_id, config, image_id[:19])
        return Layout(folder, digest, image_id)


def _link_or_copy(path: Path, target: Path) -> None:
    """`path` at `target` (a blob of the layout), by a hard link or a copy under a temporary name."""
    temporary = target.with_name(f".partial-{target.name}-{os.getpid()}")
    try:
        try:
            os.link(path, temporary)
        except OSError:
            shutil.copyfile(path, temporary)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _record(folder: Path, image_id: str, config: bytes, what: str) -> tuple[str, int]:
    """The manifest of `image_id` (every layer its configuration names, a blob of the layout) and its
    entry in the layout's index; the manifest's digest and the layers' bytes."""
    blobs = folder / "blobs" / "sha256"
    layers = []
    for diff_id in json.loads(config)["rootfs"]["diff_ids"]:
        path = blobs / diff_id.split(":", 1)[1]
        if not path.exists():
            raise BuildFailed(f"cannot hand {what} to the builder: the layout lacks its layer {diff_id[:19]}")
        layers.append({"mediaType": LAYER, "digest": diff_id, "size": path.stat().st_size})
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST,
                           "config": {"mediaType": CONFIG, "digest": image_id, "size": len(config)},
                           "layers": layers}, sort_keys=True, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    write_file(blobs / digest.split(":", 1)[1], manifest)
    index = _index(folder)
    index["manifests"] = [m for m in index.get("manifests", []) if m.get("digest") != digest] + [
        {"mediaType": MANIFEST, "digest": digest, "size": len(manifest),
         "annotations": {"org.opencontainers.image.ref.name": image_id.split(":", 1)[1], IMAGE_ID: image_id}}]
    write_file(folder / "index.json", json.dumps(index, indent=1).encode())
    return digest, sum(layer["size"] for layer in layers)


def handed(engine: Engine) -> set[str]:
    """The manifest digests of the images this engine's layout holds or held (what BuildKit names
    them by: its cache records of them read "pulled from REF@DIGEST"); a removed layout leaves its
    digests in a file beside it, so a builder's records of it are still known as the composer's."""
    folder = folder_for(engine)
    try:
        before = set(json.loads(folder.with_suffix(".handed").read_text()))
    except (OSError, ValueError, TypeError):
        before = set()
    return before | {str(m.get("digest")) for m in _index(folder).get("manifests", [])}


def remove(engine: Engine) -> int:
    """Remove this engine's layout (what `composer cache clear` frees: it is made again when a build
    needs it); the bytes it held. The caller holds the build cache alone (no build hands images over)."""
    folder = folder_for(engine)
    if not folder.is_dir():
        return 0
    with locks.making_host(engine.identity(), "oci-layout"):
        write_file(folder.with_suffix(".handed"), json.dumps(sorted(handed(engine))).encode())
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
        shutil.rmtree(folder, ignore_errors=True)
    return size


def _save_into(engine: Engine, image_id: str, blobs: Path) -> bytes:
    """The engine's save archive of the image, each layer stored by its digest (its diff id: the
    save's layers are uncompressed); the image's configuration (the member whose digest is its id)."""
    config = None
    with tarfile.open(fileobj=ChunkReader(engine.save_stream(image_id)), mode="r|") as saved:
        for member in saved:
            source = saved.extractfile(member) if member.isfile() else None
            if source is None:
                continue
            if member.size < (1 << 22):  # the configuration, or a small layer
                data = source.read()
                if "sha256:" + hashlib.sha256(data).hexdigest() == image_id:
                    config = data
                if may_be_layer(member) or data is config:
                    write_file(blobs / hashlib.sha256(data).hexdigest(), data)
            elif may_be_layer(member):
                _store(source, blobs)
    if config is None:
        raise BuildFailed(f"cannot hand {image_id[:19]} to the builder: the engine's save holds no configuration")
    return config


def _store(source, blobs: Path) -> None:
    """A blob streamed to a temporary name, renamed to its digest once read."""
    digest = hashlib.sha256()
    handle, temporary = tempfile.mkstemp(dir=blobs, prefix=".partial-")
    try:
        with os.fdopen(handle, "wb") as out:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        os.replace(temporary, blobs / digest.hexdigest())
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _index(folder: Path) -> dict:
    try:
        return json.loads((folder / "index.json").read_text())
    except (OSError, ValueError):
        return {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}


def _manifest_of(folder: Path, image_id: str) -> str | None:
    """The manifest the layout's index names for `image_id`, when every blob it names is there."""
    for entry in _index(folder).get("manifests", []):
        if (entry.get("annotations") or {}).get(IMAGE_ID) != image_id:
            continue
        try:
            manifest = json.loads((folder / "blobs" / "sha256" / entry["digest"].split(":", 1)[1]).read_bytes())
            named = [manifest["config"], *manifest["layers"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if all((folder / "blobs" / "sha256" / d["digest"].split(":", 1)[1]).exists() for d in named):
            return entry["digest"]
    return None
