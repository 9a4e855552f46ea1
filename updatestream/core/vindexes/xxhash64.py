"""The ``xxhash`` vindex: XXH64 (seed 0) of the value's bytes, as 8 bytes.

Vitess stores the 64-bit digest little-endian (``binary.LittleEndian.PutUint64``), so this kind
does too: a keyspace id computed here lands on the same shard as in a Vitess keyspace.
"""

from __future__ import annotations

from dataclasses import dataclass

import xxhash

from updatestream.core.vindexes.vindex import FunctionalVindex, to_key_bytes

TYPE_NAME = "xxhash"


def xxhash_key(data: bytes) -> bytes:
    """The 8-byte keyspace id of ``data``."""
    return xxhash.xxh64_intdigest(data, seed=0).to_bytes(8, "little")


@dataclass(frozen=True)
class XXHashVindex(FunctionalVindex, type_name=TYPE_NAME):
    """Keyspace id = XXH64(value bytes); text is UTF-8, integers their decimal text."""

    def map(self, value: object) -> bytes | None:
        data = to_key_bytes(self.name, self.type_name, value)
        return None if data is None else xxhash_key(data)
