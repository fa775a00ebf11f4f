"""How the composer compresses and reads layer blobs: one fixed way each, so the same layer gives the
same blob digest on any machine (with the same compressor build).

gzip: Python's zlib at a fixed level, a header with no name and time 0. zstd: the zstandard library
at a fixed level, in multi-threaded mode (whose output is the same whatever the count of threads).
none: the tar itself. A blob's digest is stable for the same compressor build (zlib and zlib-ng,
or two zstd versions, may write other bytes): the provenance names the compressor.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from composer.config.values import COMPRESSIONS
from composer.core.errors import UsageError

CHUNK = 1 << 20
GZIP_LEVEL = 6  # zlib's own default: the bytes most tools write, at half of level 9's time
ZSTD_LEVEL = 3
ZSTD_THREADS = 2

MEDIA_TYPES = {
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
    "none": "application/vnd.oci.image.layer.v1.tar",
    "estargz": "application/vnd.oci.image.layer.v1.tar+gzip",  # gzip members: any runtime reads it as gzip
}
assert set(MEDIA_TYPES) == set(COMPRESSIONS)  # the compressions a user may name (config.values), each written here
# What each media type a registry may hand us says of its compression (Docker's names included); an
# eStargz layer says gzip (the TOC annotation is what tells it apart), and reads as one.
COMPRESSION_OF = {
    **{media: name for name, media in MEDIA_TYPES.items() if name != "estargz"},
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.diff.tar": "none",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
}


def compressor_id(compression: str) -> str:
    """Which compressor wrote a blob (the provenance names it): its library's version and level."""
    if compression == "gzip":
        return f"zlib {zlib.ZLIB_RUNTIME_VERSION} level {GZIP_LEVEL}"
    if compression == "zstd":
        import zstandard

        return f"zstd {getattr(zstandard, 'ZSTD_VERSION', None) or zstandard.__version__} level {ZSTD_LEVEL}"
    if compression == "estargz":
        from composer.registry import estargz

        return (f"eStargz: zlib {zlib.ZLIB_RUNTIME_VERSION} level {estargz.GZIP_LEVEL}, "
                f"chunks of {estargz.CHUNK_SIZE >> 20} MiB")
    return "none"


class _Sink:
    """A file-like end that hashes and counts what is written, and hands it on."""

    def __init__(self, write):
        self.forward, self.digest, self.size = write, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.digest.update(data)
        self.size += len(data)
        self.forward(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


def compressing(chunks: Iterable[bytes], compression: str, write) -> tuple[str, int, str]:
    """Compress `chunks` one fixed way, handing the blob's bytes to `write` as they come; (blob
    digest, blob size, digest of the bytes read)."""
    raw = hashlib.sha256()
    sink = _Sink(write)
    if compression == "gzip":
        with gzip.GzipFile(filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=sink, mtime=0) as packed:
            for chunk in chunks:
                raw.update(chunk)
                packed.write(chunk)
    elif compression == "zstd":
        import zstandard

        with zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=ZSTD_THREADS).stream_writer(sink, closefd=False) as w:
            for chunk in chunks:
                raw.update(chunk)
                w.write(chunk)
    elif compression == "none":
        for chunk in chunks:
            raw.update(chunk)
            sink.write(chunk)
    else:
        raise UsageError(f"'{compression}' is not a compression: give {', '.join(COMPRESSIONS)}")
    return "sha256:" + sink.digest.hexdigest(), sink.size, "sha256:" + raw.hexdigest()


def compress(source: BinaryIO, out: Path, compression: str) -> tuple[str, int, str]:
    """Write `source` compressed to `out`; (blob digest, blob size, digest of what was read)."""
    with open(out, "wb") as fh:
        return compressing(iter(lambda: source.read(CHUNK), b""), compression, fh.write)


def decompressing(chunks: Iterable[bytes], compression: str) -> Iterator[bytes]:
    """The layer's tar from its blob's chunks (gzip, zstd or none)."""
    if compression == "none":
        yield from chunks
        return
    if compression in ("gzip", "estargz"):
        inflate = zlib.decompressobj(wbits=47)  # a gzip header, possibly several members
        for chunk in chunks:
            data = inflate.decompress(chunk)
            while inflate.eof and inflate.unused_data:  # a next gzip member
                rest = inflate.unused_data
                if data:
                    yield data
                inflate = zlib.decompressobj(wbits=47)
                data = inflate.decompress(rest)
            if data:
                yield data
        tail = inflate.flush()
        if tail:
            yield tail
        return
    if compression == "zstd":
        import zstandard

        unpack = zstandard.ZstdDecompressor()
        reader = unpack.decompressobj()
        for chunk in chunks:
            data = reader.decompress(chunk)
            while reader.eof and reader.unused_data:  # a next frame (zstd:chunked writes many)
                rest = reader.unused_data
                if data:
                    yield data
                reader = unpack.decompressobj()
                data = reader.decompress(rest)
            if data:
                yield data
        return
    raise UsageError(f"'{compression}' is not a compression: give {', '.join(COMPRESSIONS)}")
