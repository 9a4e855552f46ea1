"""The ``numeric`` vindex: a uint64 stored as its 8-byte big-endian form (reversible)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from updatestream.core.vindexes.base import LookupStore, pad_keyspace_id, to_uint64

TYPE_NAME = "numeric"


@dataclass(frozen=True)
class NumericVindex:
    """Keyspace id = the value as 8 bytes, big-endian; ids keep the order of the values."""

    name: str
    type_name: str = field(default=TYPE_NAME, init=False)
    cost: int = field(default=0, init=False)
    is_unique: bool = field(default=True, init=False)

    def map(self, value: object) -> bytes | None:
        number = to_uint64(self.name, self.type_name, value)
        return None if number is None else number.to_bytes(8, "big")

    def reverse_map(self, keyspace_id: bytes) -> int:
        return int.from_bytes(pad_keyspace_id(self.name, self.type_name, keyspace_id), "big")


def create(name: str, params: Mapping[str, str], lookup_store: LookupStore | None) -> NumericVindex:
    return NumericVindex(name)
