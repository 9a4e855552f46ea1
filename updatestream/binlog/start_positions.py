"""Turning a start request into a GTID position, without Spark.

`find_start_by_timestamp` searches the binary logs for the first transaction at or after a time
(binary search over the files by the time of their first transaction, each probe a positioned
read of the file's first events, then a scan of one file's GTID events); `earliest_start` is the
start of the oldest binlog held; `check_start_available` refuses a GTID position whose following
transactions were purged. Both purge cases raise `BinlogPurged`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    MariadbGtidEvent,
    RotateEvent,
)

from updatestream.binlog.errors import BinlogPurged, BinlogReadError
from updatestream.binlog.session import (
    ShardSession,
    advance,
    connection_settings,
    gtid_of,
    server_id,
)
from updatestream.core.gtid import (
    Flavor,
    GTIDPosition,
    MariaDBPosition,
    MySQLGTIDSet,
    position_contains,
)

_SCAN_EVENTS = [FormatDescriptionEvent, MariadbGtidEvent, GtidEvent, RotateEvent]


@dataclass(frozen=True)
class FileHead:
    name: str
    started: int  # when the server opened the file (its format description event)
    first_tx: int | None  # timestamp of its first transaction, None when it has none

    @property
    def key(self) -> int:
        return self.first_tx if self.first_tx is not None else self.started


def _positioned_stream(settings: dict[str, Any], name: str) -> BinLogStreamReader:
    return BinLogStreamReader(
        connection_settings=dict(settings),
        server_id=server_id(),
        log_file=name,
        log_pos=4,
        resume_stream=True,
        blocking=False,
        is_mariadb=False,  # its MariaDB mode ignores log_file; plain COM_BINLOG_DUMP works
        only_events=_SCAN_EVENTS,
        enable_logging=False,
    )


def read_file_head(settings: dict[str, Any], name: str) -> FileHead:
    """The opening time and first transaction time of one binlog file (a positioned read)."""
    started: int | None = None
    stream = _positioned_stream(settings, name)
    try:
        for event in stream:
            if isinstance(event, FormatDescriptionEvent) and started is None:
                started = int(event.timestamp)
            elif isinstance(event, MariadbGtidEvent | GtidEvent):
                return FileHead(name, int(started or event.timestamp), int(event.timestamp))
            elif isinstance(event, RotateEvent) and event.timestamp:
                break  # the end of this file: it holds no transaction
    finally:
        stream.close()
    return FileHead(name, int(started or 0), None)


def find_start_by_timestamp(
    session: ShardSession, settings: dict[str, Any], timestamp: int
) -> GTIDPosition:
    """The position just before the first transaction at or after `timestamp`.

    Binary search over the binlog files by the time of their first transaction (each probe is a
    positioned read of the file's first events), then a scan of GTID events from the chosen
    file. Assumes transaction timestamps grow along the binlog, as they do on a primary (filtered
    replication can stamp a few seconds back; that only moves the start earlier).
    """
    files = [name for name, _ in session.binlog_files()]
    heads: dict[int, FileHead] = {}

    def head(index: int) -> FileHead:
        if index not in heads:
            heads[index] = read_file_head(settings, files[index])
        return heads[index]

    first = head(0)
    if timestamp <= first.started and not session.file_start(files[0]).is_empty():
        raise BinlogPurged(
            f"cannot start {session.endpoint.describe()} at timestamp {timestamp}: the oldest "
            f"binlog still held ({files[0]}) was opened at {first.started}, and earlier binlogs "
            f"were purged; start at {first.started + 1} or later, or from earliest",
            shard=session.endpoint.shard,
            requested=str(timestamp),
            oldest=str(first.started + 1),
        )
    low, high = 0, len(files) - 1  # find the last file whose first transaction is before T
    if head(0).key >= timestamp:
        high = 0
    while low < high:
        middle = (low + high + 1) // 2
        if head(middle).key < timestamp:
            low = middle
        else:
            high = middle - 1
    position = session.file_start(files[low])
    stream = _positioned_stream(settings, files[low])
    try:
        for event in stream:
            if isinstance(event, MariadbGtidEvent | GtidEvent):
                if event.timestamp >= timestamp:
                    return position
                _, _, gtid = gtid_of(event, session.flavor)
                position = advance(position, gtid)
    finally:
        stream.close()
    return position


def earliest_start(session: ShardSession) -> tuple[GTIDPosition, int]:
    """The position at the start of the oldest binlog held, and the time that file was opened."""
    name = session.binlog_files()[0][0]
    settings = connection_settings(session.endpoint, session.config)
    return session.file_start(name), read_file_head(settings, name).started


def check_start_available(session: ShardSession, start: GTIDPosition) -> None:
    """Refuse a start position whose next transactions were purged, or that the shard never
    reached (a position from another server history)."""
    endpoint = session.endpoint
    current, _ = session.current_position()
    if session.flavor is Flavor.MARIADB:
        first = session.file_start(session.binlog_files()[0][0])
        assert isinstance(first, MariaDBPosition) and isinstance(start, MariaDBPosition)
        assert isinstance(current, MariaDBPosition)
        missing = any((start.domain_seq(g.domain) or 0) < g.seq for g in first)
        ahead = any((current.domain_seq(g.domain) or g.seq) < g.seq for g in start)
    else:
        purged_text = str(session.query("SELECT @@global.gtid_purged")[0][0] or "")
        first = MySQLGTIDSet.parse(purged_text)
        missing = not position_contains(start, first)
        ahead = not position_contains(current, start)
    if missing:
        raise BinlogPurged(
            f"cannot start {endpoint.describe()} at GTID position {str(start) or '(empty)'}: "
            f"the binlogs after it were purged (the oldest binlog starts at {first}); start "
            "from earliest, from a later position, or re-snapshot the data",
            shard=endpoint.shard,
            requested=str(start),
            oldest=str(first),
        )
    if ahead:
        raise BinlogReadError(
            f"cannot start {endpoint.describe()} at GTID position {start}: the shard is only at "
            f"{current}; the position belongs to another server history"
        )
