"""Layers the composer writes itself: the same files give the same bytes, on any machine.

A layer is a tar of a prepared tree, written here from the tree's entries as the engine hands
them out (its archive of a stage's folder, or files of the build context), in one canonical form:
entries sorted by path, every time clamped to the composition's epoch (SOURCE_DATE_EPOCH, or a
time fixed by the inputs), owners as numbers with no user or group names (the engine would look
those up in this machine's /etc/passwd), no access or change times, PAX records only for long
names and extended attributes. So a backend's folder is one diff ID wherever it sits, and two
builds of the same inputs give the same layers: BuildKit's rewrite-timestamp, done by the composer
for the classic builder and Podman alike.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from copy import copy as shallow_copy
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterable, Iterator, Mapping

from composer.engine.archives import ChunkReader
from composer.resolve.plan_types import Copy

TAR_FORMAT = tarfile.PAX_FORMAT  # ustar headers; PAX records only where ustar cannot hold a value
KEPT_PAX = ("SCHILY.xattr.",)  # extended attributes (file capabilities) stay with their files
BLOCK = 1 << 20


@dataclass(frozen=True)
class LayerFile:
    """A canonical layer on this machine's disk: its uncompressed tar and that tar's digest."""

    path: Path
    diff_id: str  # sha256:<hex> of the tar
    size: int  # bytes of the tar
    content_bytes: int  # bytes of the files in it (what a size report counts)
    description: str  # what it holds, as the image's history says it


@dataclass(frozen=True)
class Entry:
    """A tar member to write, with where its data lives (a spool file and offset, or bytes)."""

    info: tarfile.TarInfo
    spool: Path | None = None
    offset: int = 0
    data: bytes | None = None


def clamp(mtime: float, epoch: int) -> int:
    """A file's time in the layer: its own, but never after the epoch."""
    return min(int(mtime), epoch)


def header(name: str, source: tarfile.TarInfo, epoch: int, owner: tuple[int, int] | None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = source.type
    info.mode = stat.S_IMODE(source.mode) | (source.mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX))
    info.uid, info.gid = owner if owner is not None else (source.uid, source.gid)
    info.uname = info.gname = ""
    info.mtime = clamp(source.mtime, epoch)
    info.size = source.size if source.isreg() else 0
    info.linkname = source.linkname
    info.devmajor, info.devminor = source.devmajor, source.devminor
    info.pax_headers = {k: v for k, v in source.pax_headers.items() if k.startswith(KEPT_PAX)}
    return info


def _folder(name: str, epoch: int, owner: tuple[int, int]) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.uid, info.gid = owner
    info.uname = info.gname = ""
    info.mtime = epoch
    return info


def place(member: str, copy: Copy) -> str | None:
    """Where the archive member `member` goes in the layer (a path without a leading /), or None
    when it is not part of `copy` (the folder entry itself of a contents copy)."""
    source = PurePosixPath(copy.source.strip("/")).name or copy.source.strip("/")
    parts = PurePosixPath(member.rstrip("/")).parts
    if not parts or parts[0] != source:
        return None
    rest = parts[1:]
    if copy.contents:
        if not rest:
            return None  # the source folder itself: its contents go to dest, the folder does not
        target = PurePosixPath(copy.dest.strip("/"), *rest)
    else:
        target = PurePosixPath(copy.dest.strip("/"), *rest)
    return str(target) if str(target) != "." else None


def spool_archive(stream: Iterable[bytes], folder: Path) -> Path:
    """The engine's archive, written to a file of `folder` (entries are read back in sorted order)."""
    fd, name = tempfile.mkstemp(dir=folder, prefix="archive-", suffix=".tar")
    with os.fdopen(fd, "wb") as out:
        for chunk in stream:
            out.write(chunk)
    return Path(name)


def archive_entries(archive: Path, copy: Copy, epoch: int, owner: tuple[int, int] | None,
                    owners: Mapping[str, tuple[int, int]] | None = None) -> Iterator[Entry]:
    """The entries `copy` takes from a spooled archive, renamed to their place in the layer. A hard
    link's target is renamed the same way (the archive names it by its own path). `owners`: the
    owners of entries by their place, where the archive lost them (read_owners)."""
    with tarfile.open(archive, "r:") as tar:
        for member in tar:
            target = place(member.name, copy)
            if target is None:
                continue
            info = header(target, member, epoch, owner if owner is not None else (owners or {}).get(target))
            if member.islnk():
                linked = place(member.linkname, copy)
                if linked is None:
                    continue  # a link to a file outside the tree: the engine would not hand that out
                info.linkname = linked
            yield Entry(info, archive, member.offset_data if member.isreg() else 0)


def read_owners(stream: Iterable[bytes]) -> dict[str, tuple[int, int]]:
    """A list of owners ("uid:gid path", NUL-separated; system.sh writes one) from an engine's
    archive of it: {path: (uid, gid)}."""
    with tarfile.open(fileobj=io.BufferedReader(ChunkReader(iter(stream))), mode="r|") as tar:
        member = next((m for m in tar if m.isreg()), None)
        data = tar.extractfile(member).read() if member is not None else b""
    owners = {}
    for record in data.decode().split("\0"):
        if record:
            ids, _, path = record.partition(" ")
            uid, _, gid = ids.partition(":")
            owners[path.strip("/")] = (int(uid), int(gid))
    return owners


