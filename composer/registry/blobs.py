"""A blob's bytes on their way between registries: hashed, counted, the last chunk held back.

Apart from the API client, which streams it, because the copy builds it from a source stream.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterable, Iterator

from composer.core.errors import RegistryError


class VerifiedBlob:
    """The bytes of one blob from a source stream, hashed and counted as they pass.

    The last chunk is held back until the size and digest are proven, so a wrong blob raises a
    RegistryError naming it before its last byte is sent: the registry never completes (and so
    never keeps) a blob that is not what the manifest says. `len()` is the expected size, which
    lets an HTTP client send it with a Content-Length, chunk by chunk, never whole in memory.
    """

    def __init__(self, chunks: Iterable[bytes], digest: str, size: int, what: str,
                 on_bytes: Callable[[int], None] = lambda n: None):
        algorithm, _, _ = digest.partition(":")
        if algorithm not in ("sha256", "sha384", "sha512"):
            raise RegistryError(f"{what}: cannot verify a {algorithm or 'bare'} digest")
        self._chunks, self.digest, self.size, self.what = chunks, digest, size, what
        self._hash = hashlib.new(algorithm)
        self._on_bytes = on_bytes
        self.seen = 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes]:
        held = b""
        for chunk in self._chunks:
            if not chunk:
                continue
            self.seen += len(chunk)
            if self.seen > self.size:
                raise RegistryError(f"{self.what}: the source sent more than the {self.size} bytes its manifest "
                                    "gives; nothing was tagged")
            self._hash.update(chunk)
            if held:
                yield held
                self._on_bytes(len(held))
            held = chunk
        if self.seen != self.size:
            raise RegistryError(f"{self.what}: the source sent {self.seen} of the {self.size} bytes its manifest "
                                "gives; nothing was tagged")
        actual = f"{self._hash.name}:{self._hash.hexdigest()}"
        if actual != self.digest:
            raise RegistryError(f"{self.what}: the bytes the source sent hash to {actual}, not to the blob's "
                                "digest; nothing was tagged")
        if held:
            yield held
            self._on_bytes(len(held))
