"""A copy that changes how an image's layers are compressed (`composer mirror --compression zstd`).

Each layer whose compression is not the one asked for is read from the source, decompressed,
checked against the diff id its image's configuration gives, compressed the composer's fixed way
(composer.registry.compression) and uploaded as it is made (its digest known only at its end);
the image's manifest is rewritten to name the new blobs (as an OCI manifest: Docker's schema 2 has
no zstd), an index to name the new manifests, and an SBOM beside an image to name the new digest as
its subject. Configurations and layers already compressed so are copied as they are. The result is
a plan of the new manifests for composer.registry.copy, whose tag goes last as always. What a layer
became is kept on this machine (source blob -> new blob), so a re-run compresses nothing again.

eStargz (`--compression estargz`) changes more than the compression: the tar inside holds the TOC
and a landmark, so each layer's diff id is a new one and the image's configuration is rewritten to
name them (a new configuration blob). A mirror has no smoke test to learn what the server reads:
its layers carry no prefetch list (`.no.prefetch.landmark`); a lazily pulling node fetches on
demand. A layer already eStargz is copied as it is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from composer.engine import locks
from composer.core.errors import RegistryError
from composer.core.progress import LineSink, quiet
from composer.core.units import human_size
from composer.registry.client import RegistryApi
from composer.registry import estargz
from composer.registry.compression import COMPRESSION_OF, MEDIA_TYPES, compressing, compressor_id, decompressing
from composer.registry.copy import CopyPlan, Manifest, Referrer, parse_manifest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
PARALLEL = 2


class Recompressed:
    """Source blob -> (new digest, size) per compression, on this machine (a re-run's shortcut)."""

    def __init__(self, root: Path | None = None):
        self.root = root or locks.cache_dir() / "recompressed"

    def _path(self, digest: str, compression: str) -> Path:
        return self.root / compression / digest.replace(":", "-")

    def find(self, digest: str, compression: str) -> tuple[str, int, dict] | None:
        """(new digest, size, what else the layer said: an eStargz layer's diff id and annotations)."""
        try:
            new, size, *rest = self._path(digest, compression).read_text().split(maxsplit=2)
            return new, int(size), json.loads(rest[0]) if rest else {}
        except (OSError, ValueError):
            return None

    def add(self, digest: str, compression: str, new: str, size: int, said: dict | None = None) -> None:
        path = self._path(digest, compression)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".incoming")
        temporary.write_text(f"{new} {size}" + (f" {json.dumps(said, sort_keys=True)}" if said else "") + "\n")
        os.replace(temporary, path)


