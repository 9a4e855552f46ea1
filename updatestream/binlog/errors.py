"""Typed errors of the binlog source. Each message names the shard, its address, what was wrong
and what to do; none carries a credential."""

from __future__ import annotations

from updatestream.core.errors import UpdateStreamError


class SourceError(UpdateStreamError):
    """Base of the binlog source's errors."""


class SourceOptionsError(SourceError):
    """An option of the `updatestream` data source is missing or malformed."""


class BinlogSettingsError(SourceError):
    """A shard's server is not configured for row-based change capture (binlog_format,
    binlog_row_image, binlog_row_metadata, log_bin)."""


class BinlogPurged(SourceError):
    """The requested start (a timestamp or a GTID position) lies in binary logs the shard no
    longer holds."""

    def __init__(self, message: str, *, shard: str, requested: str, oldest: str) -> None:
        super().__init__(message)
        self.shard = shard
        self.requested = requested
        self.oldest = oldest


class ShardUnreachable(SourceError):
    """A shard could not be reached (or its binlog could not be read) after bounded retries."""


class BinlogReadError(SourceError):
    """The binlog of a shard could not be read as requested (the server refused the start
    position, the stream rewound, or it ended before the requested end position)."""


class UnknownTable(SourceError):
    """A row event for a table the VSchema does not route (no primary vindex)."""


class StartPositionError(SourceOptionsError):
    """The start names no position for a shard the key range reads (`.shard` says which)."""

    def __init__(self, message: str, *, shard: str = "") -> None:
        super().__init__(message)
        self.shard = shard


class HopGapError(SourceError):
    """A hop would skip changes: the destination shards' binlogs start after the stream's last
    delivered position on a source shard that is no longer declared (retired)."""

    def __init__(self, message: str, *, source: str = "", destination: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.destination = destination
