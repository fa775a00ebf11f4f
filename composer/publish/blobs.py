"""Layer blobs as the composer pushes them: compressed one fixed way, so the same layer gives the same
blob digest on any machine, and kept on this machine for the layers of bases that no registry holds
(a pruned base, a base built here), so a second push compresses nothing again.

gzip: Python's zlib at a fixed level, a header with no name and time 0. zstd: the zstandard library
at a fixed level (issue 37 adds it as a choice). A blob's digest is stable for the same compressor
build (zlib and zlib-ng, or two zstd versions, may write other bytes): the composer says which
compressor it used in the provenance.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from composer.core.errors import UsageError

CHUNK = 1 << 20
GZIP_LEVEL = 6  # zlib's own default: the bytes most tools write, at half of level 9's time
ZSTD_LEVEL = 3
ZSTD_THREADS = 2  # zstd's output in multi-threaded mode is the same whatever the count of threads

MEDIA_TYPES = {
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
    "none": "application/vnd.oci.image.layer.v1.tar",
}
COMPRESSIONS = tuple(MEDIA_TYPES)
# What each media type a registry may hand us says of its compression (Docker's names included).
COMPRESSION_OF = {
    **{media: name for name, media in MEDIA_TYPES.items()},
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.diff.tar": "none",
}


def compressor_id(compression: str) -> str:
    """Which compressor wrote a blob (the provenance names it): its library's version and level."""
    if compression == "gzip":
        return f"zlib {zlib.ZLIB_RUNTIME_VERSION} level {GZIP_LEVEL}"
    if compression == "zstd":
        import zstandard

        return f"zstd {zstandard.ZSTD_VERSION if hasattr(zstandard, 'ZSTD_VERSION') else zstandard.__version__} " \
               f"level {ZSTD_LEVEL}"
    return "none"


@dataclass(frozen=True)
class Blob:
    """A blob on this machine: its file, digest, size and media type."""

    path: Path
    digest: str
    size: int
    media_type: str


def compress(source: BinaryIO, out: Path, compression: str) -> tuple[str, int, str]:
    """Write `source` compressed to `out`; (blob digest, blob size, digest of what was read)."""
    raw = hashlib.sha256()
    blob = hashlib.sha256()
    size = 0

    class _Out:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data) -> int:
            nonlocal size
            blob.update(data)
            size += len(data)
            self.fh.write(data)
            return len(data)

        def flush(self) -> None:
            self.fh.flush()

    with open(out, "wb") as fh:
        sink = _Out(fh)
        if compression == "gzip":
            with gzip.GzipFile(filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=sink, mtime=0) as packed:
                while chunk := source.read(CHUNK):
                    raw.update(chunk)
                    packed.write(chunk)
        elif compression == "zstd":
            import zstandard

            writer = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=ZSTD_THREADS).stream_writer(
                sink, closefd=False)
            with writer:
                while chunk := source.read(CHUNK):
                    raw.update(chunk)
                    writer.write(chunk)
        elif compression == "none":
            while chunk := source.read(CHUNK):
                raw.update(chunk)
                sink.write(chunk)
        else:
            raise UsageError(f"'{compression}' is not a compression: give {', '.join(COMPRESSIONS)}")
    return "sha256:" + blob.hexdigest(), size, "sha256:" + raw.hexdigest()


class BlobCache:
    """Compressed layers on this machine, by the layer's diff id and the compression: the layers of
    bases no registry holds, compressed once. Files are written under a fresh name and renamed in."""

    def __init__(self, root: Path | None = None):
        home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        self.root = root or home / "triton-composer" / "blobs"

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
