"""The ``numeric`` vindex: a uint64 stored as its 8-byte big-endian form (reversible)."""

from __future__ import annotations

from dataclasses import dataclass

from updatestream.core.vindexes.vindex import (
    FunctionalVindex,
    pad_keyspace_id,
    to_uint64,
)

TYPE_NAME = "numeric"


@dataclass(frozen=True)
class NumericVindex(FunctionalVindex, type_name=TYPE_NAME, cost=0):
    """Keyspace id = the value as 8 bytes, big-endian; ids keep the order of the values."""

    def map(self, value: object) -> bytes | None:
        number = to_uint64(self.name, self.type_name, value)
        return None if number is None else number.to_bytes(8, "big")

    def reverse_map(self, keyspace_id: bytes) -> int:
        return int.from_bytes(pad_keyspace_id(self.name, self.type_name, keyspace_id), "big")
