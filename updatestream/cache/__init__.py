"""Cache invalidation with Event Tokens (seed 000): entries, keys, the invalidator, the client.

- :mod:`updatestream.cache.entry`: what a cache entry holds (a token, maybe a value).
- :mod:`updatestream.cache.key_templates`: cache keys of rows and composite objects.
- :mod:`updatestream.cache.invalidator`: the invalidation process (pipelined gets/add/cas).
- :mod:`updatestream.cache.client`: the application's read-through client.
- :mod:`updatestream.cache.loader`: reading rows with the GTID position of their snapshot.
"""

from updatestream.cache.client import CacheClient, CacheStats, Loader
from updatestream.cache.entry import Entry, EntryError
from updatestream.cache.invalidator import (
    CacheConflictError,
    CacheServerError,
    InvalidationReport,
    Invalidator,
)
from updatestream.cache.key_templates import KeyTemplateError, KeyTemplates
from updatestream.cache.loader import SnapshotReader

__all__ = [
    "CacheClient",
    "CacheConflictError",
    "CacheServerError",
    "CacheStats",
    "Entry",
    "EntryError",
    "InvalidationReport",
    "Invalidator",
    "KeyTemplateError",
    "KeyTemplates",
    "Loader",
    "SnapshotReader",
]
