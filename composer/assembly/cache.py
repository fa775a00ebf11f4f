"""What the composer keeps on an engine between builds, and what runs left: `composer cache`.

Kept on purpose: pruned bases (tagged triton-composer/pruned-base:..., each made once per min
image and selection; their family layers are shared by the images built on them), and the build
cache: the stages the composer reads, named by what they are made of (STAGE_LABEL "<stage> <key>",
render.composition_key), which every build of the same inputs shares. A build holds the build cache
(a shared lock per engine) while it works, so `cache clear` removes cached stages only when no
build is at work on the engine. A run holds the image it made with a tag of its own
(records.hold_tag) until its tag is on it. Left over: the containers, holds and pruned-base stages
of a run that did not end its own way (an engine restart, a killed process), found by the run id
they carry (RUN_LABEL, the hold tag) and the run records of composer.engine.locks: a run whose
process is gone is dead, and what it left is removed by the next build on the engine or by
`composer cache clear`.

Nothing here removes an image a tag uses: a pruned base goes only when no tagged image holds its
layers and no build holds its use lock; a cached stage is untagged build cache; a held image loses
only a dead run's hold. Sizes are each entry's own bytes: what removing it frees (its layers no
other image stands on), not the engine's count of bytes shared.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence
from datetime import datetime, timezone

from composer.assembly.pruning import BASE_LABEL, STAGE_LABEL, base_tag_in, remove_stages, run_of
from composer.core.errors import ComposerError
from composer.core.progress import LineSink, quiet
from composer.core.units import human_size
from composer.assembly import records
from composer.engine import locks, oci_layout
from composer.engine.buildkit import BuildKit, CacheRecord, composers
from composer.resolve.plan_types import BACKENDS_LABEL, CACHE_LABEL, RUN_LABEL
from composer.resolve.plan_types import STAGE_LABEL as PLAN_STAGE_LABEL

CACHED_STAGE_LABELS = (PLAN_STAGE_LABEL, CACHE_LABEL)  # build cache by content: the stages read, the base's decide

DAY = 24 * 3600
ONLY_WHEN_ASKED = "only --older-than DAYS or --all removes it"  # why a pruned base or the blob cache stays


@dataclass(frozen=True)
class Entry:
    """One thing `composer cache list` shows."""

    kind: str  # "pruned base", "old base" (an untagged one: its tag moved), "cached stage" (build cache, by
    # content), "stage" (a leftover stage image of a pruned base's build), "run image" (a run's leftover image),
    # "held image" (an image a run holds: its own until tagged), "builder cache", "blob cache" (this machine's
    # compressed layers: composer.publish.blobs)
    image: str
    tags: tuple[str, ...]
    size: int  # bytes the image holds (its own and those shared with others)
    unique: int  # bytes only it holds (what removing it frees), when the engine says; else -1
    created: float  # time.time() seconds
    last_used: float | None
    used_by: tuple[str, ...] = ()  # tagged images holding its layers (pruned bases)
    run: str | None = None  # the run that made it (leftovers)
    run_alive: bool = False
    layers: int = 0
    shares_layers_with: tuple[str, ...] = field(default=())  # other pruned bases with a family layer in common
    key: str | None = None  # a cached stage's: "<stage> <composition key>"
    held: str | None = None  # why it stays whatever is asked (a build at work, a live run's hold)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "image": self.image, "tags": list(self.tags), "size": self.size,
                "unique_size": None if self.unique < 0 else self.unique,
                "created": _iso(self.created), "last_used": _iso(self.last_used) if self.last_used else None,
                "used_by": list(self.used_by), "run": self.run, "run_alive": self.run_alive,
                "layers": self.layers, "shares_layers_with": list(self.shares_layers_with), "key": self.key,
                "held_by": self.held}

    def name(self) -> str:
        """What a user knows it by: its tag, a cached stage's key, a cache's folder or address."""
        if self.kind == "cached stage" and self.key:
            return f"cached stage {self.key}"
        if self.kind in ("blob cache", "builder cache"):
            return f"{self.kind} {self.image}"
        return f"{self.kind} {self._tag_or_id()}"

    def _tag_or_id(self) -> str:
        return self.tags[0] if self.tags else self.image[:19]

    def line(self) -> str:
        name = self._tag_or_id()
        size = human_size(self.size) + ("" if self.unique < 0 else f" ({human_size(self.unique)} its own)")
        used = f"last used {_iso(self.last_used)}" if self.last_used else f"made {_iso(self.created)}"
        if self.kind == "old base":
            whose = f"used by {', '.join(self.used_by)}" if self.used_by else "used by no tagged image"
            return f"old base     {name}  {size}  {self.layers} layers  {used}  untagged (its tag moved)  {whose}"
        if self.kind == "pruned base":
            whose = f"used by {', '.join(self.used_by)}" if self.used_by else "used by no tagged image"
            shares = f"; shares family layers with {', '.join(self.shares_layers_with)}" if self.shares_layers_with else ""
            return f"pruned base  {name}  {size}  {self.layers} layers  {used}  {whose}{shares}"
        if self.kind == "cached stage":
            return f"cached stage {self.key}  {size}  {used}  {self.held or 'held by no build'}"
        if self.kind == "blob cache":
            return f"blob cache   {self.image}  {self.layers} compressed layers  {human_size(self.size)}  {used}"
        if self.kind == "builder cache":
            size = human_size(self.size) + f" ({human_size(self.unique)} not in use)"
            return f"builder cache {self.image}  {self.layers} records of the composer's steps  {size}  {used}"
        state = "at work" if self.run_alive else "dead or unknown"
        return f"{self.kind:<11}  {name}  {size}  {used}  run {self.run or '?'} ({state})"


def _iso(seconds: float | None) -> str:
    if not seconds:
        return ""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _created(text: str) -> float:
    """An engine's Created (RFC 3339, nanoseconds) as seconds."""
    try:
        return datetime.fromisoformat(text[:19]).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return 0.0


