"""cosign's encrypted private key files (`cosign generate-key-pair`), read with the standard library.

A PEM block `ENCRYPTED SIGSTORE PRIVATE KEY` (older cosigns: `ENCRYPTED COSIGN PRIVATE KEY`)
holds JSON: the key derivation (scrypt, its N, r, p and salt), the cipher (NaCl's secretbox:
XSalsa20 and Poly1305, its 24-byte nonce) and the ciphertext, which opens to the PKCS#8 DER of the
private key. `cryptography` has scrypt but no XSalsa20, so the secretbox is opened here: a few
hundred bytes, once per command.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import struct

ENCRYPTED_PEM = re.compile(rb"-----BEGIN ENCRYPTED (SIGSTORE|COSIGN) PRIVATE KEY-----\s*(.+?)\s*"
                           rb"-----END ENCRYPTED (SIGSTORE|COSIGN) PRIVATE KEY-----", re.S)
MAX_SCRYPT_N = 1 << 20  # cosign writes 32768; a file asking for more memory than this is refused


class KeyFileError(ValueError):
    """The file is cosign's format but cannot be opened (a wrong passphrase, a damaged file)."""


def is_encrypted_cosign_key(data: bytes) -> bool:
    return ENCRYPTED_PEM.search(data) is not None


def decrypt(data: bytes, passphrase: bytes) -> bytes:
    """The PKCS#8 DER inside cosign's encrypted key file; KeyFileError for a wrong passphrase."""
    found = ENCRYPTED_PEM.search(data)
    if found is None:
        raise KeyFileError("not cosign's encrypted key format")
    try:
        box = json.loads(base64.b64decode(b"".join(found.group(2).split())))
        kdf, cipher = box["kdf"], box["cipher"]
        params = kdf["params"]
        n, r, p = int(params["N"]), int(params["r"]), int(params["p"])
        salt = base64.b64decode(kdf["salt"])
        nonce = base64.b64decode(cipher["nonce"])
        sealed = base64.b64decode(box["ciphertext"])
    except (ValueError, KeyError, TypeError) as exc:
        raise KeyFileError(f"a damaged cosign key file ({type(exc).__name__})") from None
    if kdf.get("name") != "scrypt" or cipher.get("name") != "nacl/secretbox":
        raise KeyFileError(f"an unknown cosign key encryption ({kdf.get('name')}, {cipher.get('name')})")
    if not (1 < n <= MAX_SCRYPT_N and n & (n - 1) == 0) or not (0 < r <= 32 and 0 < p <= 16) or len(nonce) != 24:
        raise KeyFileError("a cosign key file with parameters out of range")
    key = hashlib.scrypt(passphrase, salt=salt, n=n, r=r, p=p, maxmem=256 * n * r + (64 << 20), dklen=32)
    opened = secretbox_open(sealed, nonce, key)
    if opened is None:
        raise KeyFileError("the passphrase is wrong (or the file was changed)")
    return opened


# -- NaCl's secretbox (XSalsa20 + Poly1305), open only ------------------------------------------

_MASK = 0xFFFFFFFF


def _rotl(value: int, shift: int) -> int:
    return ((value << shift) & _MASK) | (value >> (32 - shift))


def _rounds(state: list[int]) -> list[int]:
    x = list(state)
    for _ in range(10):  # 20 rounds: a column round and a row round each time
        for a, b, c, d in ((0, 4, 8, 12), (5, 9, 13, 1), (10, 14, 2, 6), (15, 3, 7, 11),
                           (0, 1, 2, 3), (5, 6, 7, 4), (10, 11, 8, 9), (15, 12, 13, 14)):
            x[b] ^= _rotl((x[a] + x[d]) & _MASK, 7)
            x[c] ^= _rotl((x[b] + x[a]) & _MASK, 9)
            x[d] ^= _rotl((x[c] + x[b]) & _MASK, 13)
            x[a] ^= _rotl((x[d] + x[c]) & _MASK, 18)
    return x


_SIGMA = struct.unpack("<4I", b"expand 32-byte k")


def _state(key: bytes, middle: bytes) -> list[int]:
    k = struct.unpack("<8I", key)
    m = struct.unpack("<4I", middle)
    return [_SIGMA[0], *k[:4], _SIGMA[1], *m, _SIGMA[2], *k[4:], _SIGMA[3]]


def _hsalsa20(key: bytes, nonce16: bytes) -> bytes:
    x = _rounds(_state(key, nonce16))
    return struct.pack("<8I", x[0], x[5], x[10], x[15], x[6], x[7], x[8], x[9])


def _salsa20_stream(key: bytes, nonce8: bytes, length: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < length:
        state = _state(key, nonce8 + struct.pack("<Q", counter))
        mixed = _rounds(state)
        out += struct.pack("<16I", *((a + b) & _MASK for a, b in zip(mixed, state)))
        counter += 1
    return bytes(out[:length])


def _poly1305(key: bytes, message: bytes) -> bytes:
    r = int.from_bytes(key[:16], "little") & 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
    s = int.from_bytes(key[16:], "little")
    prime, acc = (1 << 130) - 5, 0
    for start in range(0, len(message), 16):
        block = message[start:start + 16] + b"\x01"
        acc = ((acc + int.from_bytes(block, "little")) * r) % prime
    return ((acc + s) & ((1 << 128) - 1)).to_bytes(16, "little")


def secretbox_open(sealed: bytes, nonce: bytes, key: bytes) -> bytes | None:
    """NaCl's crypto_secretbox_open (the 16-byte tag first, as Go's secretbox writes it); None when
    the tag does not verify."""
    if len(sealed) < 16:
        return None
    subkey = _hsalsa20(key, nonce[:16])
    stream = _salsa20_stream(subkey, nonce[16:], 32 + len(sealed) - 16)
    tag, body = sealed[:16], sealed[16:]
    if not hmac.compare_digest(_poly1305(stream[:32], body), tag):
        return None
    return bytes(a ^ b for a, b in zip(body, stream[32:]))
