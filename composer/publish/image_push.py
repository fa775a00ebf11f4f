"""Pushing a composed image through the composer's own registry client (the mirror's), not the engine.

The image is the one the composer wrote (composer.assembly.assemble): its configuration and its own
layers are on this machine, each compressed one fixed way (composer.publish.blobs), so the same
inputs give the same manifest digest from any machine. The base's layers are taken where they
already are: skipped when the target holds them, mounted from another repository of the same
registry, copied blob by blob from the registry the run resolved the base from, and only for a base
no registry holds (a pruned base, a base built here) read from the engine's image export and
compressed once into this machine's blob cache, as the image's own layers are. Only that registry, never another one the engine
happens to have pulled the same image from: the digest follows from the run's inputs, not from the
engine's history. Blobs go first, the configuration, then the manifest by its tag: a
tag never names a manifest whose blobs are missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import tempfile
import tarfile
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from composer.assembly.assemble import Assembled, canonical_json
from composer.core.errors import RegistryError, UsageError
from composer.core.progress import LineSink, quiet
from composer.core.refs import ImageRef
from composer.core.units import human_size
from composer.engine.archives import ChunkReader, may_be_layer
from composer.engine import locks
from composer.engine.interface import Engine
from composer.publish.blobs import COMPRESSION_OF, MEDIA_TYPES, Blob, BlobCache, layer_blob
from composer.registry.blobs import VerifiedBlob
from composer.registry.client import CHUNK, Registries, RegistryApi
from composer.registry.retries import RetryPolicy

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
PARALLEL = 2  # this machine's cores: compressing is what a push waits for


@dataclass(frozen=True)
class RemoteLayer:
    """A base layer a registry holds: where to copy or mount it from."""

    api: RegistryApi
    repository: str
    digest: str
    size: int
    media_type: str


@dataclass(frozen=True)
class Pushed:
    """What a push put where: the reference, the manifest's digest, and the manifest itself."""

    ref: str
    digest: str
    manifest: bytes
    bytes_moved: int
    bytes_mounted: int
    bytes_skipped: int


def image_manifest(config: bytes, layers: Iterable[tuple]) -> bytes:
    """The OCI image manifest of a configuration and (digest, size, media type[, annotations])
    layers, as the composer writes every document it digests (canonical JSON)."""
    return canonical_json({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
                   "size": len(config)},
        "layers": [{"mediaType": layer[2], "digest": layer[0], "size": layer[1],
                    **({"annotations": dict(layer[3])} if len(layer) > 3 and layer[3] else {})} for layer in layers],
    })


def config_for(assembled: Assembled, layers: Sequence) -> bytes:
    """The configuration a push names: the image's own, unless a layer's blob holds another tar
    than the image's layer (eStargz: its TOC and landmark are entries of it), whose diff ids it
    then names instead (an image id of its own, as any eStargz conversion gives)."""
    diff_ids = [getattr(layer, "diff_id", None) for layer in layers]
    if not any(diff_ids):
        return assembled.config
    config = json.loads(assembled.config)
    config["rootfs"]["diff_ids"] = [new or old for new, old in zip(diff_ids, assembled.diff_ids)]
    return canonical_json(config)


def base_in_a_registry(registries: Registries, assembled: Assembled, compression: str,
                       origin: str | None) -> list[RemoteLayer] | None:
    """The base's layers as the registry the run resolved it from holds them (`origin`, its
    repo@digest), in the wanted compression; None when there is no such registry (a base made or
    loaded here) or it does not hold them so."""
    if not origin:
        return None
    try:
        ref = ImageRef.parse(origin)
        # One try: the registry the base came from is a shortcut, not a need (it may be long gone).
        api = dataclasses.replace(registries.client(ref.host), retry=RetryPolicy())
        found = api.raw_manifest(ref.repository, ref.digest)
        if found is None:
            return None
        _, media_type, body = found
        manifest = json.loads(body)
        if "manifests" in manifest:
            return None  # an index: the run named the list, not the image
        config = json.loads(api.blob(ref.repository, manifest["config"]["digest"]))
    except (RegistryError, UsageError, ValueError, KeyError, TypeError, OSError):
        return None  # a registry it cannot trust or read now (its certs.d CA gone) is no shortcut
    diff_ids = tuple((config.get("rootfs") or {}).get("diff_ids") or ())
    layers = manifest.get("layers") or []
    if diff_ids != assembled.base_layers or len(layers) != len(diff_ids):
        return None
    if any(COMPRESSION_OF.get(layer.get("mediaType")) != compression for layer in layers):
        return None
    return [RemoteLayer(api, ref.repository, layer["digest"], int(layer["size"]), MEDIA_TYPES[compression])
            for layer in layers]