def _tagged(engine) -> dict[str, object]:
    """Each tagged image (by id) with its info."""
    found: dict[str, object] = {}
    for name in engine.image_names():
        if "@" in name:
            continue
        info = engine.image(name)
        if info is not None:
            found.setdefault(info.id, info)
    return found


def _users(base, tagged: dict) -> tuple[str, ...]:
    """The tags of images other than `base` whose layers start with the base's. Not another pruned
    base with the very same layers (two selections that keep the same packages): each counted the
    other as its user, and `cache clear --all` removed neither."""
    users = []
    for info in tagged.values():
        if info.id == base.id or not base.layers:
            continue
        if BASE_LABEL in info.labels and tuple(info.layers) == tuple(base.layers):
            continue
        if tuple(info.layers[:len(base.layers)]) == tuple(base.layers):
            users += list(info.tags)
    return tuple(sorted(users))


def own_bytes(graph: dict[str, tuple[str, int, bool]], image: str, kept: set[str] = frozenset()) -> int:
    """What removing `image` (and the untagged parents only it stands on, as the engine's removal
    prunes them) frees: its layers' bytes no other image holds; -1 when the engine keeps no parents,
    or when the chain ends in an image loaded whole (no parent: its size holds layers other images
    may share; the engine's own count says)."""
    if image not in graph:
        return -1
    children: dict[str, int] = {}
    for parent, _, _ in graph.values():
        children[parent] = children.get(parent, 0) + 1
    total, current = 0, image
    while True:
        parent, size, _ = graph[current]
        if not parent:
            return -1
        below = graph[parent][1] if parent in graph else 0
        total += max(size - below, 0)
        if parent not in graph or graph[parent][2] or children.get(parent, 0) != 1 or parent in kept:
            return total
        current = parent


def freed_by(graph: dict[str, tuple[str, int, bool]], images, usage: dict[str, dict] | None = None) -> int:
    """What removing all of `images` frees, with the untagged parents only they stand on. An image
    without a parent was loaded whole (a BuildKit stage): its size counts every layer it holds, the
    ones other images hold too, so it counts by the engine's `usage` (its bytes less those shared)
    where known."""
    gone = {image for image in images if image in graph}
    children: dict[str, set[str]] = {}
    for image, (parent, _, _) in graph.items():
        children.setdefault(parent, set()).add(image)
    frontier = set(gone)
    while frontier:
        parents = {graph[image][0] for image in frontier if graph[image][0] in graph}
        frontier = {p for p in parents if p not in gone and not graph[p][2] and children.get(p, set()) <= gone}
        gone |= frontier
    return sum(_own_size(graph, i, usage or {}) for i in gone)


