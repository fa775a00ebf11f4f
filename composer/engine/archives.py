"""An engine's archives as they stream. Reading a `save` archive: its layers found by their content,
whatever the engine names them (Docker 20.10: <id>/layer.tar; Podman: <digest>.tar; Docker 25+: an
OCI layout's blobs/sha256/<digest>), since the composer needs a base's layers by diff id. Writing a
`load` archive (LoadArchive): what the composer's own images and BuildKit's stages are loaded by."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
from pathlib import Path
from typing import BinaryIO, Iterator

_LAYER_NAME = re.compile(r"(^|/)layer\.tar$|^[0-9a-f]{64}(\.tar)?$|^blobs/sha256/[0-9a-f]{64}$")


class ChunkReader(io.RawIOBase):
    """A file over an iterator of byte chunks (a streamed export or save), for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks, self.left = iter(chunks), memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.left:
            try:
                self.left = memoryview(next(self.chunks))
            except StopIteration:
                return 0
        n = min(len(buffer), len(self.left))
        buffer[:n] = self.left[:n]
        self.left = self.left[n:]  # a view: the rest of a megabyte chunk is not copied at each read
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


class LoadArchive:
    """An engine's load archive written member by member into `out` (a pipe the engine reads):
    files go through the kernel (sendfile), streams in megabyte writes. The caller names the layers
    the engine holds in the manifest without sending them; `end()` writes tar's closing blocks."""

    def __init__(self, out: BinaryIO):
        self.out = out

    def _header(self, name: str, size: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = size, 0o644
        self.out.write(info.tobuf(tarfile.GNU_FORMAT))

    def _pad(self, size: int) -> None:
        """A member's data ends on a whole 512-byte block."""
        self.out.write(b"\0" * (-size % 512))

    def data(self, name: str, data: bytes) -> None:
        self._header(name, len(data))
        self.out.write(data)
        self._pad(len(data))

    def file(self, name: str, path: Path) -> None:
        size = path.stat().st_size
        self._header(name, size)
        self.out.flush()
        with open(path, "rb") as source:
            offset = 0
            while offset < size:
                sent = os.sendfile(self.out.fileno(), source.fileno(), offset, min(size - offset, 1 << 30))
                if not sent:
                    raise OSError(f"{path} ended early")
                offset += sent
        self._pad(size)

    def stream(self, name: str, source, size: int) -> None:
        """`size` bytes read from `source` (a member of another archive as it streams)."""
        self._header(name, size)
        left = size
        while left:
            chunk = source.read(min(left, 1 << 20))
            if not chunk:
                raise OSError(f"{name}: its source ended early")
            self.out.write(chunk)
            left -= len(chunk)
        self._pad(size)

    def end(self) -> None:
        self.out.write(b"\0" * 1024)
        self.out.flush()


def copy_saved_layers(chunks: Iterator[bytes], out: LoadArchive, wanted: set[str], prefix: str) -> dict[str, str]:
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
            out.stream(name, reader, member.size)
            if reader.diff_id in wanted:
                names.setdefault(reader.diff_id, name)
    return names
