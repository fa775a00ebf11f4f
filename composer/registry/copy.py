"""Copying images between registries over their HTTP API, with no engine in between.

First a plan (`plan_copy`): the manifests under a tag (every platform of an index, or the one
asked for), the blobs they name and the referrers beside each image, read from the source
only. Then `copy_image` moves what the target lacks: a blob it already holds whole is skipped
(HEAD), one of the same registry is mounted from the source repository, any other is streamed
and verified on its way (registry.blobs.VerifiedBlob). Manifests go in only once every blob
they name is there, children before their index, and the tag last, so an interrupted copy
leaves no tag naming a half-copied image and a re-run moves only the rest.
"""

from __future__ import annotations

import contextlib
import json
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Sequence

from composer.core.errors import RegistryError, UsageError
from composer.core.platforms import Platform
from composer.core.progress import LineSink, quiet
from composer.core.refs import ImageRef
from composer.core.units import human_size
from composer.registry.blobs import VerifiedBlob
from composer.registry.client import INDEX_TYPES, RegistryApi

SCHEMA1_TYPES = (
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
)
MAX_CHILDREN = 256  # manifests of one index copied at most (multi-arch indexes hold a handful)
MAX_DEPTH = 3  # an index of indexes of images, at most
PARALLEL = 4  # blobs copied at once (skopeo copies several too): hashing and sockets leave the GIL

def choose(descriptors: Sequence[dict], platform: Platform, what: str) -> dict:
    """The one descriptor of an index for `platform`, or a UsageError naming what it offers."""
    found = [d for d in descriptors if platform.matches(Platform.of(d.get("platform")))]
    offered = sorted({str(p) for p in (Platform.of(d.get("platform")) for d in descriptors) if p is not None})
    if not found:
        raise UsageError(f"--platform {platform}: {what} has no such platform (it offers "
                         f"{', '.join(offered) or 'no named platform'})")
    if len({d.get("digest") for d in found}) > 1:
        named = sorted({str(Platform.of(d.get("platform"))) for d in found})
        raise UsageError(f"--platform {platform}: {what} offers several ({', '.join(named)}): name the variant")
    return found[0]


# -- the plan ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int


@dataclass(frozen=True)
class Manifest:
    """One manifest as the source holds it (its exact bytes), and what it names."""

    digest: str
    media_type: str
    body: bytes = field(repr=False)
    blobs: tuple[Blob, ...] = ()  # config and layers of an image (or an artifact)
    children: tuple["Manifest", ...] = ()  # an index's manifests that are copied
    platform: Platform | None = None  # as the index names it
    artifact_type: str | None = None

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES

    def walk(self) -> tuple["Manifest", ...]:
        """This manifest's tree, children before their index (the order they go in)."""
        out: list[Manifest] = []
        for child in self.children:
            out += child.walk()
        return (*out, self)

    def images(self) -> tuple["Manifest", ...]:
        return tuple(m for m in self.walk() if not m.is_index)


@dataclass(frozen=True)
class Referrer:
    """A manifest whose subject is an image of the plan (an SBOM, a signature)."""

    manifest: Manifest
    subject: str  # the digest it refers to
    tag: str | None = None  # the tag it goes under in the target (None: by digest only)


@dataclass(frozen=True)
class CopyPlan:
    """What copying `source` to `target` means: manifests (the target's tag names `top`) and
    the referrers beside them; what the target already holds is asked when copying."""

    source: ImageRef
    target: ImageRef
    top: Manifest
    referrers: tuple[Referrer, ...] = ()

    @property
    def manifests(self) -> tuple[Manifest, ...]:
        return self.top.walk()

    @property
    def blobs(self) -> tuple[Blob, ...]:
        """Every blob named, once, in the order they are copied."""
        seen: dict[str, Blob] = {}
        for manifest in [*self.manifests, *(r.manifest for r in self.referrers)]:
            for blob in manifest.blobs:
                seen.setdefault(blob.digest, blob)
        return tuple(seen.values())

    @property
    def size(self) -> int:
        return sum(b.size for b in self.blobs)

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(str(m.platform) for m in self.top.images() if m.platform is not None)


