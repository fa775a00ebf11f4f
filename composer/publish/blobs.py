"""Layer blobs as the composer pushes them (compressed as composer.registry.compression says), and
kept on this machine for the layers of bases no registry holds (a pruned base, a base built here)
and for the composed images' own layers, so a second push compresses nothing again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

from composer.engine import locks
from composer.core.errors import UsageError
from composer.registry import estargz
from composer.registry.compression import (  # noqa: F401 (the publishing side's names for them)
    COMPRESSION_OF, COMPRESSIONS, MEDIA_TYPES, compress, compressor_id,
)


@dataclass(frozen=True)
class Blob:
    """A blob on this machine: its file, digest, size and media type; for an eStargz layer, the diff
    id of the tar it holds (not the layer's: the TOC and landmark are entries of it) and the
    annotations its descriptor carries."""

    path: Path
    digest: str
    size: int
    media_type: str
    diff_id: str | None = None
    annotations: tuple[tuple[str, str], ...] = ()


def kept_as(compression: str, prefetch: Sequence[str] = ()) -> str:
    """The name blobs and pushes are kept under: the compression, and for eStargz the files put first
    (another prefetch list is another blob)."""
    if compression != "estargz" or not prefetch:
        return compression
    return f"{compression}-{hashlib.sha256(chr(10).join(prefetch).encode()).hexdigest()[:16]}"


def layer_blob(source: Path, diff_id: str, out: Path, compression: str, prefetch: Sequence[str] = ()) -> Blob:
    """The layer tar at `source` (whose digest is `diff_id`) written to `out` as `compression` says
    (eStargz: the files of `prefetch` this layer holds first)."""
    if compression == "estargz":
        with open(source, "rb") as check:
            read = hashlib.sha256()
            while chunk := check.read(1 << 20):
                read.update(chunk)
        if "sha256:" + read.hexdigest() != diff_id:
            raise UsageError(f"the layer {source} hashes to sha256:{read.hexdigest()}, not to its diff id {diff_id}")
        with open(out, "wb") as fh:
            made = estargz.convert(source, fh, prefetch)
        return Blob(out, made.digest, made.size, MEDIA_TYPES[compression], made.diff_id,
                    tuple(sorted(made.annotations.items())))
    with open(source, "rb") as fh:
        digest, size, read_id = compress(fh, out, compression)
    if read_id != diff_id:
        raise UsageError(f"the layer {source} hashes to {read_id}, not to its diff id {diff_id}")
    return Blob(out, digest, size, MEDIA_TYPES[compression])


@dataclass(frozen=True)
class Usage:
    """Blobs of the cache: how many, their bytes, the latest use (a blob's time is its last use)."""

    count: int
    size: int
    last_used: float | None


class BlobCache:
    """Compressed layers on this machine, by the layer's diff id and the compression: the layers of
    bases no registry holds, compressed once. Files are written under a fresh name and renamed in.
    A push holds the cache (a shared lock of the host) while it reads it, and `composer cache clear`
    removes blobs only when no push does: the cache grows with each new layer pushed otherwise."""

    def __init__(self, root: Path | None = None):
        self.root = root or locks.cache_dir() / "blobs"

    def in_use(self):
        return locks.using_host("blob cache", str(self.root.absolute()))

    def _blobs(self) -> list[tuple[Path, os.stat_result]]:
        found = []
        for path in (self.root / "sha256").glob("*") if (self.root / "sha256").is_dir() else ():
            if path.name.startswith("."):
                continue  # another process's blob on its way in
            try:
                found.append((path, path.stat()))
            except OSError:
                continue
        return found

    def usage(self) -> Usage:
        blobs = self._blobs()
        return Usage(len(blobs), sum(st.st_size for _, st in blobs), max((st.st_mtime for _, st in blobs), default=None))

    def clear(self, older_than_days: float | None = None, now: float | None = None) -> Usage | None:
        """Remove the blobs (all, or those unused for `older_than_days`) and the index entries naming
        them; what went, or None when a push holds the cache (nothing goes)."""
        cutoff = None if older_than_days is None else (now or time.time()) - older_than_days * 24 * 3600
        with locks.removable_host("blob cache", str(self.root.absolute())) as free:
            if not free:
                return None
            gone = [(path, st) for path, st in self._blobs() if cutoff is None or st.st_mtime < cutoff]
            for path, _st in gone:
                path.unlink(missing_ok=True)
            for index in (self.root / "index").glob("*/*") if (self.root / "index").is_dir() else ():
                try:
                    digest = index.read_text().split()[0]
                except (OSError, IndexError):
                    continue
                if not (self.root / "sha256" / digest.partition(":")[2]).is_file():
                    index.unlink(missing_ok=True)
        return Usage(len(gone), sum(st.st_size for _, st in gone), None)

    def _index(self, diff_id: str, compression: str, prefetch: Sequence[str]) -> Path:
        return self.root / "index" / kept_as(compression, prefetch) / diff_id.replace(":", "-")

    def find(self, diff_id: str, compression: str, prefetch: Sequence[str] = ()) -> Blob | None:
        try:
            digest, size, *more = self._index(diff_id, compression, prefetch).read_text().split()
            annotations = json.loads(more[1]) if more else {}
        except (OSError, ValueError, IndexError):
            return None
        path = self.root / "sha256" / digest.partition(":")[2]
        if not path.is_file() or path.stat().st_size != int(size):
            return None
        try:
            os.utime(path)  # its last use, for `composer cache clear --older-than`
        except OSError:
            pass
        return Blob(path, digest, int(size), MEDIA_TYPES[compression], more[0] if more else None,
                    tuple(sorted(annotations.items())))

    def add(self, source: BinaryIO, diff_id: str, compression: str, prefetch: Sequence[str] = ()) -> Blob:
        """Compress `source` (the layer whose diff id is `diff_id`) into the cache (an eStargz layer
        is written from a spooled copy: its entries are read twice)."""
        (self.root / "sha256").mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.root / "sha256", prefix=".incoming-")
        os.close(fd)
        spool = None
        try:
            if compression == "estargz":
                fd, spool = tempfile.mkstemp(dir=self.root, prefix=".layer-")
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
                blob = layer_blob(Path(spool), diff_id, Path(name), compression, prefetch)
            else:
                digest, size, read = compress(source, Path(name), compression)
                if read != diff_id:
                    raise UsageError(f"the layer read hashes to {read}, not to its diff id {diff_id}")
                blob = Blob(Path(name), digest, size, MEDIA_TYPES[compression])
            path = self.root / "sha256" / blob.digest.partition(":")[2]
            os.replace(name, path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        finally:
            if spool:
                Path(spool).unlink(missing_ok=True)
        index = self._index(diff_id, compression, prefetch)
        index.parent.mkdir(parents=True, exist_ok=True)
        temporary = index.with_name(index.name + ".incoming")
        more = f" {blob.diff_id} {json.dumps(dict(blob.annotations), separators=(',', ':'))}" if blob.diff_id else ""
        temporary.write_text(f"{blob.digest} {blob.size}{more}\n")
        os.replace(temporary, index)
        return dataclasses.replace(blob, path=path)
