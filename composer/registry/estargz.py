"""eStargz: a gzip layer a stargz snapshotter can mount lazily, and any other runtime pulls as gzip
(stargz-snapshotter's docs/estargz.md).

The blob is gzip members laid end to end: a new member starts at the payload of each non-empty
regular file (and at each further chunk of a large one), at the TOC's tar header, and at the
footer. The TOC (`stargz.index.json`, the last tar entry) names every entry with its offset in the
blob and the digest of each chunk; the 51-byte footer is an empty gzip member whose extra field
holds the TOC's offset. Files to prefetch come first, in the order given, then the
`.prefetch.landmark` entry; with none, `.no.prefetch.landmark` comes first.

Written one fixed way, as the composer's other compressions are: zlib at a fixed level, headers of
time 0, tar headers as PAX at the entry's own times, the TOC as sorted, indented JSON. The same tar
and prefetch list give the same blob. The tar inside is not the input tar (the landmark and the
TOC are entries of it, and entries may move), so the layer's diff id is the new tar's: `Converted`
says it, with the TOC digest and the uncompressed size the layer's descriptor carries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import tarfile
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Sequence

from composer.core.errors import UsageError

CHUNK_SIZE = 4 << 20  # what the reference writer chunks large files by
GZIP_LEVEL = 6
TOC_NAME = "stargz.index.json"
PREFETCH_LANDMARK = ".prefetch.landmark"
NO_PREFETCH_LANDMARK = ".no.prefetch.landmark"
LANDMARK_CONTENTS = b"\x0f"
TOC_DIGEST_ANNOTATION = "containerd.io/snapshot/stargz/toc.digest"
UNCOMPRESSED_SIZE_ANNOTATION = "io.containers.estargz.uncompressed-size"
# The composer's own: how much of the blob a lazily pulling node fetches before the container starts
# (everything before the landmark's payload), and how many files that is; `composer inspect` reads them.
PREFETCH_BYTES_ANNOTATION = "org.triton-composer.estargz.prefetch-bytes"
PREFETCH_FILES_ANNOTATION = "org.triton-composer.estargz.prefetch-files"
FOOTER_SIZE = 51
BLOCK = tarfile.BLOCKSIZE
_TYPES = {tarfile.DIRTYPE: "dir", tarfile.REGTYPE: "reg", tarfile.AREGTYPE: "reg", tarfile.SYMTYPE: "symlink",
          tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char", tarfile.BLKTYPE: "block", tarfile.FIFOTYPE: "fifo"}


@dataclass(frozen=True)
class Converted:
    """An eStargz blob as written: its digest and size, and what its descriptor and config say of it."""

    digest: str
    size: int
    diff_id: str  # sha256 of the tar inside (the image config's rootfs entry)
    toc_digest: str
    uncompressed_size: int
    prefetched: tuple[str, ...]  # the entries before the prefetch landmark, in order
    prefetch_bytes: int = 0  # the blob's bytes before the landmark's payload: what a node fetches first

    @property
    def annotations(self) -> dict[str, str]:
        said = {TOC_DIGEST_ANNOTATION: self.toc_digest, UNCOMPRESSED_SIZE_ANNOTATION: str(self.uncompressed_size)}
        if self.prefetched:
            said[PREFETCH_BYTES_ANNOTATION] = str(self.prefetch_bytes)
            said[PREFETCH_FILES_ANNOTATION] = str(len(self.prefetched))
        return said


class _Members:
    """The blob being written: gzip members one after another, each opened on demand."""

    def __init__(self, out: BinaryIO):
        self.out, self.offset = out, 0
        self.blob, self.tar = hashlib.sha256(), hashlib.sha256()
        self.tar_size = 0
        self._member = None

    def _emit(self, data: bytes) -> None:
        if data:
            self.out.write(data)
            self.blob.update(data)
            self.offset += len(data)

    def write(self, data: bytes) -> None:
        """Tar bytes into the current member (one is opened if none is)."""
        if not data:
            return
        if self._member is None:
            self._member = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # a gzip header of time 0
        self.tar.update(data)
        self.tar_size += len(data)
        self._emit(self._member.compress(data))

    def close(self) -> None:
        """End the current member: the next write starts a new one, at `offset`."""
        if self._member is not None:
            self._emit(self._member.flush())
            self._member = None

    def footer(self, toc_offset: int) -> None:
        """The 51-byte footer: an empty gzip member whose extra field holds the TOC's offset."""
        self.close()
        subfield = f"{toc_offset:016x}STARGZ".encode()
        extra = b"SG" + struct.pack("<H", len(subfield)) + subfield
        self._emit(b"\x1f\x8b\x08\x04" + b"\x00\x00\x00\x00" + b"\x00\xff" + struct.pack("<H", len(extra)) + extra
                   + b"\x01\x00\x00\xff\xff" + b"\x00" * 8)


