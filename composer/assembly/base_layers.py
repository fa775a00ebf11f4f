"""A pruned base's layers as the composer writes them: one canonical layer per family stage.

The builder runs the steps that decide and split the base (pruned-base/Dockerfile); each family's
stage then holds only that family's files. Docker's classic builder, BuildKit and Podman each
write a stage copied `FROM scratch` as a tar of their own (other headers, other order), so a base
made on one builder had other layers than on another, and every image composed on it another
id. Here the composer reads each family stage's tree from the engine and writes it as a canonical
layer (composer.assembly.canonical): the same files give the same bytes, whichever builder ran
the steps, and the base it loads has the same layers and id everywhere.

A stage's tree is read through a container the engine creates and never starts, which adds the
points it would mount onto (/.dockerenv, /etc/hosts, /proc...): those are left out, as empty
files and folders no image needs (every runtime makes them when it runs a container). Folders
take time 0 (the decide step gives every folder of the base that time; the engine's container
would give the ones it touched the time of the read).
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from composer.assembly.assemble import canonical_json, load, rfc3339
from composer.assembly.canonical import Entry, LayerFile, header, spool_archive, write_layer
from composer.core.errors import BuildFailed
from composer.core.progress import LineSink, quiet
from composer.engine.interface import Engine
from composer.resolve.plan_types import BASE_LABEL, STAGE_LABEL

NEVER = 8 ** 11 - 1  # the largest time a tar header holds: the min image's own times are kept
# What an engine adds to a container for its mounts, when the image lacks it (Docker's init layer,
# Podman's): empty files, empty folders, and /etc/mtab as a link to /proc/mounts.
MOUNT_FILES = frozenset({".dockerenv", "run/.containerenv", "etc/hosts", "etc/hostname", "etc/resolv.conf",
                         "dev/console"})
MOUNT_FOLDERS = frozenset({"proc", "sys", "dev/pts", "dev/shm", "dev"})  # when they hold nothing else


def stage_label(slot: str, run: str) -> str:
    """The label of a family stage's last step (pruned-base.Dockerfile.j2), so a builder that keeps
    no stages (BuildKit) loads it and the composer finds it."""
    return f"{STAGE_LABEL}=layer-{slot} {run}"


def tree_entries(archive: Path) -> Iterator[Entry]:
    """The entries of an engine's archive of a container's `/`, as the image holds them: names
    without a leading / or ./, the engine's mount points left out, folders at time 0."""
    with tarfile.open(archive, "r:") as tar:
        members = {name: member for member in tar if (name := _name(member.name))}
    dropped = {name for name, member in members.items() if _mount_file(name, member)}
    for folder in sorted(MOUNT_FOLDERS, key=lambda f: -f.count("/")):  # deepest first: dev/pts before dev
        member = members.get(folder)
        if member is not None and member.isdir() and not any(
                name.startswith(folder + "/") for name in members if name not in dropped):
            dropped.add(folder)
    for name, member in members.items():
        if name in dropped:
            continue
        info = header(name, member, NEVER, None)
        if member.isdir():
            info.mtime = 0
        if member.islnk():
            info.linkname = _name(member.linkname)
        yield Entry(info, archive, member.offset_data if member.isreg() else 0)


def _name(raw: str) -> str:
    name = raw.strip("/")
    while name.startswith("./"):
        name = name[2:]
    return "" if name == "." else name


def _mount_file(name: str, member: tarfile.TarInfo) -> bool:
    if name in MOUNT_FILES:
        return member.isreg() and member.size == 0
    return name == "etc/mtab" and member.issym() and member.linkname == "/proc/mounts"


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


def write_base(engine: Engine, slots: Sequence[str], run: str, key: str, tag: str, folder: Path, *,
               labels: Mapping[str, str] | None = None, on_line: LineSink = quiet) -> str:
    """Write the base's layers from its family stages (built by `run`), load the base tagged `tag`
    and labelled with `key`; its id. The layers' files go as each archive of them is loaded
    (composer.assembly.assemble.load)."""
    layers: list[LayerFile] = []
    arch: Mapping = {}
    try:
        for index, slot in enumerate(slots):
            found = engine.labelled_roots(stage_label(slot, run))
            if not found:
                raise BuildFailed(f"making the pruned base failed: the build left no stage layer-{slot} "
                                  f"(labelled {stage_label(slot, run)})")
            on_line(f"pruned base: writing layer {index + 1} of {len(slots)}: {slot}")
            if not arch:
                arch = engine.image_config(found[0])
            spool = spool_archive(engine.export_path(found[0], "/", labels=labels), folder)
            try:
                layers.append(write_layer(tree_entries(spool), folder / f"base-{index:02d}.tar",
                                          f"pruned base: {slot}"))
            finally:
                spool.unlink(missing_ok=True)
        config = base_config(layers, slots, {**dict(labels or {}), BASE_LABEL: key}, arch)
        return load(engine, config, (), tuple(layers), f"the pruned base ({tag})", tag=tag, run=run, drop_loaded=True)
    finally:
        for layer in layers:
            layer.path.unlink(missing_ok=True)
