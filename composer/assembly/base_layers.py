"""A pruned base's layers as the composer writes them: one canonical layer per family.

The builder runs the steps that decide and split the base (pruned-base/Dockerfile) up to its split
stage: the pruned tree, with each family's list of files beside it (/composer-layers/NAME.list,
from layers.py). The composer reads that tree once and writes each family as a layer of its own
(composer.assembly.canonical): its listed files, the folders that hold them (every folder in the
first, the distribution's core) and its list under /usr/share/triton-composer/pruned-base/. Docker's
classic builder, BuildKit and Podman each write a stage of their own way (other headers, other
order); here the same files give the same bytes, whichever builder ran the steps, and the base it
loads has the same layers and id everywhere. One tree read, not one stage a family: a family's
stage was a container and a commit each (14 steps, about 1.5 s each, on every making).

The tree is read through a container the engine creates and never starts, with the files' owners
(Engine.export_tree: Podman's export, not its archive), which adds the points it would mount onto
(/.dockerenv, /etc/hosts, /proc..., Podman's device nodes): those are left out, as empty files,
folders and devices no image needs (every runtime makes them when it runs a container). Folders take time 0
(the decide step gives every folder of the base that time; the engine's container would give the
ones it touched the time of the read). A file no list names (what the engine mounts over in a
step, when the min image has it) goes to the core layer.
"""

from __future__ import annotations

import io
import posixpath
import shutil
import tarfile
from pathlib import Path
from typing import BinaryIO, Iterable, Mapping, Sequence

from composer.assembly.assemble import canonical_json, load, rfc3339
from composer.assembly.canonical import Entry, LayerFile, header, write_layer
from composer.core.errors import BuildFailed
from composer.core.progress import LineSink, quiet
from composer.engine.archives import ChunkReader
from composer.engine.interface import Engine
from composer.resolve.plan_types import BASE_LABEL, STAGE_LABEL, LayerSlot

NEVER = 8 ** 11 - 1  # the largest time a tar header holds: the min image's own times are kept
# What an engine adds to a container for its mounts, when the image lacks it (Docker's init layer,
# Podman's): empty files, empty folders, and /etc/mtab as a link to /proc/mounts.
MOUNT_FILES = frozenset({".dockerenv", "run/.containerenv", "etc/hosts", "etc/hostname", "etc/resolv.conf",
                         "dev/console"})
MOUNT_FOLDERS = frozenset({"proc", "sys", "dev/pts", "dev/shm", "dev"})  # when they hold nothing else
WORK = "composer-layers"  # the split stage's lists (layers.py's) and keep_layer.sh: in no layer
LISTING = "composer-files.tsv"  # the pruned stage's list of the base's files (layers.py's input): in no layer
MARKS = "usr/share/triton-composer/pruned-base"  # each layer's list, so a layer says what it holds (never empty)
REPORT = "layers.json"  # layers.py's report, beside the last layer's list (the pruning report reads it)
CHUNK = 1 << 20


def split_label(run: str) -> str:
    """The label of the split stage's last step (pruned-base.Dockerfile.j2), so a builder that keeps
    no stages (BuildKit) loads it and the composer finds it."""
    return f"{STAGE_LABEL}=split {run}"


def _name(raw: str) -> str:
    name = raw.strip("/")
    while name.startswith("./"):
        name = name[2:]
    return "" if name == "." else name


def _mount_file(name: str, member: tarfile.TarInfo) -> bool:
    if name in MOUNT_FILES:
        return member.isreg() and member.size == 0
    return name == "etc/mtab" and member.issym() and member.linkname == "/proc/mounts"


def _runtime_device(name: str, member: tarfile.TarInfo) -> bool:
    """What a runtime makes in /dev of a container (Podman's export holds its device nodes and links):
    every runtime mounts its own there, no image needs one."""
    return name.startswith("dev/") and not (member.isdir() or member.isreg())


