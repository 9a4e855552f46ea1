"""The ``hash`` vindex, as Vitess: DES-ECB with an all-zero key over the big-endian uint64.

The mapping is a bijection on 64-bit integers, so it is reversible by decrypting. Known values:
1 -> 166b40b44aba4bd6, 2 -> 06e7ea22ce92708f.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, modes

try:  # cryptography >= 43 keeps the old ciphers apart
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
except ImportError:  # pragma: no cover - older releases
    from cryptography.hazmat.primitives.ciphers.algorithms import TripleDES

from updatestream.core.vindexes.vindex import (
    FunctionalVindex,
    pad_keyspace_id,
    to_uint64,
)

TYPE_NAME = "hash"

# Triple DES with its three keys equal is single DES (encrypt, decrypt, encrypt with one key).
# ECB keeps no state between blocks, so one context per thread serves every call; this library
# keeps the GIL through a call, so a binlog tail hashing beside busy threads is not made to wait
# for it again on every row, as it was with a cipher that released it per call.
_KEY = bytes(24)
_CONTEXTS = threading.local()


def _context(direction: str) -> CipherContext:
    context: CipherContext | None = getattr(_CONTEXTS, direction, None)
    if context is None:
        cipher = Cipher(TripleDES(_KEY), modes.ECB())
        context = cipher.encryptor() if direction == "encrypt" else cipher.decryptor()
        setattr(_CONTEXTS, direction, context)
    return context


def hash_uint64(number: int) -> bytes:
    """The 8-byte keyspace id of an unsigned 64-bit integer (no validation)."""
    return _context("encrypt").update(number.to_bytes(8, "big"))


def hash_blocks(blocks: bytes) -> bytes:
    """The keyspace ids of many big-endian uint64 values laid end to end, in one call (ECB
    encrypts each 8-byte block on its own)."""
    if len(blocks) % 8:  # the context would keep the rest and shift every later id
        raise ValueError(f"hash_blocks takes whole 8-byte blocks, not {len(blocks)} bytes")
    return _context("encrypt").update(blocks)


def unhash_uint64(keyspace_id: bytes) -> int:
    """Inverse of :func:`hash_uint64` for an 8-byte keyspace id."""
    return int.from_bytes(_context("decrypt").update(keyspace_id), "big")


@dataclass(frozen=True)
class HashVindex(FunctionalVindex, type_name=TYPE_NAME):
    """Keyspace id = DES-ECB(zero key, value as 8 bytes big-endian)."""

    def map(self, value: object) -> bytes | None:
        number = to_uint64(self.name, self.type_name, value)
        return None if number is None else hash_uint64(number)

    def reverse_map(self, keyspace_id: bytes) -> int:
        return unhash_uint64(pad_keyspace_id(self.name, self.type_name, keyspace_id))
