"""Layer blobs as the composer pushes them (compressed as composer.registry.compression says), and
kept on this machine for the layers of bases no registry holds (a pruned base, a base built here),
so a second push compresses nothing again.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from composer.engine import locks
from composer.core.errors import UsageError
from composer.registry.compression import (  # noqa: F401 (the publishing side's names for them)
    COMPRESSION_OF, COMPRESSIONS, MEDIA_TYPES, compress, compressor_id,
)


@dataclass(frozen=True)
class Blob:
    """A blob on this machine: its file, digest, size and media type."""

    path: Path
    digest: str
    size: int
    media_type: str


class BlobCache:
    """Compressed layers on this machine, by the layer's diff id and the compression: the layers of
    bases no registry holds, compressed once. Files are written under a fresh name and renamed in."""

    def __init__(self, root: Path | None = None):
        self.root = root or locks.cache_dir() / "blobs"

    def _index(self, diff_id: str, compression: str) -> Path:
        return self.root / "index" / compression / diff_id.replace(":", "-")

    def find(self, diff_id: str, compression: str) -> Blob | None:
        try:
            digest, size = self._index(diff_id, compression).read_text().split()
        except (OSError, ValueError):
            return None
        path = self.root / "sha256" / digest.partition(":")[2]
        if not path.is_file() or path.stat().st_size != int(size):
            return None
        return Blob(path, digest, int(size), MEDIA_TYPES[compression])

    def add(self, source: BinaryIO, diff_id: str, compression: str) -> Blob:
        """Compress `source` (the layer whose diff id is `diff_id`) into the cache."""
        (self.root / "sha256").mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.root / "sha256", prefix=".incoming-")
        os.close(fd)
        try:
            digest, size, read = compress(source, Path(name), compression)
            if read != diff_id:
                raise UsageError(f"the layer read hashes to {read}, not to its diff id {diff_id}")
            path = self.root / "sha256" / digest.partition(":")[2]
            os.replace(name, path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        index = self._index(diff_id, compression)
        index.parent.mkdir(parents=True, exist_ok=True)
        temporary = index.with_name(index.name + ".incoming")
        temporary.write_text(f"{digest} {size}\n")
        os.replace(temporary, index)
        return Blob(path, digest, size, MEDIA_TYPES[compression])