def read_lists(archive: Iterable[bytes], slots: Sequence[LayerSlot]) -> tuple[dict[str, int], dict[str, bytes]]:
    """From the engine's archive of the split stage's /composer-layers: which layer each listed file
    goes to (path -> slot index), and the marks each layer carries (mark path -> content)."""
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BufferedReader(ChunkReader(iter(archive)), CHUNK), mode="r|") as tar:
        for member in tar:
            if member.isreg():
                found[posixpath.basename(_name(member.name))] = tar.extractfile(member).read()
    where: dict[str, int] = {}
    marks: dict[str, bytes] = {}
    for index, slot in enumerate(slots):
        listed = found.get(f"{slot.name}.list")
        if listed is None:
            raise BuildFailed(f"making the pruned base failed: its split stage holds no list {WORK}/{slot.name}.list")
        for path in listed.decode(errors="surrogateescape").splitlines():
            if path:
                where[path] = index
        marks[f"{MARKS}/{slot.name}.list"] = listed
    if REPORT not in found:
        raise BuildFailed(f"making the pruned base failed: its split stage holds no {WORK}/{REPORT}")
    marks[f"{MARKS}/{REPORT}"] = found[REPORT]
    return where, marks


class _Family:
    """One layer's files as the tree streams in: their headers, and their data in a spool of its own."""

    def __init__(self, spool: Path):
        self.spool = spool
        self.out: BinaryIO = open(spool, "wb")
        self.members: dict[str, tuple[tarfile.TarInfo, int]] = {}  # name -> (header, offset of its data)

    def add(self, name: str, info: tarfile.TarInfo, data: BinaryIO | None) -> None:
        offset = self.out.tell()
        if data is not None:
            shutil.copyfileobj(data, self.out, CHUNK)
        self.members[name] = (info, offset)


def split_tree(archive: Iterable[bytes], where: Mapping[str, int], count: int, folder: Path,
               core: int = 0) -> list[_Family]:
    """Stream the split stage's tree into one spool per layer: each listed file to its layer's, a
    file no list names to the core's (`core`: what the engine mounts over in a step, where the min
    image has it). A hard link whose file is in another layer is that file's data again (a layer must
    hold the data it links to). The engine's mount points are left out, as are the stage's own lists."""
    families = [_Family(folder / f"tree-{index:02d}.spool") for index in range(count)]
    placed: dict[str, tuple[int, tarfile.TarInfo]] = {}  # every regular file so far: its layer and header
    try:
        with tarfile.open(fileobj=io.BufferedReader(ChunkReader(iter(archive)), CHUNK), mode="r|") as tar:
            for member in tar:
                name = _name(member.name)
                if not name or name in (WORK, LISTING) or name.startswith(WORK + "/") or _mount_file(name, member) \
                        or _runtime_device(name, member):
                    continue
                if member.isdir():
                    families[core].add(name, member, None)  # the core holds every folder
                    continue
                index = where.get(name, core)
                family = families[index]
                if member.islnk():
                    target = _name(member.linkname)
                    held = placed.get(target)
                    if held is not None and held[0] != index:  # its file is another layer's: its data here
                        source = families[held[0]]
                        source.out.flush()
                        info, offset = source.members[target]
                        with open(source.spool, "rb") as data:
                            data.seek(offset)
                            regular = header(name, info, NEVER, None)
                            family.add(name, regular, _Bounded(data, info.size))
                            placed[name] = (index, regular)
                        continue
                    member.linkname = target
                    family.add(name, member, None)
                    continue
                family.add(name, member, tar.extractfile(member) if member.isreg() else None)
                if member.isreg():
                    placed[name] = (index, member)
    finally:
        for family in families:
            family.out.close()
    return families


class _Bounded(io.RawIOBase):
    """`size` bytes of an open file from where it stands."""

    def __init__(self, handle: BinaryIO, size: int):
        self.handle, self.left = handle, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        if n <= 0:
            return 0
        got = self.handle.readinto(memoryview(buffer)[:n])
        self.left -= got
        return got


def layer_entries(families: Sequence[_Family], index: int, marks: Mapping[str, bytes], core: int = 0) -> list[Entry]:
    """Layer `index` as entries: its files, the folders that hold them (every folder in the core)
    at time 0, and its marks (its list; the report beside the last) owned by root at time 0."""
    family = families[index]
    folders = families[core].members  # the tree's folders (the core holds them all)
    entries: list[Entry] = []
    names: list[str] = []
    for name, (member, offset) in family.members.items():
        info = header(name, member, NEVER, None)
        if member.isdir():
            info.mtime = 0
        if member.islnk():
            info.linkname = member.linkname
        entries.append(Entry(info, family.spool, offset if member.isreg() else 0))
        names.append(name)
    for path, content in marks.items():
        info = tarfile.TarInfo(path)
        info.size, info.mode, info.mtime, info.uname, info.gname = len(content), 0o644, 0, "", ""
        entries.append(Entry(info, data=content))
        names.append(path)
    if index != core:
        holding = {parent for name in names for parent in _parents(name)}
    else:
        holding = {parent for path in marks for parent in _parents(path)}
    for path in sorted(holding):
        if index == core and path in family.members:
            continue  # a folder of the tree: the core has it already
        member = folders.get(path, (None, 0))[0]
        if member is not None and member.isdir():
            info = header(path, member, NEVER, None)
        else:  # a folder of the marks the tree lacks (usr/share/triton-composer...): root's
            info = tarfile.TarInfo(path)
            info.type, info.mode, info.uname, info.gname = tarfile.DIRTYPE, 0o755, "", ""
        info.mtime = 0
        entries.append(Entry(info))
    return _without_empty_mount_folders(entries)


