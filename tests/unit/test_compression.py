"""The composer's one way to compress a layer and its reading of others' blobs
(composer.registry.compression): the same tar gives the same blob every time, and every blob
reads back to its tar, including gzip and zstd streams of several members or frames."""

from __future__ import annotations

import gzip
import hashlib
import os

import pytest
import zstandard

from composer.core.errors import UsageError
from composer.registry.compression import COMPRESSION_OF, MEDIA_TYPES, compressing, compressor_id, decompressing

TAR = os.urandom(300_000) + b"\0" * 700_000


def _pieces(data: bytes, size: int = 65_536):
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_the_same_tar_gives_the_same_blob_and_reads_back(compression):
    runs = []
    for pieces in (_pieces(TAR), _pieces(TAR, 1 << 20)):  # however the tar arrives
        blob = bytearray()
        digest, size, read = compressing(pieces, compression, blob.extend)
        assert digest == "sha256:" + hashlib.sha256(blob).hexdigest() and size == len(blob)
        assert read == "sha256:" + hashlib.sha256(TAR).hexdigest()
        runs.append(bytes(blob))
    assert runs[0] == runs[1]
    assert b"".join(decompressing(_pieces(runs[0], 1000), compression)) == TAR
    assert COMPRESSION_OF[MEDIA_TYPES[compression]] == compression


def test_gzip_blobs_of_several_members_and_zstd_blobs_of_several_frames_read_whole():
    halves = (TAR[:400_000], TAR[400_000:])
    members = b"".join(gzip.compress(h, mtime=0) for h in halves)
    frames = b"".join(zstandard.ZstdCompressor().compress(h) for h in halves)
    assert b"".join(decompressing(_pieces(members, 777), "gzip")) == TAR
    assert b"".join(decompressing(_pieces(frames, 777), "zstd")) == TAR


def test_gzip_is_written_with_no_name_and_no_time():
    blob = bytearray()
    compressing([b"x" * 10], "gzip", blob.extend)
    assert blob[3] == 0 and blob[4:8] == b"\0\0\0\0"  # no FNAME flag, MTIME 0


def test_the_compressor_is_named_for_the_provenance_and_an_unknown_one_refused():
    assert compressor_id("gzip").startswith("zlib ") and compressor_id("zstd").startswith("zstd ")
    with pytest.raises(UsageError, match="gzip, zstd, none"):
        list(compressing([b""], "brotli", lambda _: None))
    with pytest.raises(UsageError, match="gzip, zstd, none"):
        list(decompressing([b""], "lz4"))