def base_from_the_engine(engine: Engine, assembled: Assembled, compression: str, cache: BlobCache,
                         on_line: LineSink, prefetch: Sequence[str] = ()) -> list[Blob]:
    """The base's layers compressed into this machine's cache, from the engine's export of the base
    (read once: what the cache holds already is not compressed again)."""
    wanted = list(assembled.base_layers)
    found = {diff: cache.find(diff, compression, prefetch) for diff in wanted}
    missing = {diff for diff, blob in found.items() if blob is None}
    if missing:
        on_line(f"compressing {len(missing)} layer(s) of the base {assembled.base[:19]} ({compression}), once: "
                "later pushes take them from this machine's cache")
        stream = ChunkReader(engine.save_stream(assembled.base))
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                if not may_be_layer(member) or not missing:
                    continue
                data = tar.extractfile(member)
                diff = _diff_of_member(member, missing)
                if diff is None:  # its digest is known only once read: compress and see
                    blob = _compress_unknown(data, missing, compression, cache, prefetch)
                    if blob is not None:
                        found[blob[0]] = blob[1]
                        missing.discard(blob[0])
                    continue
                found[diff] = cache.add(data, diff, compression, prefetch)
                missing.discard(diff)
        if missing:
            raise RegistryError(f"the engine's export of the base {assembled.base[:19]} lacks layer(s) "
                                f"{', '.join(sorted(missing))[:80]}")
    return [found[diff] for diff in wanted]


def _diff_of_member(member: tarfile.TarInfo, missing: set[str]) -> str | None:
    """The diff id a save archive names a layer by (Podman and Docker 25+ name it by its digest)."""
    head = member.name.split("/")[-2] if "/" in member.name else ""
    for diff in missing:
        if diff.partition(":")[2] in (head, member.name.rsplit("/", 1)[-1].removesuffix(".tar")):
            return diff
    return None


def _compress_unknown(data, missing: set[str], compression: str, cache: BlobCache, prefetch: Sequence[str]):
    """A layer named by the engine's own id: compressed into a scratch file, kept if it is one wanted."""
    cache.root.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache.root, prefix=".layer-", delete=False) as spool:
        digest = hashlib.sha256()
        while chunk := data.read(CHUNK):
            digest.update(chunk)
            spool.write(chunk)
    path = Path(spool.name)
    try:
        diff = "sha256:" + digest.hexdigest()
        if diff not in missing:
            return None
        with open(path, "rb") as fh:
            return diff, cache.add(fh, diff, compression, prefetch)
    finally:
        path.unlink(missing_ok=True)


def own_layers(assembled: Assembled, compression: str, folder: Path, prefetch: Sequence[str] = (),
               cache: BlobCache | None = None) -> list[Blob]:
    """The composition's own layers, compressed into `folder` (two at a time); with `cache`, taken
    from this machine's blob cache, or compressed into it: a layer pushed before (the same diff id,
    compression and prefetch list: the same bytes) is not compressed again. Most of an image's own
    layers (the server core, the python runtime, each backend) stay the same from one push to the
    next, and across the selections of a release."""

    def one(layer) -> Blob:
        out = folder / f"{layer.diff_id.partition(':')[2]}.{compression}"
        try:
            if cache is None:
                return layer_blob(layer.path, layer.diff_id, out, compression, prefetch)
            found = cache.find(layer.diff_id, compression, prefetch)
            if found is not None:
                return found
            with open(layer.path, "rb") as source:
                return cache.add(source, layer.diff_id, compression, prefetch)
        except UsageError as error:
            raise RegistryError(f"the layer {layer.path} changed since it was written: {error.message}") from None

    with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="compress") as pool:
        return list(pool.map(one, assembled.layers))


