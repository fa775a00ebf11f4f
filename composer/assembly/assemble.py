"""The composed image as the composer writes it: the base's layers as they are, then one canonical
layer per part of the composition (composer.assembly.canonical) and a configuration whose times come
from the composition's epoch, never the clock. Its id is the digest of that configuration, so the
same inputs give the same image id on any engine, and the same pushed digest from any machine.

The engine builds the rendered Dockerfile as before (its stages run the steps: collect, pip,
environments, the loader cache, the proof); the composer then reads each part's files from the
stage or image that holds them (the engine's archive of that path, or the build context) and
loads the image it wrote. The engine's own last image stays as build cache only.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from composer import __version__
from composer.assembly.canonical import (
    Entry, LayerFile, archive_entries, host_entries, parent_folders, read_owners, spool_archive, write_layer,
)
from composer.assembly import layer_reuse, records
from composer.core.errors import BuildFailed, ComposerError
from composer.core.progress import LineSink, quiet
from composer.engine.interface import Engine, ImageInfo
from composer.engine.archives import LoadArchive, copy_saved_layers
from composer.resolve.plan_types import (
    BASE_LABEL,
    FROM_CONTEXT,
    FROM_FULL,
    ROOT,
    RUN_LABEL,
    STAGE_LABEL,
    CompositionPlan,
    LayerPart,
)

# The runtime configuration an image restates (the rest of the engine's Config is a container's).
RUNTIME_KEYS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
                "StopSignal", "Shell", "Healthcheck", "OnBuild")
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"


def rfc3339(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_json(value) -> bytes:
    """JSON as the composer writes every document it digests: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def owner_of(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    uid, _, gid = text.partition(":")
    return int(uid), int(gid or uid)


@dataclass(frozen=True)
class Assembled:
    """A composed image the composer wrote: its configuration, the base's layers and its own."""

    image_id: str  # sha256:<hex> of `config`
    config: bytes
    base: str  # the base image's id
    base_layers: tuple[str, ...]  # the base's diff ids, bottom first
    layers: tuple[LayerFile, ...]  # the composition's own, in order
    parts: tuple[LayerPart, ...]  # what each of `layers` holds (the SBOM's last)

    @property
    def diff_ids(self) -> tuple[str, ...]:
        return (*self.base_layers, *(layer.diff_id for layer in self.layers))


@dataclass(frozen=True)
class Sources:
    """Where the parts' files are read from: the images of the build's stages (by stage name), the
    base images and the build context on this machine."""

    stages: Mapping[str, str]  # stage name -> image id
    full: str  # the full image's id
    backend_images: Mapping[str, str]  # a foreign backend's stage name -> its image's id
    context: Path

    def image_of(self, source: str) -> str:
        if source == FROM_FULL:
            return self.full
        if source in self.backend_images:
            return self.backend_images[source]
        if source not in self.stages:
            raise BuildFailed(f"the build left no stage {source} to read from (labelled {STAGE_LABEL})")
        return self.stages[source]


def find_stages(engine: Engine, names: Iterable[str], key: str, base_layers: tuple[str, ...] = (),
                known: Mapping[str, str] | None = None) -> dict[str, str]:
    """The images of the build's stages the composer reads, by their label (the composition's key).
    Builds of the same key at once may each have made one: any serves (the same steps), the one on
    this build's base (`base_layers`) first where a stage stands on it (a base made again). `known`:
    the stages this build found already (each look-up lists every image the engine holds)."""
    found = {}
    for name in names:
        if known and name in known:
            found[name] = known[name]
            continue
        images = engine.labelled_roots(f"{STAGE_LABEL}={name} {key}")
        if not images:
            raise BuildFailed(f"the build left no image of its stage {name} (labelled {STAGE_LABEL}={name} {key})")
        on_base = [i for i in images if base_layers and tuple((engine.image(i) or _NONE).layers[:len(base_layers)])
                   == tuple(base_layers)]
        found[name] = (on_base or images)[0]
    return found


class _None:
    layers: tuple = ()


_NONE = _None()


def own_folders(parts: Iterable[LayerPart], epoch: int) -> dict[str, tarfile.TarInfo]:
    """The composition's own folders under the Triton tree (backends/, caches/, ...), as its parts
    declare them (owned as the part that first names one). A stage's archive restates them as its
    builder made them, which builders do not agree on (Docker's COPY --chown makes a missing parent
    root's, BuildKit's the new owner's): the parts' word stands, so every builder gives one layer."""
    folders: dict[str, tarfile.TarInfo] = {}
    for part in parts:
        for copy in part.copies:
            if not copy.contents and copy.dest.startswith(ROOT + "/"):
                for entry in parent_folders(copy.dest, ROOT, epoch, owner_of(part.owner) or (0, 0)):
                    folders.setdefault(entry.info.name, entry.info)
    return folders


def part_layer(engine: Engine, part: LayerPart, sources: Sources, epoch: int, folder: Path, index: int,
               labels: Mapping[str, str] | None = None,
               folders: Mapping[str, tarfile.TarInfo] | None = None) -> LayerFile:
    """One part's canonical layer, from where its files are (a stage, an image, the context); a
    folder of the composition's own (`folders`, own_folders) as the parts declare it."""
    owner = owner_of(part.owner)
    entries: list[Entry] = []
    spools: list[Path] = []
    owners = None  # where the engine's archive names every file root's, the part's own list says whose
    if part.owners and not engine.archives_keep_owners:
        owners = read_owners(engine.export_path(sources.image_of(part.source), part.owners, labels=labels))
    try:
        for copy in part.copies:
            if not copy.contents and copy.dest.startswith(ROOT + "/"):
                entries += parent_folders(copy.dest, ROOT, epoch, owner or (0, 0))
            if part.source == FROM_CONTEXT:
                entries += host_entries(sources.context / copy.source, copy.dest, epoch, owner)
                continue
            image = sources.image_of(part.source)
            spool = spool_archive(engine.export_path(image, copy.source.rstrip("/") or "/", labels=labels), folder)
            spools.append(spool)
            entries += [Entry(folders[e.info.name]) if folders and e.info.isdir() and e.info.name in folders else e
                        for e in archive_entries(spool, copy, epoch, owner, owners)]
        return write_layer(entries, folder / f"layer-{index:02d}.tar", part.description)
    finally:
        for spool in spools:
            spool.unlink(missing_ok=True)


def file_layer(path: str, content: bytes, epoch: int, folder: Path, name: str, description: str) -> LayerFile:
    """A layer of one file the composer made (the SBOM), owned by root."""
    info = tarfile.TarInfo(path.strip("/"))
    info.size, info.mode, info.mtime = len(content), 0o644, epoch
    info.uname = info.gname = ""
    return write_layer([Entry(info, data=content)], folder / name, description)


def runtime_config(config: Mapping, labels: Mapping[str, str]) -> dict:
    """The runtime configuration of the engine's image, as the composed image states it (labels
    added); nothing of the build container (hostname, the parent image's id)."""
    out = {}
    for key in RUNTIME_KEYS:
        value = config.get(key)
        if key == "Labels":  # the build's own mark is the engine's image's, not the composed image's
            value = {k: v for k, v in {**dict(value or {}), **dict(labels)}.items() if k not in (RUN_LABEL, STAGE_LABEL)}
        if value not in (None, "", [], {}):
            out[key] = value
    return out


def image_config(base: ImageInfo, built: Mapping, layers: tuple[LayerFile, ...], epoch: int,
                 labels: Mapping[str, str]) -> bytes:
    """The configuration of the composed image: times from the epoch, history one entry a layer (the
    base's named by its id: the same base gives the same history whatever it is called). A pruned
    base is named by the key of what it was made from, at the epoch: its layers are the same bytes
    wherever it is made, its id is not (the engine's builder stamps its configuration with the time
    it made it), and the composed image must not differ by which engine, or which run, made it."""
    count = len(base.layers)
    key = (base.labels or {}).get(BASE_LABEL)
    if key:
        name, created = f"pruned base {key[:16]}", rfc3339(epoch)
    else:
        name, created = f"base {base.id}", _normal_time(base.created or rfc3339(0))
    history = [{"created": created, "created_by": f"{name}: layer {i + 1} of {count}"} for i in range(count)]
    history += [{"created": rfc3339(epoch), "created_by": f"triton-composer {__version__}: {layer.description}"}
                for layer in layers]
    config = {
        "architecture": built.get("architecture") or "amd64",
        "os": built.get("os") or "linux",
        **({"variant": built["variant"]} if built.get("variant") else {}),
        "created": rfc3339(epoch),
        "config": runtime_config(built.get("config") or {}, labels),
        "rootfs": {"type": "layers", "diff_ids": [*base.layers, *(layer.diff_id for layer in layers)]},
        "history": history,
    }
    return canonical_json(config)


def _normal_time(text: str) -> str:
    """An RFC 3339 time to whole seconds in UTC (engines print fractions their own ways)."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").split(".")[0].rstrip("Z"))
    except ValueError:
        return text
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


LOAD_CHUNK = 1 << 30  # layer bytes sent in one load archive (the last layer of a chunk may pass it)


def load_chunks(layers: tuple[LayerFile, ...], limit: int, held: int = 0) -> list[int]:
    """Where the archives of one load end (indexes into `layers`, the last len(layers)): a new one
    starts when the layer bytes to send would pass `limit`. A layer the engine holds (no file, or one
    of the first `held`) costs nothing."""
    ends: list[int] = []
    sent = 0
    for index, layer in enumerate(layers):
        if index < held:
            continue
        size = layer.size if layer.path.exists() else 0
        if sent and sent + size > limit:
            ends.append(index)
            sent = 0
        sent += size
    return [*ends, len(layers)]


def prefix_config(config: bytes, count: int) -> bytes:
    """`config` cut to its first `count` layers (rootfs and the history lines that made them): the
    image a partial load registers on the way to the whole one."""
    document = json.loads(config)
    document["rootfs"]["diff_ids"] = document["rootfs"]["diff_ids"][:count]
    history, made = [], 0
    for line in document.get("history") or ():
        if not line.get("empty_layer"):
            if made == count:
                break
            made += 1
        history.append(line)
    document["history"] = history
    return canonical_json(document)


def load(engine: Engine, config: bytes, base_layers: tuple[str, ...], layers: tuple[LayerFile, ...],
         what: str, base_image: str | None = None, tag: str | None = None, *, run: str | None = None,
         drop_loaded: bool = False, held: int = 0) -> str:
    """Load the image into the engine: archives of its configuration and its own layers only (the
    engine holds the base's), streamed, never written whole to disk. Its id. An engine that loads
    only whole archives (Podman) gets the base's layers too, read from its own save of `base_image`.
    The archive names `tag` (the run's hold, composer.assembly.records): the image is tagged as it
    appears, so no other run's cleanup can take it before the run tags it.

    Docker unpacks a whole archive into its own temporary folder before it registers any layer, so
    one archive of a many-GB image is on its disk three times at once (the composer's layer files,
    that copy, the registered layers). On an engine that loads partial archives, `run`'s load goes
    in archives of about LOAD_CHUNK bytes each, every one an image of the layers so far, held by a
    tag of the run until the whole image holds its layers; with `drop_loaded` each layer's file goes
    once it is loaded (nothing else reads it: the pruned base's). The first `held` of `layers` the
    engine holds already (an image of the run's has them: assemble_files'): named, not sent."""
    held = held if engine.loads_partial_archives else 0
    ends = load_chunks(layers, LOAD_CHUNK, held) if engine.loads_partial_archives and run else [len(layers)]
    holds: list[str] = []
    start = held
    try:
        for number, end in enumerate(ends[:-1], start=1):
            holds.append(records.hold_tag(run or "", f"load{number}"))
            _load_archive(engine, prefix_config(config, len(base_layers) + end), base_layers, layers[:end], start,
                          what, base_image, holds[-1])
            if drop_loaded:
                for layer in layers[start:end]:
                    layer.path.unlink(missing_ok=True)
            start = end
        return _load_archive(engine, config, base_layers, layers, start, what, base_image, tag)
    finally:
        for hold in holds:
            records.drop_hold(engine, hold)


def _load_archive(engine: Engine, config: bytes, base_layers: tuple[str, ...], layers: tuple[LayerFile, ...],
                  send_from: int, what: str, base_image: str | None, tag: str | None) -> str:
    """Load one archive: `config`, the base's layers and `layers` named, the files of layers from
    `send_from` on sent (those before it the engine holds from this load's earlier archives)."""
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    reader, writer = os.pipe()
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with os.fdopen(writer, "wb", buffering=1 << 20) as out:
                archive = LoadArchive(out)
                archive.data(f"{image_id[7:]}.json", config)
                named = {diff_id: f"{diff_id[7:]}/layer.tar" for diff_id in base_layers}  # the engine has them
                if not engine.loads_partial_archives and base_layers:
                    named = copy_saved_layers(engine.save_stream(base_image or ""), archive, set(base_layers), "base-")
                    missing = [d for d in base_layers if d not in named]
                    if missing:
                        raise BuildFailed(f"cannot load {what}: the engine's save of the base lacks layer {missing[0]}")
                paths = [named[diff_id] for diff_id in base_layers]
                for index, layer in enumerate(layers):
                    name = f"{layer.diff_id[7:]}/layer.tar"
                    paths.append(name)
                    if engine.loads_partial_archives and (index < send_from or not layer.path.exists()):
                        continue  # held by the engine (loaded before, or layer_reuse): named, not sent
                    archive.file(name, layer.path)
                manifest = json.dumps([{"Config": f"{image_id[7:]}.json", "RepoTags": [tag] if tag else None, "Layers": paths}]).encode()
                archive.data("manifest.json", manifest)
                archive.end()
        except BaseException as exc:  # noqa: BLE001 (handed to the loading thread)
            failure.append(exc)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        with os.fdopen(reader, "rb") as source:
            engine.load_stream(source, what)
    except ComposerError:
        thread.join()
        if failure and isinstance(failure[0], ComposerError):
            raise failure[0] from None  # why the archive ended early, not the engine's word for it
        raise
    thread.join()
    if failure and isinstance(failure[0], ComposerError):
        raise failure[0]
    if failure and not isinstance(failure[0], BrokenPipeError):
        raise ComposerError(f"cannot load {what}: {failure[0]}")
    if engine.image(image_id) is None:
        raise BuildFailed(f"cannot load {what}: the engine holds no image {image_id[:19]} after loading it")
    return image_id


def sbom_part() -> LayerPart:
    """What the SBOM's layer (the last, an `extra` of assemble) holds, as a part."""
    return LayerPart("record", "SBOM", FROM_CONTEXT, ())


def _write_parts(engine: Engine, parts: list[LayerPart], start: int, total: int, below: list[LayerFile],
                 base: ImageInfo, sources: Sources, folder: Path, epoch: int, folders: Mapping[str, tarfile.TarInfo],
                 run_labels: Mapping[str, str] | None, on_line: LineSink, run: str | None,
                 reuse: bool) -> tuple[list[LayerFile], str | None]:
    """The layers of `parts` (layer `start` + 1 on, of `total`), on the base and the layers `below`
    them. With `reuse`, a layer the engine holds already (in the same chain) is not written
    (composer.assembly.layer_reuse): its file is then absent from `folder`, and the run's layers
    hold (its tag, returned) keeps an image holding it until the image loaded on it does."""
    layers: list[LayerFile] = []
    chains = layer_reuse.Chains.on(engine) if reuse else layer_reuse.Chains({})
    held: dict[int, LayerPart] = {}  # layers not written: the engine holds them (in the same chain)
    under = (*base.layers, *(layer.diff_id for layer in below))
    for offset, part in enumerate(parts):
        index = start + offset
        said = part.name if part.name.split()[0] == part.kind else f"{part.kind} {part.name}"  # not "server server core"
        key = layer_reuse.part_key(engine, part, None if part.source == FROM_CONTEXT else sources.image_of(part.source),
                                   epoch)  # recorded whatever the build: the next one may reuse it
        known = layer_reuse.recorded(key) if reuse else None
        if known and chains.holds((*under, *(layer.diff_id for layer in layers), known["diff_id"])):
            on_line(f"layer {index + 1} of {total}: {said}: the engine holds it already")
            layers.append(LayerFile(folder / f"held-{index:02d}.tar", known["diff_id"], known["size"],
                                    known["content_bytes"], part.description))
            held[offset] = part
            continue
        on_line(f"writing layer {index + 1} of {total}: {said}")
        layers.append(part_layer(engine, part, sources, epoch, folder, index, run_labels, folders))
        layer_reuse.save(key, layers[-1])
    layers_hold = None
    if held:  # hold an image that has them until the image loaded on them does, or write them after all
        last = max(held)
        layers_hold = records.hold_tag(run, "layers") if run else None
        if not chains.hold(engine, (*under, *(layer.diff_id for layer in layers[:last + 1])), layers_hold):
            for offset, part in held.items():
                on_line(f"writing layer {start + offset + 1} of {total}: {part.name} "
                        "(the image that held it was removed meanwhile)")
                layers[offset] = part_layer(engine, part, sources, epoch, folder, start + offset, run_labels, folders)
            layers_hold = None
    return layers, layers_hold


@dataclass(frozen=True)
class Files:
    """The base and the parts the system stage runs over (plan.layer_parts()'s first), as the
    composer wrote them and loaded them as an image of the run's own (held by `hold`): the engine's
    later stages stand on it (FROM ${COMPOSED_FILES}) and copy none of those files. Its layers are
    the composed image's first, loaded already."""

    image_id: str
    config: bytes
    layers: tuple[LayerFile, ...]
    hold: str | None


def files_config(base: ImageInfo, built: Mapping, layers: tuple[LayerFile, ...]) -> bytes:
    """The configuration of the base with the first parts: the base's runtime configuration as it
    is (a stage FROM it sees the environment, user and labels a stage FROM the base sees), its
    layers added; no time of the clock."""
    count = len(base.layers)
    config = {
        "architecture": built.get("architecture") or "amd64",
        "os": built.get("os") or "linux",
        **({"variant": built["variant"]} if built.get("variant") else {}),
        "created": rfc3339(0),
        "config": {key: value for key in RUNTIME_KEYS
                   if (value := (built.get("config") or {}).get(key)) not in (None, "", [], {})},
        "rootfs": {"type": "layers", "diff_ids": [*base.layers, *(layer.diff_id for layer in layers)]},
        "history": [{"created": rfc3339(0), "created_by": f"base {base.id}: layer {i + 1} of {count}"}
                    for i in range(count)]
        + [{"created": rfc3339(0), "created_by": f"triton-composer {__version__}: {layer.description}"}
           for layer in layers],
    }
    return canonical_json(config)


def assemble_files(engine: Engine, plan: CompositionPlan, base: ImageInfo, sources: Sources, folder: Path, *,
                   epoch: int, run_labels: Mapping[str, str] | None = None, on_line: LineSink = quiet,
                   run: str | None = None, reuse: bool = False) -> Files:
    """Write the first parts' layers (the same files, the same bytes as the composed image's, which
    then takes them as they are) and load them on `base` with its configuration, held by the run."""
    parts = plan.all_parts()
    first = list(plan.layer_parts()[0])
    layers, layers_hold = _write_parts(engine, first, 0, len(parts) + 1, [], base, sources, folder, epoch,
                                       own_folders(parts, epoch), run_labels, on_line, run, reuse)
    config = files_config(base, engine.image_config(base.id), tuple(layers))
    hold = records.hold_tag(run, records.FILES) if run else None
    try:
        image_id = load(engine, config, tuple(base.layers), tuple(layers), f"the base and the parts of {plan.tag}",
                        base.id, hold, run=run)
    finally:
        if layers_hold:
            records.drop_hold(engine, layers_hold)
    return Files(image_id, config, tuple(layers), hold)


def assemble(engine: Engine, plan: CompositionPlan, built: str, base: ImageInfo, sources: Sources, folder: Path,
             *, epoch: int, labels: Mapping[str, str], extra: Iterable[tuple[str, str, bytes]] = (),
             run_labels: Mapping[str, str] | None = None, on_line: LineSink = quiet, run: str | None = None,
             reuse: bool = False, files: Files | None = None) -> Assembled:
    """Write the composition's layers (and `extra` files: (path, description, content), one layer
    each, after them) on `base`, with the runtime configuration of the engine's image `built`
    (labels added), and load it. With `reuse`, a layer the engine holds already (in the same chain)
    is not written (composer.assembly.layer_reuse): its file is then absent from `folder`. With
    `files` (assemble_files'), its layers are the first, loaded already: named, not sent again."""
    parts, extra = list(plan.all_parts()), list(extra)
    written = list(files.layers) if files else []
    total = len(parts) + len(extra)
    layers, layers_hold = _write_parts(engine, parts[len(written):], len(written), total, written, base, sources,
                                       folder, epoch, own_folders(parts, epoch), run_labels, on_line, run, reuse)
    layers = written + layers
    for index, (path, description, content) in enumerate(extra, start=len(parts)):
        on_line(f"writing layer {index + 1} of {total}: {description}")
        layers.append(file_layer(path, content, epoch, folder, f"layer-{index:02d}.tar", description))
        parts.append(LayerPart("record", description, FROM_CONTEXT, ()) if description != "SBOM" else sbom_part())
    config = image_config(base, engine.image_config(built), tuple(layers), epoch, labels)
    try:
        image_id = load(engine, config, tuple(base.layers), tuple(layers), f"the composed image ({plan.tag})", base.id,
                        records.hold_tag(run) if run else None, run=run, held=len(written))
    finally:
        if layers_hold:
            records.drop_hold(engine, layers_hold)
    return Assembled(image_id, config, base.id, tuple(base.layers), tuple(layers), tuple(parts))
