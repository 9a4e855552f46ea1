"""Version Streams in MySQL/MariaDB: the repository (append, fetch), partitioned streams and
their stream-of-streams, sub-streams, and the Multi Snapshot Cache.

See :mod:`updatestream.versionstream.repository` for the table and how appends stay gapless,
ordered and at most once; :mod:`~updatestream.versionstream.partitioned_stream` for N partitions
appended in parallel, :mod:`~updatestream.versionstream.stream_of_streams` and
:mod:`~updatestream.versionstream.combined_stream` for reading them as one ordered stream,
:mod:`~updatestream.versionstream.sub_stream` for one table's projection, and
:mod:`updatestream.versionstream.cache` for snapshot reads of any of them.
"""

from updatestream.versionstream.cache import MultiSnapshotCache, VersionReader
from updatestream.versionstream.combined_stream import CombinedStream
from updatestream.versionstream.partitioned_stream import (
    PartitionedAppend,
    PartitionedStream,
    partition_of,
    partition_streams,
)
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
from updatestream.versionstream.stream_of_streams import Recombiner, StreamOfStreams
from updatestream.versionstream.sub_stream import SubStream

__all__ = [
    "AppendResult",
    "CombinedStream",
    "Entry",
    "MultiSnapshotCache",
    "Origin",
    "PartitionedAppend",
    "PartitionedStream",
    "Recombiner",
    "Record",
    "StreamOfStreams",
    "SubStream",
    "VersionNotFound",
    "VersionReader",
    "VersionStreamError",
    "VersionStreamRepository",
    "entity_name",
    "partition_of",
    "partition_streams",
]