def _modtime(info: tarfile.TarInfo) -> str | None:
    if not info.mtime:
        return None
    return datetime.fromtimestamp(int(info.mtime), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(info: tarfile.TarInfo) -> dict:
    kind = _TYPES.get(info.type)
    if kind is None:
        raise UsageError(f"eStargz: the layer's entry {info.name} is of a tar type it cannot hold ({info.type!r})")
    entry: dict = {"name": info.name, "type": kind, "mode": info.mode, "uid": info.uid, "gid": info.gid}
    if info.uname:
        entry["userName"] = info.uname
    if info.gname:
        entry["groupName"] = info.gname
    if _modtime(info):
        entry["modtime"] = _modtime(info)
    if kind in ("symlink", "hardlink"):
        entry["linkName"] = info.linkname
    if kind in ("char", "block"):
        entry["devMajor"], entry["devMinor"] = info.devmajor, info.devminor
    xattrs = {k[len("SCHILY.xattr."):]: v for k, v in (info.pax_headers or {}).items() if k.startswith("SCHILY.xattr.")}
    if xattrs:
        entry["xattrs"] = {k: base64.b64encode(v.encode("utf-8", "surrogateescape")).decode() for k, v in
                           sorted(xattrs.items())}
    if kind == "reg":
        entry["size"] = info.size
    return entry


def _plain(name: str) -> str:
    """A tar name as a path in the image: "./usr/bin/x" and "/usr/bin/x" are "usr/bin/x"."""
    return name[2:] if name.startswith("./") else name.lstrip("/")


def _header(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def convert(source: Path, out: BinaryIO, prefetch: Sequence[str] = ()) -> Converted:
    """The uncompressed layer tar at `source` written to `out` as eStargz, the entries named in
    `prefetch` (tar names, in the order they were read) first."""
    with tarfile.open(source, mode="r:") as archive:
        members = [m for m in archive.getmembers() if _plain(m.name) != TOC_NAME]
        by_name = {_plain(m.name): m for m in members}
        wanted, seen = [], set()
        for name in prefetch:
            member = by_name.get(_plain(name))
            # Only regular files move up; a hard link stays after what it links to.
            if member is not None and member.isreg() and member.name not in seen:
                wanted.append(member)
                seen.add(member.name)
        rest = [m for m in members if m.name not in seen]
        landmark = tarfile.TarInfo(PREFETCH_LANDMARK if wanted else NO_PREFETCH_LANDMARK)
        landmark.size, landmark.mode, landmark.mtime = len(LANDMARK_CONTENTS), 0o644, 0
        order = [*wanted, landmark, *rest] if wanted else [landmark, *rest]
        blob = _Members(out)
        entries: list[dict] = []
        for info in order:
            entry = _entry(info)
            blob.write(_header(info))
            if info.isreg() and info.size > 0:
                data = LANDMARK_CONTENTS if info is landmark else archive.extractfile(info)
                _payload(blob, entry, data, info.size, entries)
            else:
                entries.append(entry)
        blob.close()
        toc = json.dumps({"version": 1, "entries": entries}, indent="\t", sort_keys=True).encode()
        toc_offset = blob.offset
        toc_info = tarfile.TarInfo(TOC_NAME)
        toc_info.size, toc_info.mode, toc_info.mtime = len(toc), 0o644, 0
        blob.write(_header(toc_info) + toc + b"\0" * (-len(toc) % BLOCK) + b"\0" * (2 * BLOCK))
        blob.footer(toc_offset)
    landmark_at = next((e.get("offset", 0) for e in entries if e["name"] == PREFETCH_LANDMARK), 0)
    return Converted("sha256:" + blob.blob.hexdigest(), blob.offset, "sha256:" + blob.tar.hexdigest(),
                     "sha256:" + hashlib.sha256(toc).hexdigest(), blob.tar_size,
                     tuple(m.name for m in wanted), landmark_at if wanted else 0)


def _payload(blob: _Members, entry: dict, data, size: int, entries: list[dict]) -> None:
    """A regular file's payload: one member per chunk, each chunk's digest in its TOC entry."""
    whole = hashlib.sha256()
    written = 0
    current = entry
    while written < size:
        length = min(CHUNK_SIZE, size - written)
        chunk = data[written:written + length] if isinstance(data, bytes) else data.read(length)
        if len(chunk) != length:
            raise UsageError(f"eStargz: {entry['name']} ended before its size ({size} bytes) in the layer")
        blob.close()
        current["offset"] = blob.offset
        if written:
            current["chunkOffset"] = written
        if written + length < size:  # the last (or only) chunk says none: it runs to the file's end
            current["chunkSize"] = length
        current["chunkDigest"] = "sha256:" + hashlib.sha256(chunk).hexdigest()
        whole.update(chunk)
        blob.write(chunk)
        entries.append(current)
        written += length
        current = {"name": entry["name"], "type": "chunk"}
    blob.write(b"\0" * (-size % BLOCK))
    entry["digest"] = "sha256:" + whole.hexdigest()
