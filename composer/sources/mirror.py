"""Mirroring a release's full and min images into another registry.

By default registry to registry (`mirror_release`): manifests and blobs go over the registries'
HTTP API (composer.registry.copy), every platform of an index and the SBOMs beside each image
included, and the engine holds nothing new. `mirror_through_engine` is the older path
(`--to-engine`): pull into the engine, push from it, the images kept there.
Credentials and trust are the ones the engine would use (composer.registry.client.Registries).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from composer.core.errors import RegistryError, UsageError
from composer.core.platforms import Platform
from composer.core.progress import Heartbeat, LineSink, quiet
from composer.core.refs import ImageRef, check_registry_prefix
from composer.core.units import human_size
from composer.engine.interface import Engine
from composer.publish.artifacts import fallback_tag
from composer.publish.push import push_image
from composer.registry.client import Registries, RegistryApi
from composer.registry.credentials import RegistryAuth
from composer.registry.copy import CopyPlan, CopyStats, Meter, copy_image, plan_copy, same_registry
from composer.registry.recompress import recompress
from composer.verify.sbom import MEDIA_TYPE as SBOM_TYPE

SUFFIXES = ("-py3", "-py3-min")  # a release's full and min images


@dataclass(frozen=True)
class MirroredImage:
    source: str
    dest: str
    digest: str
    moved: bool  # False: the destination already held this image
    stats: CopyStats | None = None  # registry to registry: bytes moved, skipped, mounted
    platforms: tuple[str, ...] = ()  # of the images copied (an index's, or the one chosen)
    referrers: tuple[str, ...] = ()  # manifests copied beside the image (SBOMs), by digest

    def to_dict(self) -> dict:
        out = {"source": self.source, "dest": self.dest, "digest": self.digest, "moved": self.moved}
        if self.stats is not None:
            out.update(self.stats.to_dict(), platforms=list(self.platforms), referrers=list(self.referrers))
        return out


@dataclass(frozen=True)
class MirrorResult:
    release: str
    images: tuple[MirroredImage, ...]
    via: str = "registry"  # or "engine" (--to-engine)
    seconds: float = 0.0

    @property
    def moved(self) -> tuple[MirroredImage, ...]:
        return tuple(image for image in self.images if image.moved)

    @property
    def totals(self) -> CopyStats | None:
        if self.via != "registry":
            return None
        total = CopyStats()
        for image in self.images:
            total += image.stats or CopyStats()
        return total

    def to_dict(self) -> dict:
        out = {"release": self.release, "via": self.via, "seconds": round(self.seconds, 1),
               "images": [i.to_dict() for i in self.images]}
        if self.totals is not None:
            out["totals"] = self.totals.to_dict()
        return out


# -- registry to registry -----------------------------------------------------------------


def mirror_release(
    release,
    *,
    source: str,
    dest: str,
    registries: Registries,
    source_registries: Registries | None = None,
    platform: Platform | None = None,
    compression: str | None = None,
    on_line: LineSink = quiet,
) -> MirrorResult:
    """Copy a release's full and min images from registry `source` to `dest`, engine-free.

    Both images are planned first (read from the source only: a platform an index lacks is
    refused before anything moves); then each is copied, its tag put last. `registries` holds
    the destination's credentials, `source_registries` the source's (default: the same).
    `compression` (gzip, zstd, none, estargz): each layer compressed otherwise is recompressed on the
    way (composer.registry.recompress: new digests; eStargz also new diff ids, so a new
    configuration); None keeps the source's blobs as they are.
    """
    started = time.monotonic()
    name = getattr(release, "name", release)
    source, dest = _prefixes(source, dest)
    source_registries = source_registries or registries
    src_api = source_registries.client(ImageRef.parse(f"{source}/tritonserver").host)
    dst_api = registries.client(ImageRef.parse(f"{dest}/tritonserver").host)
    say = _scrubbed(on_line, registries.auth, source_registries.auth, src_api.auth, dst_api.auth)
    if ":" not in src_api.host and src_api.refuses_connections():  # at once, not after every try
        raise RegistryError(f"--registry {source}: nothing listens at {src_api.host}, so it is no registry; images "
                            "only on this engine, such as stand-ins, are mirrored with --to-engine")
    plans = [_plan(src_api, dst_api, f"{source}/tritonserver:{name}{suffix}", f"{dest}/tritonserver:{name}{suffix}",
                   platform) for suffix in SUFFIXES]
    total = sum(p.size for p in plans)  # shared layers counted once per image: an upper bound
    how = "mounting within" if same_registry(src_api, dst_api) else "copying to"
    say(f"mirror {name}: {how} {dst_api.host}, up to {human_size(total)} in {sum(len(p.blobs) for p in plans)} blobs")
    meter = Meter()
    images: list[MirroredImage] = []
    with Heartbeat(say, f"mirror {name}", measure=lambda: meter.moved,
                   describe=lambda done: f"{human_size(done)} moved") as beat:
        for plan in plans:
            uploaded = 0
            if compression is not None:
                plan, uploaded = recompress(plan, compression, src_api, dst_api, on_line=beat.on_line)
                meter.add(uploaded)
            stats = copy_image(plan, src_api, dst_api, meter=meter, on_line=beat.on_line)
            if uploaded:
                stats = dataclasses.replace(stats, bytes_moved=stats.bytes_moved + uploaded,
                                            bytes_skipped=max(0, stats.bytes_skipped - uploaded))
            images.append(MirroredImage(
                str(plan.source), str(plan.target), plan.top.digest, moved=stats.manifests_put > 0, stats=stats,
                platforms=plan.platforms, referrers=tuple(r.manifest.digest for r in plan.referrers)))
    return MirrorResult(str(name), tuple(images), "registry", time.monotonic() - started)


def _plan(src_api: RegistryApi, dst_api: RegistryApi, src_ref: str, dst_ref: str,
          platform: Platform | None) -> CopyPlan:
    source, target = ImageRef.parse(src_ref), ImageRef.parse(dst_ref)
    try:
        plan = plan_copy(src_api, source, target, platform=platform, referrer_tags=lambda d: (fallback_tag(d),))
    except RegistryError as error:
        if "does not answer" in error.message and ":" not in source.host:
            raise RegistryError(f"{error.message} (images only on this engine, such as stand-ins, are mirrored "
                                "with --to-engine)") from None
        raise
    untagged = [r for r in plan.referrers if r.tag is None]
    if untagged and dst_api.referrers(target.repository, plan.top.digest) is None:
        # The target has no referrers API: an SBOM found through the source's goes under the
        # tag readers of such registries look for (publish.artifacts), others by digest only.
        plan = dataclasses.replace(plan, referrers=tuple(
            dataclasses.replace(r, tag=fallback_tag(r.subject)) if r.tag is None and r.manifest.artifact_type == SBOM_TYPE
            else r for r in plan.referrers))
    return plan


def _prefixes(source: str, dest: str) -> tuple[str, str]:
    source, dest = check_registry_prefix(source, "--registry"), check_registry_prefix(dest, "--to")
    if source == dest:
        raise UsageError(f"cannot mirror {source} onto itself: give a different destination")
    return source, dest


def _scrubbed(on_line: LineSink, *auths: RegistryAuth | None) -> LineSink:
    present = [a for a in auths if a is not None]

    def say(line: str) -> None:
        for auth in present:
            line = auth.redact(line)
        on_line(line)

    return say


# -- through the engine (--to-engine) ------------------------------------------------------


def mirror_through_engine(
    engine: Engine,
    release,
    *,
    source: str,
    dest: str,
    auth: RegistryAuth | None = None,
    source_auth: RegistryAuth | None = None,
    registry_ca: Path | None = None,
    on_line: LineSink = quiet,
    retries: int = 3,
    backoff: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> MirrorResult:
    """Copy a release's full and min images from `source` to `dest` through the engine.

    `release` is a catalog Release or its name (YY.MM). A source image already on the engine is
    used as is (stand-ins are local only); otherwise it is pulled. What `dest` holds is read from
    its HTTP API (trusting the CA the engine trusts for it, or `registry_ca`), so a re-run
    pushes nothing when the destination already has the same images; after a push the
    registry is asked again that the tag names the pushed digest.
    """
    started = time.monotonic()
    name = getattr(release, "name", release)
    source, dest = _prefixes(source, dest)
    dest_host = ImageRef.parse(f"{dest}/tritonserver").host
    api = Registries(engine, auth, registry_ca).client(dest_host)
    say = _scrubbed(on_line, auth, source_auth, api.auth)
    images: list[MirroredImage] = []
    for suffix in SUFFIXES:
        src_ref = f"{source}/tritonserver:{name}{suffix}"
        dst_ref = f"{dest}/tritonserver:{name}{suffix}"
        info = engine.image(src_ref)
        if info is None:
            say(f"pulling {src_ref}")
            info = engine.pull(src_ref, auth=source_auth.as_config() if source_auth else None, on_line=say)
        else:
            say(f"{src_ref} is on the engine ({info.id})")
        target = ImageRef.parse(dst_ref)
        held = api.holds_image(target.repository, target.tag_or_latest, info)
        if held is not None:
            say(f"{dst_ref} already holds it ({held.digest}): nothing to move")
            images.append(MirroredImage(src_ref, dst_ref, held.digest, moved=False))
            continue
        say(f"pushing {src_ref} to {dst_ref}")
        digest = push_image(
            engine, info.id, dst_ref, auth=auth, retries=retries, backoff=backoff, on_line=say, sleep=sleep
        )
        now = api.digest(target)
        if now != digest:
            raise RegistryError(f"pushed {dst_ref} ({digest}) but the registry names {now or 'nothing'} by it")
        images.append(MirroredImage(src_ref, dst_ref, digest, moved=True))
    return MirrorResult(str(name), tuple(images), "engine", time.monotonic() - started)