def _own_size(graph: dict[str, tuple[str, int, bool]], image: str, usage: dict[str, dict]) -> int:
    """An image's bytes less its parent's; for one without a parent, less what it shares with others."""
    parent, size, _ = graph[image]
    if parent in graph:
        return max(size - graph[parent][1], 0)
    row = usage.get(image)
    return max(row["size"] - row["shared"], 0) if row is not None else size


def build_cache_in_use(engine) -> bool:
    """Whether a build on this host is at work on the engine (it holds the build cache)."""
    with locks.removable_host(engine.identity(), records.CACHE_LOCK) as free:
        return not free


def listing(engine) -> list[Entry]:
    """The pruned bases, cached stages, held images and leftovers of runs on the engine."""
    engine_id = engine.identity()
    usage = engine.disk_usage()
    graph = engine.image_graph()
    live = locks.live_runs()
    tagged = _tagged(engine)
    entries: list[Entry] = []

    def unique(image_id: str) -> int:
        own = own_bytes(graph, image_id, listed)
        if own >= 0:
            return own
        row = usage.get(image_id)
        return -1 if row is None else max(row["size"] - row["shared"], 0)

    listed = {image for label in CACHED_STAGE_LABELS
              for image in engine.images_labelled(label, untagged=True)} if graph else set()

    bases = [info for info in tagged.values() if base_tag_in(info.tags) and BASE_LABEL in info.labels]
    for base in sorted(bases, key=lambda b: b.tags):
        tag = base_tag_in(base.tags)
        created = _created(base.created)
        shares = tuple(sorted(base_tag_in(other.tags) for other in bases
                              if other.id != base.id and set(other.layers) & set(base.layers)))
        entries.append(Entry("pruned base", base.id, base.tags, base.size, unique(base.id), created,
                             locks.last_used(engine_id, tag) or created, _users(base, tagged),
                             layers=len(base.layers), shares_layers_with=shares))
    seen = set()
    for image in engine.images_labelled(BASE_LABEL, untagged=True):
        info = engine.image(image)
        if info is None or info.tags or _built_on_a_base(info):
            continue  # an image built on a base inherits its label: a stage or a run's image (listed below), or a
            # composed image whose tag moved (the user's, as any image's previous version is)
        if _steps_of(info, bases):
            continue  # a composition's first steps on a base (its configuration, no layer): part of that base
        # A pruned base whose tag went to another image of the same key (made again while this one
        # was in use, or by a run killed as it tagged): no build finds it any more.
        seen.add(info.id)
        entries.append(Entry("old base", info.id, (), info.size, unique(info.id), _created(info.created), None,
                             _users(info, tagged), layers=len(info.layers)))
    busy = "a build at work on this engine holds it" if build_cache_in_use(engine) else None
    for label in CACHED_STAGE_LABELS:
        for image in engine.images_labelled(label, untagged=True):
            info = engine.image(image)
            if info is None or image in seen or run_of(info.labels) is not None:
                continue  # one naming a run is that run's stage, listed below: a pruned base's layer stage
                # names itself for the builder by the run, and its layers stage inherits the decide's mark
            seen.add(image)
            entries.append(Entry("cached stage", info.id, (), info.size, unique(info.id), _created(info.created),
                                 None, key=str(info.labels.get(label, "")), held=busy))
    for kind, label in (("stage", STAGE_LABEL), ("run image", RUN_LABEL)):
        for image in engine.images_labelled(label, untagged=True):
            if image in seen:
                continue
            seen.add(image)
            info = engine.image(image)
            if info is None:
                continue
            run = run_of(info.labels)
            entries.append(Entry(kind, info.id, (), info.size, unique(info.id), _created(info.created), None,
                                 run=run, run_alive=run in live))
    for info in tagged.values():
        for tag in (t for t in info.tags if records.is_hold(t)):
            run = records.run_of_hold(tag)
            entries.append(Entry("held image", info.id, (tag,), info.size, unique(info.id), _created(info.created),
                                 None, run=run, run_alive=run in live,
                                 held=f"run {run} is at work" if run in live else None))
    return entries