def host_entries(root: Path, dest: str, epoch: int, owner: tuple[int, int] | None) -> Iterator[Entry]:
    """The entries of a file or folder of this machine (the build context) put at `dest`: what the
    engine's COPY of it does, with owners as given (root's when None, as COPY without --chown)."""
    owner = owner if owner is not None else (0, 0)
    base = PurePosixPath(dest.strip("/"))
    paths = [root] if root.is_file() or root.is_symlink() else [root, *sorted(root.rglob("*"))]
    for path in paths:
        relative = path.relative_to(root) if path != root else PurePosixPath()
        name = str(base / relative.as_posix()) if str(relative) != "." else str(base)
        info = tarfile.TarInfo(name)
        st = path.lstat()
        info.mode = stat.S_IMODE(st.st_mode)
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        info.mtime = clamp(st.st_mtime, epoch)
        if path.is_symlink():
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
            yield Entry(info)
        elif path.is_dir():
            info.type = tarfile.DIRTYPE
            yield Entry(info)
        else:
            info.type, info.size = tarfile.REGTYPE, st.st_size
            yield Entry(info, spool=path, offset=0)


def parent_folders(dest: str, inside: str, epoch: int, owner: tuple[int, int]) -> list[Entry]:
    """The folders between `inside` (exclusive) and `dest` (exclusive): the composition's own
    folders under the Triton tree (backends/, caches/, ...), owned as the tree is."""
    inside_path = PurePosixPath(inside.strip("/"))
    entries = []
    for folder in reversed(PurePosixPath(dest.strip("/")).parents):
        if folder == inside_path or inside_path not in folder.parents:
            continue
        entries.append(Entry(_folder(str(folder), epoch, owner)))
    return entries


def write_layer(entries: Iterable[Entry], out: Path, description: str) -> LayerFile:
    """Write `entries` as one canonical layer at `out`: sorted by path, one entry per path (a
    later one replaces an earlier, as the engine's copy does)."""
    chosen: dict[str, Entry] = {}
    for entry in entries:
        chosen[entry.info.name] = entry
    _links_after_their_file(chosen)
    digest = hashlib.sha256()
    content = 0
    with open(out, "wb") as raw:
        hashing = _Hashing(raw, digest)
        with tarfile.open(fileobj=hashing, mode="w|", format=TAR_FORMAT, bufsize=BLOCK) as tar:  # same bytes, fewer writes
            tar.copybufsize = BLOCK
            for name in sorted(chosen):
                entry = chosen[name]
                if entry.info.isreg():
                    content += entry.info.size
                    tar.addfile(entry.info, _data(entry))
                else:
                    tar.addfile(entry.info)
    size = out.stat().st_size
    return LayerFile(out, "sha256:" + digest.hexdigest(), size, content, description)


def _links_after_their_file(chosen: dict[str, Entry]) -> None:
    """Hard links named so that each group's file comes first in path order: the first path of a
    group holds the data, the others link to it, whichever of them the archive gave the data to (a
    link written before its file cannot be unpacked, and the choice is then the paths', not the
    engine's)."""
    groups: dict[str, list[str]] = {}
    for name, entry in chosen.items():
        if entry.info.islnk() and entry.info.linkname in chosen and chosen[entry.info.linkname].info.isreg():
            groups.setdefault(entry.info.linkname, [entry.info.linkname]).append(name)
    for target, names in groups.items():
        first = min(names)
        if first == target:
            continue
        holder = chosen[target]
        info = shallow_copy(holder.info)
        info.name = first
        chosen[first] = Entry(info, holder.spool, holder.offset, holder.data)
        for name in names:
            if name != first:
                link = shallow_copy(chosen[first].info)
                link.name, link.type, link.size, link.linkname = name, tarfile.LNKTYPE, 0, first
                link.pax_headers = dict(holder.info.pax_headers)
                chosen[name] = Entry(link)


def _data(entry: Entry) -> BinaryIO:
    if entry.data is not None:
        return io.BytesIO(entry.data)
    handle = open(entry.spool, "rb")  # closed by _Section
    handle.seek(entry.offset)
    return _Section(handle, entry.info.size)


class _Section(io.RawIOBase):
    """`size` bytes of an open file from where it stands (a member's data in a spooled archive)."""

    def __init__(self, handle: BinaryIO, size: int):
        self.handle, self.left = handle, size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            self.handle.close()
            return b""
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.handle.read(n)
        self.left -= len(data)
        if self.left <= 0 or not data:
            self.handle.close()
        return data


class _Hashing(io.RawIOBase):
    """A file that hashes what is written to it (the layer's diff ID as it is written)."""

    def __init__(self, raw: BinaryIO, digest):
        self.raw, self.digest = raw, digest

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.digest.update(data)
        self.raw.write(data)
        return len(data)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(BLOCK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def remove_quietly(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
