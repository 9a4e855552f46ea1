"""Version Streams in MySQL/MariaDB: the repository (append, fetch) and the Multi Snapshot Cache.

See :mod:`updatestream.versionstream.repository` for the table and how appends stay gapless,
ordered and at most once, and :mod:`updatestream.versionstream.cache` for snapshot reads.
"""

from updatestream.versionstream.cache import MultiSnapshotCache
from updatestream.versionstream.repository import (
    AppendResult,
    Entry,
    Origin,
    Record,
    VersionNotFound,
    VersionStreamError,
    VersionStreamRepository,
    entity_name,
)

__all__ = [
    "AppendResult",
    "Entry",
    "MultiSnapshotCache",
    "Origin",
    "Record",
    "VersionNotFound",
    "VersionStreamError",
    "VersionStreamRepository",
    "entity_name",
]