@dataclass(frozen=True)
class Cleared:
    """What `composer cache clear` removed, and what it kept and why."""

    removed: tuple[Entry, ...]
    kept: tuple[tuple[Entry, str], ...]
    containers: int
    freed_bytes: int = -1  # the engine's layer store before less after (else its images'; -1: it keeps no parents)
    builder_copies: int = 0  # bytes of BuildKit's copies of the engine's images removed (composer.engine.oci_layout)
    builder_cache: int = 0  # bytes of the composer's records removed from BuildKit builders' caches
    blobs: int = 0  # bytes of compressed layers removed from this machine's blob cache (composer.publish.blobs)

    @property
    def freed(self) -> int:
        engine = self.freed_bytes if self.freed_bytes >= 0 else sum(
            max(e.unique, 0) for e in self.removed if e.kind not in ("builder cache", "blob cache"))
        return engine + self.builder_copies + self.builder_cache + self.blobs

    def kept_lines(self, most: int = 10) -> list[str]:
        """Each kept entry and why, the first `most` of them (the JSON lists every one)."""
        lines = [f"kept {entry.name()}: {why}" for entry, why in self.kept[:most]]
        if len(self.kept) > most:
            lines.append(f"... and {len(self.kept) - most} more kept (--json lists each with why)")
        return lines

    def to_dict(self) -> dict:
        return {"removed": [e.to_dict() for e in self.removed], "containers_removed": self.containers,
                "kept": [{**e.to_dict(), "why": why} for e, why in self.kept], "freed": self.freed,
                "builder_copies_removed": self.builder_copies, "builder_cache_removed": self.builder_cache,
                "blob_cache_removed": self.blobs}


def builder_entry(builder: BuildKit, stages: Iterable[str]) -> tuple[Entry, list[CacheRecord]]:
    """What the composer's builds keep in a BuildKit builder's cache (its steps, the engine images it
    handed over), as one entry: the records, their bytes, and those no build uses now."""
    mine = composers(builder.records(), stages, oci_layout.handed(builder.runtime))
    times = sorted(_created(r.created) for r in mine)
    used = sorted(_created(r.last_used) for r in mine if r.last_used)
    busy = sum(r.in_use for r in mine)
    entry = Entry("builder cache", f"buildkit://{builder.address}", (), sum(r.size for r in mine),
                  sum(r.size for r in mine if not r.in_use), times[0] if times else 0.0, used[-1] if used else None,
                  layers=len(mine), held=f"{busy} records in use by a build" if busy else None)
    return entry, mine


def select(entries: list[Entry], *, older_than_days: float | None, everything: bool,
           now: float | None = None) -> tuple[list[Entry], list[tuple[Entry, str]]]:
    """Which entries `composer cache clear` removes, and which it keeps (with why). A leftover of a
    run at work, and a pruned base a tagged image uses, always stay. (Leftovers of runs recorded
    dead are gone before this: remove_dead_runs.) A leftover no record here names (a run of another
    host, or of a composer before run records) may be a build at work: it goes with `everything`,
    or once older than `older_than_days` (1 day without it). A pruned base goes with `everything`,
    or when unused for `older_than_days`."""
    now = time.time() if now is None else now
    chosen, kept = [], []
    for entry in entries:
        if entry.kind in ("cached stage", "held image"):  # build cache, or a run's hold: only what nothing holds
            if entry.held:
                kept.append((entry, entry.held))
            elif entry.kind == "cached stage" and older_than_days is not None and not everything and \
                    (now - entry.created) <= older_than_days * DAY:
                kept.append((entry, f"made within {older_than_days:g} days"))
            else:
                chosen.append(entry)
            continue
        if entry.kind != "pruned base":  # an old base, or a run's leftover: either may still be in use
            days = 1.0 if older_than_days is None else older_than_days
            if entry.kind == "old base":  # no build finds it by its tag, but one that began on it may be at work
                held = f"used by {', '.join(entry.used_by)}" if entry.used_by else None
                recent = "(a build begun on it may be at work)"
            else:
                held = f"run {entry.run} is at work" if entry.run_alive else None
                recent = "by a run not recorded here (it may be at work)"
            if held:
                kept.append((entry, held))
            elif everything or (now - entry.created) > days * DAY:
                chosen.append(entry)
            else:
                kept.append((entry, f"made within {days:g} days {recent}"))
            continue
        if entry.used_by:
            kept.append((entry, f"used by {', '.join(entry.used_by)}"))
        elif everything:
            chosen.append(entry)
        elif older_than_days is not None and (now - (entry.last_used or entry.created)) > older_than_days * DAY:
            chosen.append(entry)
        else:
            why = f"used within {older_than_days:g} days" if older_than_days is not None else \
                ONLY_WHEN_ASKED
            kept.append((entry, why))
    return chosen, kept