def recompress(plan: CopyPlan, compression: str, source_api: RegistryApi, target_api: RegistryApi, *,
               memory: Recompressed | None = None, on_line: LineSink = quiet) -> tuple[CopyPlan, int]:
    """The plan's images with their layers compressed `compression`, every new layer already in the
    target; (the new plan, bytes uploaded). Nothing is tagged here."""
    memory = memory or Recompressed()
    src, dst = plan.source.repository, plan.target.repository
    replaced: dict[str, Manifest] = {}  # old manifest digest -> new
    uploaded = 0
    lock = threading.Lock()
    stop = threading.Event()

    def layer(descriptor: dict, diff_id: str | None) -> dict:
        """One layer, tried again whole when the registry drops it (one already there is skipped)."""
        return target_api.retry.run(target_api.host, lambda: layer_once(descriptor, diff_id), on_line)

    def layer_once(descriptor: dict, diff_id: str | None) -> dict:
        nonlocal uploaded
        old = COMPRESSION_OF.get(descriptor.get("mediaType", ""))
        if old == compression or (compression == "estargz" and _is_estargz(descriptor)):
            return descriptor
        digest = descriptor["digest"]
        known = memory.find(digest, compression)
        if known is not None and target_api.blob_size(dst, known[0]) is not None:
            new, size, said = known
        else:
            if old is None:
                raise RegistryError(f"{plan.source}: layer {digest} is {descriptor.get('mediaType')}, which the "
                                    "composer cannot decompress")
            what = f"blob {digest} of {plan.source}"
            if compression == "estargz":
                made = _to_estargz(source_api, target_api, src, dst, digest, old, diff_id, what, stop)
                new, size = made.digest, made.size
                said, how = {"diff_id": made.diff_id, "annotations": made.annotations}, \
                    "estargz, no prefetch list: a mirror runs no server"
            else:
                response = source_api.open_blob(src, digest)

                def write(send) -> tuple[str, int]:
                    try:
                        tar = decompressing(_until(stop, source_api.chunks(response, what), what), old)
                        new_digest, new_size, read = compressing(tar, compression, send)
                    finally:
                        response.close()
                    if diff_id and read != diff_id:
                        raise RegistryError(f"{what}: its layer hashes to {read}, not to the diff id {diff_id} its "
                                            "configuration gives; nothing was tagged")
                    return new_digest, new_size

                new, size = target_api.upload_unknown(dst, write)
                said, how = {}, compression
            memory.add(digest, compression, new, size, said)
            with lock:
                uploaded += size
            on_line(f"layer {digest[:19]} ({human_size(int(descriptor.get('size', 0)))} {old}) -> {new[:19]} "
                    f"({human_size(size)} {how})")
        changed = {k: v for k, v in descriptor.items() if k not in ("urls",)}
        changed.update(mediaType=MEDIA_TYPES[compression], digest=new, size=size)
        if said.get("annotations"):
            changed["annotations"] = {**(changed.get("annotations") or {}), **said["annotations"]}
        if said.get("diff_id"):
            changed[_DIFF_ID] = said["diff_id"]  # for image(): the configuration's new entry (then taken out)
        return changed

    def image(manifest: Manifest) -> Manifest:
        body = json.loads(manifest.body)
        config = json.loads(source_api.blob(src, body["config"]["digest"], 64 << 20))
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        layers = body.get("layers") or []
        with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="recompress") as pool:
            futures = [pool.submit(layer, d, diff_ids[i] if i < len(diff_ids) else None) for i, d in enumerate(layers)]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f.exception() for f in futures if f in done and f.exception() is not None]
            if failed:
                stop.set()
                raise failed[0]
            new_layers = [f.result() for f in futures]
        if any(_DIFF_ID in d for d in new_layers):  # eStargz: the tars inside changed
            for index, described in enumerate(new_layers):
                if _DIFF_ID in described and index < len(diff_ids):
                    diff_ids[index] = described.pop(_DIFF_ID)
            config["rootfs"] = {**config.get("rootfs", {}), "diff_ids": diff_ids}
            raw_config = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
            if target_api.blob_size(dst, "sha256:" + _sha256(raw_config)) is None:
                target_api.upload_blob(dst, raw_config)
            body["config"] = {**body["config"], "digest": "sha256:" + _sha256(raw_config), "size": len(raw_config)}
        config_type = body["config"].get("mediaType")
        body.update(mediaType=OCI_MANIFEST, layers=new_layers, schemaVersion=2)
        body["config"] = {**body["config"], "mediaType": OCI_CONFIG if config_type in (None, DOCKER_CONFIG)
                          else config_type}
        raw = json.dumps(body, separators=(",", ":")).encode()
        new, _ = parse_manifest("sha256:" + _sha256(raw), OCI_MANIFEST, raw, f"{plan.target}")
        return dataclasses.replace(new, platform=manifest.platform)

    def rewrite(manifest: Manifest) -> Manifest:
        if not manifest.is_index:
            new = image(manifest)
        else:
            children = [rewrite(child) for child in manifest.children]
            by_old = {child.digest: new for child, new in zip(manifest.children, children)}
            body = json.loads(manifest.body)
            kept = []
            for entry in body.get("manifests") or []:
                child = by_old.get(entry.get("digest"))
                if child is None:
                    continue  # a platform not copied (--platform) or not read
                kept.append({**entry, "mediaType": child.media_type, "digest": child.digest, "size": len(child.body)})
            body.update(mediaType=OCI_INDEX, manifests=kept, schemaVersion=2)
            raw = json.dumps(body, separators=(",", ":")).encode()
            new = dataclasses.replace(Manifest("sha256:" + _sha256(raw), OCI_INDEX, raw),
                                      children=tuple(children), platform=manifest.platform)
        replaced[manifest.digest] = new
        return new

    on_line(f"{plan.source}: recompressing its layers {compression} ({compressor_id(compression)}) on the way: "
            "the copy's digests are not the source's")
    top = rewrite(plan.top)
    referrers = []
    for referrer in plan.referrers:
        subject = replaced.get(referrer.subject)
        if subject is None:
            continue
        body = json.loads(referrer.manifest.body)
        if "subject" in body:
            body["subject"] = {**body["subject"], "digest": subject.digest, "size": len(subject.body),
                               "mediaType": subject.media_type}
        raw = json.dumps(body, separators=(",", ":")).encode()
        manifest, _ = parse_manifest("sha256:" + _sha256(raw), referrer.manifest.media_type, raw, str(plan.target))
        tag = referrer.tag.replace(referrer.subject.replace(":", "-"), subject.digest.replace(":", "-")) \
            if referrer.tag else None
        referrers.append(Referrer(manifest, subject.digest, tag))
    return dataclasses.replace(plan, top=top, referrers=tuple(referrers)), uploaded


_DIFF_ID = "composer.diff_id"  # a key of a new layer descriptor, never written out


def _is_estargz(descriptor: dict) -> bool:
    return estargz.TOC_DIGEST_ANNOTATION in (descriptor.get("annotations") or {})


def _to_estargz(source_api: RegistryApi, target_api: RegistryApi, src: str, dst: str, digest: str, old: str,
                diff_id: str | None, what: str, stop: threading.Event) -> estargz.Converted:
    """One source layer as eStargz in the target: read, checked against its diff id, converted in
    a folder of the run's (the converter seeks in the tar: the layer and its blob land on disk)."""
    with locks.temporary_folder("estargz") as folder:
        tar, blob = folder / "layer.tar", folder / "layer.esgz"
        response = source_api.open_blob(src, digest)
        hasher = hashlib.sha256()
        try:
            with open(tar, "wb") as out:
                for piece in decompressing(_until(stop, source_api.chunks(response, what), what), old):
                    hasher.update(piece)
                    out.write(piece)
        finally:
            response.close()
        if diff_id and "sha256:" + hasher.hexdigest() != diff_id:
            raise RegistryError(f"{what}: its layer hashes to sha256:{hasher.hexdigest()}, not to the diff id "
                                f"{diff_id} its configuration gives; nothing was tagged")
        with open(blob, "wb") as out:
            made = estargz.convert(tar, out)
        tar.unlink()
        if target_api.blob_size(dst, made.digest) is None:
            def write(send) -> tuple[str, int]:
                with open(blob, "rb") as source:
                    while piece := source.read(1 << 20):
                        send(piece)
                return made.digest, made.size

            target_api.upload_unknown(dst, write)
        return made


def _until(stop: threading.Event, chunks, what: str):
    for chunk in chunks:
        if stop.is_set():
            raise RegistryError(f"{what}: stopped (another layer failed, or the copy was interrupted)")
        yield chunk


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