def _parents(name: str) -> Iterable[str]:
    parent = posixpath.dirname(name)
    while parent:
        yield parent
        parent = posixpath.dirname(parent)


def _without_empty_mount_folders(entries: list[Entry]) -> list[Entry]:
    """The engine's mount folders (proc, sys, dev...) left out where they hold nothing else."""
    names = {entry.info.name for entry in entries}
    dropped: set[str] = set()
    for folder in sorted(MOUNT_FOLDERS, key=lambda f: -f.count("/")):  # deepest first: dev/pts before dev
        if folder in names and not any(n.startswith(folder + "/") for n in names if n not in dropped):
            dropped.add(folder)
    return [entry for entry in entries if entry.info.name not in dropped]


def base_config(layers: Sequence[LayerFile], slots: Sequence[str], labels: Mapping[str, str], arch: Mapping) -> bytes:
    """The base's configuration: nothing of a container (the composition restates the min image's
    environment and entry point), a history line a layer, every time the epoch 0."""
    config = {
        "architecture": arch.get("architecture") or "amd64",
        "os": arch.get("os") or "linux",
        **({"variant": arch["variant"]} if arch.get("variant") else {}),
        "created": rfc3339(0),
        "config": {"Labels": dict(labels)},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": rfc3339(0), "created_by": f"triton-composer: pruned base layer {i + 1} of "
                     f"{len(layers)}: {slot}"} for i, slot in enumerate(slots)],
    }
    return canonical_json(config)


def write_base(engine: Engine, slots: Sequence[LayerSlot], run: str, key: str, tag: str, folder: Path, *,
               labels: Mapping[str, str] | None = None, on_line: LineSink = quiet) -> str:
    """Write the base's layers from the split stage `run` built, load the base tagged `tag` and
    labelled with `key`; its id. Each family's spool goes once its layer is written, each layer's
    file once it is loaded (composer.assembly.assemble.load): the disk holds the tree about once."""
    found = engine.labelled_roots(split_label(run))
    if not found:
        raise BuildFailed(f"making the pruned base failed: the build left no stage split (labelled {split_label(run)})")
    stage = found[0]
    arch = engine.image_config(stage)
    core = next((i for i, slot in enumerate(slots) if slot.takes == "distribution"), 0)
    where, marks = read_lists(engine.export_path(stage, f"/{WORK}", labels=labels), slots)
    on_line(f"pruned base: reading its tree ({len(where)} files in {len(slots)} layers)")
    families: list[_Family] = []
    layers: list[LayerFile] = []
    try:
        families = split_tree(engine.export_tree(stage, labels=labels), where, len(slots), folder, core)
        last = len(slots) - 1
        for index, slot in enumerate(slots):
            on_line(f"pruned base: writing layer {index + 1} of {len(slots)}: {slot.name}")
            own = {path: content for path, content in marks.items()
                   if path == f"{MARKS}/{slot.name}.list" or (index == last and path == f"{MARKS}/{REPORT}")}
            layers.append(write_layer(layer_entries(families, index, own, core), folder / f"base-{index:02d}.tar",
                                      f"pruned base: {slot.name}"))
            if index != core:
                families[index].spool.unlink(missing_ok=True)
        families[core].spool.unlink(missing_ok=True)
        config = base_config(layers, [slot.name for slot in slots], {**dict(labels or {}), BASE_LABEL: key}, arch)
        return load(engine, config, (), tuple(layers), f"the pruned base ({tag})", tag=tag, run=run, drop_loaded=True)
    finally:
        for family in families:
            family.spool.unlink(missing_ok=True)
        for layer in layers:
            layer.path.unlink(missing_ok=True)