def clear(engine, *, older_than_days: float | None = None, everything: bool = False,
          on_line: LineSink = quiet, only: Callable[[Entry], bool] = lambda entry: True,
          builders: Sequence[BuildKit] = (), stages: Iterable[str] = ()) -> Cleared:
    """Remove what select() chooses (of the entries `only` accepts): leftovers of runs not at work
    (and their containers), and pruned bases no tag uses, each only while no build holds it; and
    from each of `builders`, the records of the composer's steps (`stages`) no build uses."""
    containers = remove_dead_runs(engine, on_line)
    before = engine.image_graph()
    stored = engine.layers_bytes()
    entries = [entry for entry in listing(engine) if only(entry)]
    chosen, kept = select(entries, older_than_days=older_than_days, everything=everything)
    engine_id = engine.identity()
    live = locks.live_runs()
    removed: list[Entry] = []
    for entry in [e for e in chosen if e.kind == "held image"]:  # a dead run's hold: the tag, not the image
        records.release(engine, entry.run or "")
        removed.append(entry)
    cached = [e for e in chosen if e.kind == "cached stage"]
    if cached:
        with locks.removable_host(engine_id, records.CACHE_LOCK) as free:  # no build starts while they go
            if not free:
                kept += [(e, "a build at work on this engine holds it") for e in cached]
            else:
                for _ in range(8):  # leaves first: a stage built on another goes before it
                    left = [e for e in cached if engine.image(e.image) is not None]
                    if not left or not sum(_remove_untagged(engine, e.image, prune=True) for e in left):
                        break
                removed += [e for e in cached if engine.image(e.image) is None]
                kept += [(e, "in use by a container, or a parent of another image")
                         for e in cached if engine.image(e.image) is not None]
    leftovers = [e for e in chosen if e.kind not in ("pruned base", "held image", "cached stage")]
    for entry in leftovers:
        if entry.run and entry.run not in live:
            containers += _remove_containers(engine, entry.run)
    gone = {e.image for e in leftovers}
    for _ in range(256):  # leaves first: a stage's image goes once nothing is built on it
        left = [e for e in leftovers if e.image in gone and engine.image(e.image) is not None]
        if not left:
            break
        for entry in left:  # an old base with the build steps under it, as its tag would have taken them
            _remove_untagged(engine, entry.image, prune=entry.kind == "old base")
        if all(engine.image(e.image) is not None for e in left):
            break  # none went: in use, or parents of images kept
        # removing a leaf makes its (labelled) parent a leaf: list again
        fresh = {e.image: e for e in listing(engine) if e.kind in ("stage", "run image", "old base") and only(e)}
        again, _ = select(list(fresh.values()), older_than_days=older_than_days, everything=everything)
        for entry in again:
            if entry.image not in gone:
                gone.add(entry.image)
                leftovers.append(entry)
    removed += [e for e in leftovers if engine.image(e.image) is None]
    for entry in [e for e in chosen if e.kind == "pruned base"]:
        tag = base_tag_in(entry.tags)
        with locks.removable(engine_id, tag) as free:
            if not free:
                kept.append((entry, "a build is using it"))
                continue
            info = engine.image(tag)
            if info is None or info.id != entry.image or _users(info, _tagged(engine)):
                kept.append((entry, "changed while clearing: used by a tagged image"))
                continue
            try:
                engine.remove_image(tag)  # its name; the image goes with it when no other tag names it
                _remove_steps_on(engine, info)  # ...and no build step stands on it
            except ComposerError as error:
                kept.append((entry, error.message))
                continue
            removed.append(entry)
            on_line(f"removed {tag}")
    now_stored = engine.layers_bytes()
    if stored is not None and now_stored is not None:  # what the engine's layer store lost: each layer
        freed = max(stored - now_stored, 0)  # once (less what a build beside it wrote meanwhile)
    else:
        freed = freed_by(before, set(before) - set(engine.image_graph())) if before else -1
    from_builders = 0
    for builder in builders:  # before the engine's copies go: their records are known by the copies' digests
        entry, mine = builder_entry(builder, stages)
        idle = [r.id for r in mine if not r.in_use]
        if idle:
            count, freed = builder.prune(idle)
            from_builders += freed
            removed.append(entry)
            on_line(f"removed {count} of {len(mine)} records of the composer's steps from {entry.image}")
        if entry.held:
            kept.append((entry, entry.held))
    copies = 0
    with locks.removable_host(engine_id, records.CACHE_LOCK) as free:  # no build is handing images to BuildKit
        if free:
            copies = oci_layout.remove(engine)
            if copies:
                on_line(f"removed BuildKit's copies of this engine's images ({human_size(copies)}: made again when needed)")
    return Cleared(tuple(removed), tuple(kept), containers, freed, copies, from_builders)


