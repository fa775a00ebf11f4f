"""Reading an engine's `save` archive as it streams: its layers found by their content, whatever
the engine names them (Docker 20.10: <id>/layer.tar; Podman: <digest>.tar; Docker 25+: an OCI
layout's blobs/sha256/<digest>), since the composer needs a base's layers by diff id."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from typing import BinaryIO, Iterator

_LAYER_NAME = re.compile(r"(^|/)layer\.tar$|^[0-9a-f]{64}(\.tar)?$|^blobs/sha256/[0-9a-f]{64}$")


class ChunkReader(io.RawIOBase):
    """A file over an iterator of byte chunks (a streamed export or save), for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks, self.left = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.left:
            try:
                self.left = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self.left))
        buffer[:n] = self.left[:n]
        self.left = self.left[n:]
        return n


def may_be_layer(member: tarfile.TarInfo) -> bool:
    """Whether a member of a save archive can be a layer (a file named as engines name layers)."""
    return member.isfile() and bool(_LAYER_NAME.search(member.name))


class Hashing:
    """Reads through `source`, hashing what passes (a layer's diff id is known once it is read)."""

    def __init__(self, source: BinaryIO):
        self.source, self.digest = source, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.digest.update(data)
        return data

    @property
    def diff_id(self) -> str:
        return "sha256:" + self.digest.hexdigest()


def copy_saved_layers(chunks: Iterator[bytes], out: tarfile.TarFile, wanted: set[str], prefix: str) -> dict[str, str]:
    """Write each layer of a streamed save archive into `out` (as <prefix><n>/layer.tar) as it
    arrives; diff id -> the name it got, for the wanted ones. A member that proves not to be a wanted
    layer is written too (its digest is known only at its end): a loader reads what its manifest names."""
    names: dict[str, str] = {}
    with tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as saved:
        for index, member in enumerate(saved):
            if not may_be_layer(member) or len(names) == len(wanted):
                continue
            source = saved.extractfile(member)
            if source is None:
                continue
            reader = Hashing(source)
            name = f"{prefix}{index}/layer.tar"
            info = tarfile.TarInfo(name)
            info.size, info.mode = member.size, 0o644
            out.addfile(info, reader)
            if reader.diff_id in wanted:
                names.setdefault(reader.diff_id, name)
    return names
