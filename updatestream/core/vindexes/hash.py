"""The ``hash`` vindex, as Vitess: DES-ECB with an all-zero key over the big-endian uint64.

The mapping is a bijection on 64-bit integers, so it is reversible by decrypting. Known values:
1 -> 166b40b44aba4bd6, 2 -> 06e7ea22ce92708f.
"""

from __future__ import annotations

from dataclasses import dataclass

from Crypto.Cipher import DES

from updatestream.core.vindexes.vindex import (
    FunctionalVindex,
    pad_keyspace_id,
    to_uint64,
)

TYPE_NAME = "hash"

# ECB keeps no state between blocks, so one cipher object serves every call.
_CIPHER = DES.new(bytes(8), DES.MODE_ECB)


def hash_uint64(number: int) -> bytes:
    """The 8-byte keyspace id of an unsigned 64-bit integer (no validation)."""
    return bytes(_CIPHER.encrypt(number.to_bytes(8, "big")))


def hash_blocks(blocks: bytes) -> bytes:
    """The keyspace ids of many big-endian uint64 values laid end to end, in one call (ECB
    encrypts each 8-byte block on its own)."""
    return bytes(_CIPHER.encrypt(blocks))


def unhash_uint64(keyspace_id: bytes) -> int:
    """Inverse of :func:`hash_uint64` for an 8-byte keyspace id."""
    return int.from_bytes(_CIPHER.decrypt(keyspace_id), "big")


@dataclass(frozen=True)
class HashVindex(FunctionalVindex, type_name=TYPE_NAME):
    """Keyspace id = DES-ECB(zero key, value as 8 bytes big-endian)."""

    def map(self, value: object) -> bytes | None:
        number = to_uint64(self.name, self.type_name, value)
        return None if number is None else hash_uint64(number)

    def reverse_map(self, keyspace_id: bytes) -> int:
        return unhash_uint64(pad_keyspace_id(self.name, self.type_name, keyspace_id))