def _built_on_a_base(info) -> bool:
    """A stage, a run's image or a composed image: it inherits a base's label, and is none of the base."""
    return any(k in info.labels for k in (STAGE_LABEL, PLAN_STAGE_LABEL, RUN_LABEL, BACKENDS_LABEL))


def _steps_of(info, bases) -> bool:
    """Whether the untagged `info` is build steps on one of the tagged `bases`: what a composition
    writes first on its base (its ENV, ENTRYPOINT, ARG: no layer), which the build cache keeps."""
    return any(info.labels.get(BASE_LABEL) == base.labels.get(BASE_LABEL) and tuple(info.layers) == tuple(base.layers)
               for base in bases)


def _remove_steps_on(engine, base) -> None:
    """The build steps that kept a pruned base after its tag went (the engine untags an image others
    stand on): removed with prune, so the base goes with them (a `cache clear` freed 0 B before)."""
    if engine.image(base.id) is None:
        return
    for image in engine.images_labelled(f"{BASE_LABEL}={base.labels.get(BASE_LABEL, '')}", untagged=True):
        step = engine.image(image)
        if step is not None and step.id != base.id and _steps_of(step, [base]) and not _built_on_a_base(step):
            _remove_untagged(engine, image, prune=True)


def _remove_untagged(engine, image: str, *, prune: bool = False) -> bool:
    """Whether `image` went (a parent of another leftover goes on a later pass, once that one did).
    With `prune`, the unlabelled parents nothing else stands on go with it (the engine keeps the rest)."""
    info = engine.image(image)
    if info is None or info.tags:
        return False
    try:
        engine.remove_image(image, prune=prune)
        return True
    except ComposerError:
        return False  # a parent of another leftover, or in use


def _remove_containers(engine, run: str) -> int:
    count = 0
    for container in engine.containers_labelled(f"{RUN_LABEL}={run}"):
        try:
            engine.remove_container(container)
            count += 1
        except ComposerError:
            pass
    return count


def remove_run(engine, run: str) -> tuple[int, int]:
    """Remove what `run` left on the engine: its containers, its untagged images (run-labelled,
    leaves first) and its stage images. (images, containers) removed."""
    containers = _remove_containers(engine, run)
    images = remove_stages(engine, lambda owner: owner == run)
    removed = 0
    before: list[str] | None = None
    for _ in range(256):  # leaves first, one at a time (prune off): a parent goes on a later pass, once
        # nothing is built on it; the unlabelled steps below the run's (shared build cache) stay
        left = [image for image in engine.images_labelled(f"{RUN_LABEL}={run}", untagged=True)]
        if not left or left == before:  # nothing left, or nothing more can go (in use)
            break
        removed += sum(_remove_untagged(engine, image) for image in left)
        before = left
    return images + removed, containers


def remove_dead_runs(engine, on_line: LineSink = quiet) -> int:
    """Remove what runs recorded on this host for this engine left when their process died (an
    engine restart or a killed build): their images, containers and temporary folders, and their
    records; the containers removed."""
    engine_id = engine.identity()
    containers = 0
    for record in locks.run_records():
        if record.engine != engine_id or record.alive:
            continue
        try:
            images, removed = remove_run(engine, record.run)
            records.release(engine, record.run)  # its hold: the image goes with it if nothing else names it
        except ComposerError as error:
            on_line(f"note: cannot remove what run {record.run} left: {error.message}")
            continue
        containers += removed
        folders = locks.remove_folders(record)
        on_line(f"removed what run {record.run} left (its process {record.pid} ended): "
                f"{images} images, {removed} containers" + (f", {len(folders)} temporary folder{'s' if len(folders) != 1 else ''}" if folders else ""))
        locks.forget(record.run)
    return containers
