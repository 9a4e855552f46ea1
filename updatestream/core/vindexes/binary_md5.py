"""The ``binary_md5`` vindex: the 16-byte MD5 digest of the value's bytes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from updatestream.core.vindexes.vindex import FunctionalVindex, to_key_bytes

TYPE_NAME = "binary_md5"


@dataclass(frozen=True)
class BinaryMD5Vindex(FunctionalVindex, type_name=TYPE_NAME):
    """Keyspace id = md5(value bytes); text is UTF-8, integers their decimal text."""

    def map(self, value: object) -> bytes | None:
        data = to_key_bytes(self.name, self.type_name, value)
        return None if data is None else hashlib.md5(data, usedforsecurity=False).digest()