def parse_manifest(digest: str, media_type: str, body: bytes, what: str) -> tuple[Manifest, list[dict]]:
    """A manifest's blobs (image) or child descriptors (index), from its bytes."""
    if media_type in SCHEMA1_TYPES:
        raise RegistryError(f"{what} is a Docker schema 1 manifest, which is not copied: push it again with a "
                            "current client")
    data = json.loads(body)
    if media_type in INDEX_TYPES or ("manifests" in data and "layers" not in data):
        children = [d for d in data.get("manifests") or [] if isinstance(d, dict) and d.get("digest")]
        return Manifest(digest, media_type or INDEX_TYPES[1], body, artifact_type=data.get("artifactType")), children
    blobs = []
    for descriptor in [data.get("config"), *(data.get("layers") or []), *(data.get("blobs") or [])]:
        if not isinstance(descriptor, dict) or not descriptor.get("digest"):
            continue
        try:
            blobs.append(Blob(str(descriptor["digest"]), int(descriptor.get("size", 0))))
        except (TypeError, ValueError):
            raise RegistryError(f"{what} gives blob {descriptor['digest']} a size that is not a number") from None
    artifact = data.get("artifactType") or (data.get("config") or {}).get("mediaType")
    return Manifest(digest, media_type, body, tuple(blobs), artifact_type=artifact), []


def _read(api: RegistryApi, name: str, reference: str, platform: Platform | None, depth: int = 0) -> Manifest:
    sep = "@" if ":" in reference else ":"
    what = f"{api.host}/{name}{sep}{reference}"
    found = api.raw_manifest(name, reference)
    if found is None:
        raise RegistryError(f"cannot read {what}: the registry has no such image")
    manifest, descriptors = parse_manifest(*found, what)
    if not manifest.is_index:
        return manifest
    if depth >= MAX_DEPTH:
        raise RegistryError(f"cannot copy {what}: indexes nested deeper than {MAX_DEPTH}")
    if len(descriptors) > MAX_CHILDREN:
        raise RegistryError(f"cannot copy {what}: it lists {len(descriptors)} manifests (at most {MAX_CHILDREN})")
    if platform is not None:
        return _read(api, name, choose(descriptors, platform, what)["digest"], None, depth + 1)
    children = []
    for descriptor in descriptors:
        child = _read(api, name, descriptor["digest"], None, depth + 1)
        children.append(Manifest(child.digest, child.media_type, child.body, child.blobs, child.children,
                                 Platform.of(descriptor.get("platform")), child.artifact_type))
    return Manifest(manifest.digest, manifest.media_type, manifest.body, (), tuple(children),
                    artifact_type=manifest.artifact_type)


def image_platform(api: RegistryApi, name: str, manifest: Manifest) -> Platform | None:
    """The platform an image's config states (os, architecture, variant)."""
    if not manifest.blobs:
        return None
    try:
        return Platform.of(json.loads(api.blob(name, manifest.blobs[0].digest, 8 << 20)))
    except ValueError:
        return None


def plan_copy(source_api: RegistryApi, source: ImageRef, target: ImageRef, *, platform: Platform | None = None,
              referrer_tags: Callable[[str], Sequence[str]] = lambda digest: ()) -> CopyPlan:
    """Read what copying `source` (a tag) to `target` involves, from the source only.

    With `platform`, only that image of an index is copied (the target's tag names it); a
    single image must be of that platform. Referrers are what the source's referrers API
    lists for each manifest (where it has one) and the tags `referrer_tags(digest)` names
    (the `sha256-<hex>.sbom` scheme of registries without that API) that exist there.
    """
    name, reference = source.repository, source.digest or source.tag_or_latest
    top = _read(source_api, name, reference, platform)
    if platform is not None and not top.is_index:
        own = image_platform(source_api, name, top)
        if own is not None and not platform.matches(own):
            raise UsageError(f"--platform {platform}: {source} is a single image of {own}")
        top = Manifest(top.digest, top.media_type, top.body, top.blobs, (), own, top.artifact_type)
    referrers: list[Referrer] = []
    seen: set[str] = set()
    for manifest in top.walk():
        for descriptor in source_api.referrers(name, manifest.digest) or []:
            digest = descriptor.get("digest")
            if isinstance(digest, str) and digest not in seen:
                seen.add(digest)
                referrers.append(Referrer(_read(source_api, name, digest, None, MAX_DEPTH - 1), manifest.digest))
        for tag in referrer_tags(manifest.digest):
            found = source_api.raw_manifest(name, tag)
            if found is None:
                continue
            referrer, _ = parse_manifest(*found, f"{source_api.host}/{name}:{tag}")
            referrers = [r for r in referrers if r.manifest.digest != referrer.digest]
            seen.add(referrer.digest)
            referrers.append(Referrer(referrer, manifest.digest, tag))
    return CopyPlan(source, target, top, tuple(referrers))


