"""The ``binary_md5`` vindex: the 16-byte MD5 digest of the value's bytes."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from updatestream.core.vindexes.base import LookupStore, to_key_bytes

TYPE_NAME = "binary_md5"


@dataclass(frozen=True)
class BinaryMD5Vindex:
    """Keyspace id = md5(value bytes); text is UTF-8, integers their decimal text."""

    name: str
    type_name: str = field(default=TYPE_NAME, init=False)
    cost: int = field(default=1, init=False)
    is_unique: bool = field(default=True, init=False)

    def map(self, value: object) -> bytes | None:
        data = to_key_bytes(self.name, self.type_name, value)
        return None if data is None else hashlib.md5(data, usedforsecurity=False).digest()


def create(
    name: str, params: Mapping[str, str], lookup_store: LookupStore | None
) -> BinaryMD5Vindex:
    return BinaryMD5Vindex(name)