def push_assembled(engine: Engine, assembled: Assembled, ref: str, registries: Registries, *, compression: str,
                   folder: Path, origin: str | None = None, cache: BlobCache | None = None,
                   prefetch: Sequence[str] = (), on_line: LineSink = quiet) -> Pushed:
    """Push the composer's image as `ref` through its registry client; the manifest's digest.
    `origin` is the repo@digest the run resolved the base from, when a registry holds it; `prefetch`
    the files an eStargz layer puts first (the paths the smoke test saw the server open). The blob
    cache is held while the push reads it (`composer cache clear` removes blobs only when none is)."""
    cache = cache or BlobCache()
    with cache.in_use():
        return _push(engine, assembled, ref, registries, compression, folder, origin, cache, prefetch, on_line)


def _push(engine: Engine, assembled: Assembled, ref: str, registries: Registries, compression: str, folder: Path,
          origin: str | None, cache: BlobCache, prefetch: Sequence[str], on_line: LineSink) -> Pushed:
    target = ImageRef.parse(ref)
    api = registries.client(target.host)
    repository = target.repository
    on_line(f"pushing {ref} through the composer's registry client ({compression})")
    remote = base_in_a_registry(registries, assembled, compression, origin)
    if remote is None:
        base: list[Blob | RemoteLayer] = list(base_from_the_engine(engine, assembled, compression, cache, on_line,
                                                                   prefetch))
    else:
        base = list(remote)
        on_line(f"the base's {len(remote)} layer(s) come from {remote[0].api.host}/{remote[0].repository}" if remote
                else "the base has no layers")
    if prefetch:
        on_line(f"eStargz: {len(prefetch)} file(s) to prefetch, first in each layer that holds it")
    mine = own_layers(assembled, compression, folder, prefetch, cache)
    layers: list[Blob | RemoteLayer] = [*base, *mine]
    try:
        stats = _upload(api, repository, layers, on_line)
    except RegistryError:
        if not remote or _answers(remote[0]):
            raise
        # The registry the base came from went away during the push (a mirror restarted): the
        # engine holds the same layers. What arrived stays; the rest goes again, from here.
        on_line(f"{remote[0].api.host} no longer answers: the base's layers go from the engine instead")
        base = list(base_from_the_engine(engine, assembled, compression, cache, on_line, prefetch))
        layers = [*base, *mine]  # the engine's layers compressed here: digests of their own
        stats = _upload(api, repository, layers, on_line)
    document = config_for(assembled, layers)
    config = "sha256:" + hashlib.sha256(document).hexdigest()

    def put_config() -> None:
        if api.blob_size(repository, config) is None:
            api.upload_blob(repository, document)

    api.retry.run(api.host, put_config, on_line)
    # The tag last, and only once the registry says it holds every blob the manifest names (a
    # registry that lost what it took while it restarted is caught here, not by a pull).
    missing = [digest for digest in [config, *(b.digest for b in layers)] if api.blob_size(repository, digest) is None]
    if missing:
        raise RegistryError(f"{api.host}/{repository} lacks {len(missing)} blob(s) it took ({missing[0][:19]}...): "
                            f"{target.tag_or_latest} was not moved")
    manifest = image_manifest(document, [(b.digest, b.size, b.media_type, getattr(b, "annotations", ()))
                                         for b in layers])
    stored = api.put_manifest(repository, target.tag_or_latest, manifest, OCI_MANIFEST)
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    if stored != digest:
        raise RegistryError(f"put {ref} ({digest}) but the registry stored {stored}")
    moved, mounted, skipped = stats
    on_line(f"pushed {ref}@{digest}: {human_size(moved)} moved, {human_size(mounted)} mounted, "
            f"{human_size(skipped)} already there")
    return Pushed(ref, digest, manifest, moved, mounted, skipped)


def _answers(layer: "RemoteLayer") -> bool:
    """Whether the registry a remote layer comes from still holds it (one try, no retries)."""
    try:
        api = dataclasses.replace(layer.api, retry=RetryPolicy())
        return api.blob_size(layer.repository, layer.digest) is not None
    except (RegistryError, UsageError, OSError):
        return False


