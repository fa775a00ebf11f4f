"""The commands that read or move images already made: smoke-test, inspect, verify, mirror, cache.

Each runs the preflight (composer.app.preflight) before any work and returns a Result; nothing
here prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from composer.app import preflight
from composer.app.compose import Progress
from composer.app.results import Result
from composer.catalog.catalog import Catalog
from composer.config.options import INSPECT, MIRROR, SMOKE, VERIFY
from composer.config.rules import validate
from composer.config.types import CompositionSpec
from composer.config.values import check_reference
from composer.core.docker_config import HostDockerConfig
from composer.core.errors import SmokeTestFailed, UsageError
from composer.core.files import printable
from composer.core.platforms import Platform
from composer.core.refs import is_image_id
from composer.engine.interface import Engine
from composer.app.rebuild import rebuild
from composer.pipeline import Run
from composer.publish.blobs import BlobCache
from composer.publish.inspect import Difference, inspect as inspect_image
from composer.publish.verify import VerificationFailed, verify as check_image
from composer.registry.client import Registries
from composer.registry.retries import retry_policy
from composer.sources.mirror import mirror_release, mirror_through_engine
from composer.verify.smoke import smoke_test as run_smoke_test
from composer.verify.smoke_plan import image_smoke_plan


def check_image_argument(ref: str, name: str, *, ids: bool = True) -> None:
    """An image named on the command line: a reference (or, where `ids`, an image id), else one line."""
    problem = None if ids and is_image_id(ref) else check_reference(ref)
    if problem:
        raise UsageError(f"{name} {printable(ref[:200])}: {problem}")


def smoke_test(given: dict, image_ref: str, engine: Callable[[], Engine], progress: Progress = Progress()) -> Result:
    """Serve the samples (or the user's models) from the image and check the answers."""
    check_image_argument(image_ref, "IMAGE")
    spec = validate(CompositionSpec().with_fields(given), SMOKE)
    connected = preflight.connect(engine)
    info = connected.require_image(image_ref, on_line=progress.on_line)
    plan, record = image_smoke_plan(connected, info, image_ref, spec.selection.backends, spec.result)
    report = run_smoke_test(connected, info.id, plan, on_line=progress.on_line, record=record)
    error = None
    if not report.passed:
        failed = ", ".join(r.subject for r in report.failures())
        error = SmokeTestFailed(f"smoke test of {image_ref} failed ({failed})", report=report)
    image = {"ref": image_ref, "image_id": info.id, "status": "passed" if report.passed else "failed",
             "smoke_test": report.to_dict()}
    return Result(SMOKE, [image], {"images": 1, "passed": int(report.passed), "failed": int(not report.passed)},
                  "", error, outcomes=[report])


def inspect(given: dict, images: Sequence[str], remote: bool, registry_auth: str | None,
            engine: Callable[[], Engine]) -> Result:
    """An image's versions, parts and SBOM without pulling it; two images: what differs."""
    if len(images) > 2:
        raise UsageError(f"inspect takes one image, or two to compare; got {len(images)}")
    for ref in images:
        check_image_argument(ref, "REF")
    secrets = preflight.load_secrets(registry_auth)
    connected = preflight.connect(engine)
    registries = Registries(connected, secrets.registry_auth, CompositionSpec().with_fields(given).images.registry_ca)
    reports = [inspect_image(connected, registries, ref, remote=remote) for ref in images]
    entries = [{"ref": ref, "status": "read", **report.to_dict()} for ref, report in zip(images, reports)]
    if len(reports) == 1:
        return Result(INSPECT, entries, {"images": 1}, reports[0].table(), extra=reports[0].to_dict())
    difference = Difference(*reports)
    return Result(INSPECT, entries, {"images": 2}, difference.table(), extra=difference.to_dict())


def verify(given: dict, image_ref: str, key: Path | None, rebuild_it: bool, registry_auth: str | None,
           engine: Callable[[], Engine], progress: Progress = Progress()) -> Result:
    """A pushed image's signature and provenance, checked from its registry; --rebuild: built again
    here from its provenance, and the digests compared."""
    check_image_argument(image_ref, "REF", ids=False)
    if key is None and not rebuild_it:
        raise UsageError("give --key PUB (the public key to verify with), --rebuild, or both")
    public = preflight.public_key(key)
    spec = validate(CompositionSpec().with_fields(given), VERIFY)
    secrets = preflight.load_secrets(registry_auth)
    connected = preflight.connect(engine) if rebuild_it else None
    registries = Registries(HostDockerConfig(), secrets.registry_auth, spec.images.registry_ca)
    extra: dict[str, Any] = {}
    text: list[str] = []
    failed = False
    if public is not None:
        checked = check_image(registries, image_ref, public)
        extra["verification"] = checked.to_dict()
        text.append(checked.table())
        failed = not checked.passed
    if rebuild_it:
        if public is None:  # said first: what follows rests on a document nobody vouched for
            progress.on_line("the provenance is unverified: no --key was given, so the rebuild trusts what the "
                             "registry holds beside the image")
        rebuilt = rebuild(connected, Registries(connected, secrets.registry_auth, spec.images.registry_ca),
                          image_ref, Catalog.load(), Run(on_line=progress.on_line, on_build_line=progress.on_build_line),
                          public_key=public)
        extra["rebuild"] = rebuilt.to_dict()
        trust = "from provenance signed by the key" if rebuilt.provenance_verified else "from UNVERIFIED provenance"
        text.append(f"rebuild ({trust}): {'the same digest' if rebuilt.same else 'differs'}"
                    + ("" if rebuilt.same else f": {rebuilt.detail} (pushed {rebuilt.digest}, rebuilt "
                                               f"{rebuilt.rebuilt or '-'})"))
        failed = failed or not rebuilt.same
    error = VerificationFailed(f"{image_ref}: verification failed") if failed else None
    image = {"ref": image_ref, "status": "failed" if failed else "verified"}
    return Result(VERIFY, [image], {"images": 1, "passed": int(not failed)}, "\n".join(text), error,
                  extra={"ref": image_ref, "passed": not failed, **extra})


def mirror(given: dict, registry_auth: str | None, source_auth: str | None, engine: Callable[[], Engine],
           progress: Progress = Progress()) -> Result:
    """A release's full and min images copied into a private registry, registry to registry (or
    through the engine with --to-engine); only what is missing moves."""
    spec = validate(CompositionSpec().with_fields(given), MIRROR)
    images, how = spec.images, spec.mirror
    release = Catalog.load().release(images.version)
    platform = Platform.parse(how.platform) if how.platform else None
    secrets = preflight.load_secrets(registry_auth, source_auth=source_auth)
    if how.to_engine:
        result = mirror_through_engine(preflight.connect(engine), release, source=images.registry, dest=how.to,
                                       auth=secrets.registry_auth, source_auth=secrets.source_auth,
                                       registry_ca=images.registry_ca, on_line=progress.on_line)
    else:  # registry to registry: this machine's trust settings and logins, read from their files; no engine
        host = HostDockerConfig()
        retry = retry_policy(images, progress.on_line)
        result = mirror_release(release, source=images.registry, dest=how.to,
                                registries=Registries(host, secrets.registry_auth, images.registry_ca, retry),
                                source_registries=Registries(host, secrets.source_auth, images.registry_ca, retry),
                                platform=platform, compression=spec.result.compression, on_line=progress.on_line)
    payload = result.to_dict()
    entries = [{**entry, "status": "moved" if entry.get("moved") else "present"} for entry in payload.get("images", [])]
    return Result(MIRROR, entries, payload.get("totals") or {"images": len(entries)},
                  "\n".join(_mirrored_line(i) for i in result.images),
                  extra={k: v for k, v in payload.items() if k != "images"})


def _mirrored_line(image) -> str:
    from composer.core.units import human_size

    line = f"{'moved' if image.moved else 'present'}  {image.dest}@{image.digest}"
    if image.stats is not None:
        s = image.stats
        line += (f"  ({human_size(s.bytes_moved)} moved, {human_size(s.bytes_mounted)} mounted, "
                 f"{human_size(s.bytes_skipped)} already there; {', '.join(image.platforms) or 'platform unnamed'}; "
                 f"{len(image.referrers)} referrers)")
    return line


def cache_list(engine: Callable[[], Engine], builders: Sequence[str] = (), tls: Path | None = None) -> Result:
    """The pruned bases and what runs left on the engine; with `builders`, what the composer's
    builds keep in those BuildKit builders' caches."""
    from composer.assembly.cache import builder_entry, freed_by, listing
    from composer.core.units import human_size
    from composer.render.render import stage_names

    given = preflight.CacheBuilders.given(builders, tls)
    connected = preflight.connect(engine)
    checked = given.reach(connected)
    entries = listing(connected) + [builder_entry(builder, stage_names())[0] for builder in checked]
    entries += [entry for entry in [_blob_entry(BlobCache())] if entry is not None]
    text = "\n".join(e.line() for e in entries) or "nothing: no pruned base, no build cache and no leftover on the engine"
    cached = [e.image for e in entries if e.kind == "cached stage"]
    summary: dict = {"entries": len(entries)}
    if cached:
        graph = connected.image_graph()
        total = freed_by(graph, cached, connected.disk_usage()) if graph else sum(max(e.unique, 0) for e in entries if e.kind == "cached stage")
        # Stages loaded whole (BuildKit's) count what they share with no other image; the layers they
        # share only among themselves go too: then the total is a floor (cache clear says the freed bytes).
        loaded = not graph or any(graph[image][0] == "" for image in cached if image in graph)
        summary["build_cache"] = total
        text += (f"\nbuild cache: {len(cached)} stages, {'at least ' if loaded else ''}{human_size(total)} in all "
                 "(what cache clear frees while no build is at work)")
    records = [e.to_dict() for e in entries]
    return Result("cache list", [], summary, text, extra={"entries": records})


def cache_clear(older_than: float | None, everything: bool, engine: Callable[[], Engine],
                progress: Progress = Progress(), builders: Sequence[str] = (), tls: Path | None = None) -> Result:
    """What ended runs left (and, when asked, pruned bases), never an image a tag or a build holds;
    with `builders`, the composer's records in their caches that no build uses."""
    from composer.assembly.cache import clear
    from composer.core.units import human_size
    from composer.render.render import stage_names

    given = preflight.CacheBuilders.given(builders, tls)
    connected = preflight.connect(engine)
    checked = given.reach(connected)
    done = clear(connected, older_than_days=older_than, everything=everything, on_line=progress.on_line,
                 builders=checked, stages=stage_names())
    done = _clear_blobs(done, BlobCache(), older_than, everything, progress)
    payload = done.to_dict()
    images = len([e for e in done.removed if e.kind not in ("builder cache", "blob cache")])
    return Result("cache clear", [], {"removed": len(done.removed), "freed": done.freed},
                  f"removed {images} images and {done.containers} containers" +
                  (f", {human_size(done.builder_cache)} of builders' caches" if done.builder_cache else "") +
                  (f", {human_size(done.blobs)} of compressed layers" if done.blobs else "") +
                  f", freed {human_size(done.freed)}; kept {len(done.kept)}" +
                  "".join("\n" + line for line in done.kept_lines()), extra=payload)


def _blob_entry(blobs: BlobCache):
    """This machine's blob cache as one `cache list` entry; None when it holds nothing."""
    from composer.assembly.cache import Entry

    usage = blobs.usage()
    if not usage.count:
        return None
    return Entry("blob cache", str(blobs.root), (), usage.size, usage.size, usage.last_used or 0.0, usage.last_used,
                 layers=usage.count)


def _clear_blobs(done, blobs: BlobCache, older_than: float | None, everything: bool, progress: Progress):
    """The blob cache's part of `cache clear`: with --all every blob, with --older-than those unused
    that long, none while a push holds the cache. The compressed layers are made again by the next
    push that needs them."""
    import dataclasses

    from composer.assembly.cache import ONLY_WHEN_ASKED
    from composer.core.units import human_size

    entry = _blob_entry(blobs)
    if entry is None:
        return done
    if not everything and older_than is None:
        return dataclasses.replace(done, kept=(*done.kept, (entry, ONLY_WHEN_ASKED)))
    gone = blobs.clear(None if everything else older_than)
    if gone is None:
        return dataclasses.replace(done, kept=(*done.kept, (entry, "a push at work holds it")))
    left = _blob_entry(blobs)
    why = "added while it was cleared" if everything or older_than is None else f"used within {older_than:g} days"
    kept = done.kept if left is None else (*done.kept, (left, why))
    if not gone.count:
        return dataclasses.replace(done, kept=kept)
    progress.on_line(f"removed {gone.count} compressed layers ({human_size(gone.size)}) from the blob cache at "
                     f"{blobs.root}")
    removed = dataclasses.replace(entry, layers=gone.count, size=gone.size, unique=gone.size)
    return dataclasses.replace(done, removed=(*done.removed, removed), kept=kept, blobs=gone.size)