# -- the copy ----------------------------------------------------------------------------


class Meter:
    """Bytes moved so far by one command (read by its progress heartbeat from another thread)."""

    def __init__(self) -> None:
        self.moved = 0

    def add(self, count: int) -> None:
        self.moved += count


@dataclass(frozen=True)
class CopyStats:
    """What one image's copy did to its blobs, in bytes and counts, and the manifests put."""

    bytes_moved: int = 0
    bytes_skipped: int = 0  # already in the target
    bytes_mounted: int = 0  # linked from the source repository of the same registry
    blobs_moved: int = 0
    blobs_skipped: int = 0
    blobs_mounted: int = 0
    manifests_put: int = 0

    def __add__(self, other: "CopyStats") -> "CopyStats":
        return CopyStats(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def as_tuple(self) -> tuple[int, ...]:
        return (self.bytes_moved, self.bytes_skipped, self.bytes_mounted, self.blobs_moved, self.blobs_skipped,
                self.blobs_mounted, self.manifests_put)

    def to_dict(self) -> dict:
        return {"bytes_moved": self.bytes_moved, "bytes_skipped": self.bytes_skipped,
                "bytes_mounted": self.bytes_mounted, "blobs_moved": self.blobs_moved,
                "blobs_skipped": self.blobs_skipped, "blobs_mounted": self.blobs_mounted,
                "manifests_put": self.manifests_put}


def same_registry(source_api: RegistryApi, target_api: RegistryApi) -> bool:
    """Whether a blob can be mounted across repositories rather than moved."""
    return source_api.api_host.lower() == target_api.api_host.lower()


def copy_image(plan: CopyPlan, source_api: RegistryApi, target_api: RegistryApi, *,
               meter: Meter | None = None, on_line: LineSink = quiet) -> CopyStats:
    """Copy what `plan` names into the target; only what it lacks moves. The tag goes last."""
    meter = meter or Meter()
    src, dst = plan.source.repository, plan.target.repository
    tag = plan.target.tag_or_latest
    if _tag_names(target_api, dst, tag) == plan.top.digest and all(_holds(target_api, dst, r) for r in plan.referrers):
        # A registry keeps a manifest only once everything it names is there: nothing to move.
        on_line(f"{plan.target} already names {plan.top.digest}: nothing to move")
        return CopyStats(bytes_skipped=plan.size, blobs_skipped=len(plan.blobs))
    mount = same_registry(source_api, target_api) and src != dst
    stats = _copy_blobs(plan, source_api, target_api, mount, meter, on_line)
    # No manifest goes in before the registry says it holds every blob (one that restarted on the way
    # may have lost what it took): a tag never names a manifest whose blobs are missing.
    missing = [b.digest for b in plan.blobs if target_api.blob_size(dst, b.digest) is None]
    if missing:
        raise RegistryError(f"{target_api.host}/{dst} lacks {len(missing)} blob(s) it took ({missing[0][:19]}...): "
                            f"{plan.target} was not moved")
    put = 0
    for manifest in plan.manifests:  # children first, the index last; by digest, no tag yet
        if not target_api.has_manifest(dst, manifest.digest):
            target_api.put_manifest(dst, manifest.digest, manifest.body, manifest.media_type)
            put += 1
    for referrer in plan.referrers:
        m = referrer.manifest
        if not target_api.has_manifest(dst, m.digest):
            target_api.put_manifest(dst, m.digest, m.body, m.media_type)
            put += 1
        if referrer.tag and _tag_names(target_api, dst, referrer.tag) != m.digest:
            target_api.put_manifest(dst, referrer.tag, m.body, m.media_type)
            put += 1
    if _tag_names(target_api, dst, tag) != plan.top.digest:
        stored = target_api.put_manifest(dst, tag, plan.top.body, plan.top.media_type)
        if stored != plan.top.digest:
            raise RegistryError(f"put {plan.target} ({plan.top.digest}) but the registry stored {stored}")
        put += 1
    on_line(f"{plan.target} names {plan.top.digest}: {human_size(stats.bytes_moved)} moved, "
            f"{human_size(stats.bytes_mounted)} mounted, {human_size(stats.bytes_skipped)} already there")
    return stats + CopyStats(manifests_put=put)


def _holds(api: RegistryApi, name: str, referrer: Referrer) -> bool:
    if referrer.tag:
        return _tag_names(api, name, referrer.tag) == referrer.manifest.digest
    return api.has_manifest(name, referrer.manifest.digest)


def _tag_names(api: RegistryApi, name: str, tag: str) -> str | None:
    found = api.raw_manifest(name, tag)
    return found[0] if found else None


def _copy_blobs(plan: CopyPlan, source_api: RegistryApi, target_api: RegistryApi, mount: bool, meter: Meter,
                on_line: LineSink) -> CopyStats:
    """Every blob of the plan, PARALLEL at a time; on the first failure (or Ctrl-C) the others
    stop at their next chunk, so no manifest is put and a re-run copies what is left."""
    stop = threading.Event()
    stats = CopyStats()
    pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="blob")
    try:
        def one(blob: Blob) -> CopyStats:  # a blob whose try failed is tried again whole (HEAD first)
            return target_api.retry.run(target_api.host, lambda: _copy_blob(blob, plan, source_api, target_api, mount,
                                                                             meter, on_line, stop), on_line)

        futures = [pool.submit(one, blob) for blob in plan.blobs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)  # the first failure is noticed at once
        failed = [f.exception() for f in futures if f in done and f.exception() is not None]
        if failed:
            stop.set()  # before waiting for the others: they stop at their next chunk
            raise failed[0]
        for future in futures:
            stats += future.result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return stats