def _upload(api: RegistryApi, repository: str, layers: list, on_line: LineSink) -> tuple[int, int, int]:
    """Every layer the target lacks, PARALLEL at a time; the first failure (or Ctrl-C) stops the rest
    at their next chunk, before any manifest is put."""
    stop = threading.Event()
    totals = [0, 0, 0]
    lock = threading.Lock()

    def one(layer) -> None:
        if not stop.is_set():  # a blob whose try failed is tried again whole (the registry may hold it now)
            api.retry.run(api.host, lambda: one_try(layer), on_line)

    def one_try(layer) -> None:
        if stop.is_set():
            return
        short = layer.digest[:19]
        if api.blob_size(repository, layer.digest) is not None:
            kind = 2
        elif isinstance(layer, RemoteLayer) and layer.api.api_host.lower() == api.api_host.lower() and \
                api.mount_blob(repository, layer.digest, layer.repository):
            kind = 1
            on_line(f"blob {short} ({human_size(layer.size)}): mounted from {layer.repository}")
        elif isinstance(layer, RemoteLayer):
            what = f"blob {layer.digest} of {layer.api.host}/{layer.repository}"
            with contextlib.closing(layer.api.chunks(layer.api.open_blob(layer.repository, layer.digest), what)) as chunks:
                api.upload_stream(repository, layer.digest, VerifiedBlob(_until(stop, chunks, what), layer.digest,
                                                                         layer.size, what))
            kind = 0
            on_line(f"blob {short} ({human_size(layer.size)}): copied from {layer.api.host}")
        else:
            what = f"blob {layer.digest} ({layer.path.name})"
            with open(layer.path, "rb") as fh:
                chunks = iter(lambda: fh.read(CHUNK), b"")
                api.upload_stream(repository, layer.digest, VerifiedBlob(_until(stop, chunks, what), layer.digest,
                                                                         layer.size, what))
            kind = 0
            on_line(f"blob {short} ({human_size(layer.size)}): uploaded")
        with lock:
            totals[kind] += layer.size

    pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="upload")
    try:
        futures = [pool.submit(one, layer) for layer in layers]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f.exception() for f in futures if f in done and f.exception() is not None]
        if failed:
            stop.set()
            raise failed[0]
        for future in futures:
            future.result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return totals[0], totals[1], totals[2]


def _until(stop: threading.Event, chunks, what: str):
    for chunk in chunks:
        if stop.is_set():
            raise RegistryError(f"{what}: stopped (another blob failed, or the push was interrupted)")
        yield chunk


# -- an unchanged image pushed again ------------------------------------------------------------


def _push_key(image_id: str, compression: str, ref: str) -> str:
    target = ImageRef.parse(ref)
    return f"{image_id}\n{compression}\n{target.host}/{target.repository}"


def record_push(image_id: str, compression: str, pushed: Pushed) -> None:
    """Keep the manifest a push put for this image, compression and repository: pushing the same
    image there again (an unchanged rebuild) needs no layer written or compressed again."""
    locks.write_record("pushes", _push_key(image_id, compression, pushed.ref),
                       {"image": image_id, "manifest": pushed.manifest.decode()})


def pushed_before(image_id: str, compression: str, ref: str) -> bool:
    return locks.read_record("pushes", _push_key(image_id, compression, ref)) is not None


def push_again(image_id: str, compression: str, ref: str, registries: Registries,
               on_line: LineSink = quiet) -> Pushed | None:
    """Put the recorded manifest of `image_id` as `ref`, once the registry says it still holds every
    blob it names; None when there is no record or a blob is gone (the image is then pushed whole)."""
    try:
        manifest = (locks.read_record("pushes", _push_key(image_id, compression, ref)) or {})["manifest"].encode()
        document = json.loads(manifest)
    except (OSError, ValueError, KeyError):
        return None
    target = ImageRef.parse(ref)
    api = registries.client(target.host)
    blobs = [document["config"], *document["layers"]]
    if any(api.blob_size(target.repository, blob["digest"]) is None for blob in blobs):
        on_line(f"{target.host}/{target.repository} no longer holds every blob of the push before: pushing it whole")
        return None
    stored = api.put_manifest(target.repository, target.tag_or_latest, manifest, OCI_MANIFEST)
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    if stored != digest:
        raise RegistryError(f"put {ref} ({digest}) but the registry stored {stored}")
    size = sum(int(blob["size"]) for blob in blobs)
    on_line(f"pushed {ref}@{digest}: the same image as before, every blob already there ({human_size(size)})")
    return Pushed(ref, digest, manifest, 0, 0, size)
