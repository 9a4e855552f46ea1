"""Vindexes: map column values to keyspace ids (Vitess V3 design, seed 004).

The built-in kinds are registered here, one module each: ``numeric``, ``hash``, ``binary_md5``,
``xxhash`` and ``lookup_unique``.
"""

from __future__ import annotations

from updatestream.core.vindexes import binary_md5, hash, lookup_unique, numeric, xxhash64
from updatestream.core.vindexes.binary_md5 import BinaryMD5Vindex
from updatestream.core.vindexes.hash import HashVindex
from updatestream.core.vindexes.lookup_unique import LookupUniqueVindex
from updatestream.core.vindexes.numeric import NumericVindex
from updatestream.core.vindexes.registry import (
    DEFAULT_REGISTRY,
    VindexFactory,
    VindexRegistry,
    create_vindex,
    functional_types,
    known_types,
    register,
)
from updatestream.core.vindexes.vindex import (
    LookupStore,
    Reversible,
    Vindex,
    VindexError,
)
from updatestream.core.vindexes.xxhash64 import XXHashVindex

__all__ = [
    "DEFAULT_REGISTRY",
    "BinaryMD5Vindex",
    "HashVindex",
    "LookupStore",
    "LookupUniqueVindex",
    "NumericVindex",
    "Reversible",
    "Vindex",
    "VindexError",
    "VindexFactory",
    "VindexRegistry",
    "XXHashVindex",
    "create_vindex",
    "functional_types",
    "known_types",
    "register",
]


def _register_builtins() -> None:
    register(numeric.TYPE_NAME, numeric.NumericVindex.create)
    register(hash.TYPE_NAME, hash.HashVindex.create)
    register(binary_md5.TYPE_NAME, binary_md5.BinaryMD5Vindex.create)
    register(xxhash64.TYPE_NAME, xxhash64.XXHashVindex.create)
    register(lookup_unique.TYPE_NAME, lookup_unique.create, needs_lookup_store=True)


_register_builtins()