def _until(stop: threading.Event, chunks, what: str):
    for chunk in chunks:
        if stop.is_set():
            raise RegistryError(f"{what}: stopped (another blob failed, or the copy was interrupted)")
        yield chunk


def _copy_blob(blob: Blob, plan: CopyPlan, source_api: RegistryApi, target_api: RegistryApi, mount: bool,
               meter: Meter, on_line: LineSink, stop: threading.Event) -> CopyStats:
    if stop.is_set():
        return CopyStats()
    src, dst = plan.source.repository, plan.target.repository
    short = blob.digest[:19]
    if target_api.blob_size(dst, blob.digest) is not None:
        return CopyStats(bytes_skipped=blob.size, blobs_skipped=1)
    if mount and target_api.mount_blob(dst, blob.digest, src):
        on_line(f"blob {short} ({human_size(blob.size)}): mounted from {src}")
        return CopyStats(bytes_mounted=blob.size, blobs_mounted=1)
    what = f"blob {blob.digest} of {plan.source}"
    with contextlib.closing(source_api.chunks(source_api.open_blob(src, blob.digest), what)) as chunks:
        body = VerifiedBlob(_until(stop, chunks, what), blob.digest, blob.size, what, meter.add)
        target_api.upload_stream(dst, blob.digest, body)
    on_line(f"blob {short} ({human_size(blob.size)}): copied ({human_size(meter.moved)} moved so far)")
    return CopyStats(bytes_moved=blob.size, blobs_moved=1)
