"""Reading one shard's binary log: the layer under the Spark data source, free of Spark.

`BinlogRangeReader`: the transactions with `start < GTID <= end`, as ChangeEvents, in binlog
  order; it stops at the transaction that reaches `end` and never reads past it.

python-mysql-replication reconnects on its own after a lost connection, from the position it was
created with, which would silently re-read the binlog. The reader never lets it: the connection
factory it hands the library refuses a second stream connection, and the reader reconnects
itself from the position after the last transaction it finished. A transaction's rows are handed
out only once it has ended (filtered replication's copy marker is its last statement), so a
half-read transaction is simply read again. Every GTID is also checked against that position,
so a rewind would be an error, never a duplicate.

A table map event is decoded once per table id and binlog file (`freeze_schema`): the server
writes one before every rows event, and decoding MySQL's optional metadata (column names,
charsets) for each transaction was the largest cost of a followed MySQL binlog after waiting on
the socket. A table id names one table definition for the life of the server that wrote the
file: a DDL statement gives the table a new id, and a restarted server, whose ids start again,
writes a new file; so the map is emptied at each file's start (its format description event)
and at each rotation.

With `end=None` the reader follows the binlog without end (a blocking dump with server
heartbeats, see `updatestream.binlog.tailer`): `on_finish` hears of every finished transaction
and `close()`, from another thread, ends it at the next event or heartbeat.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pymysql
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from updatestream.binlog.config import ReaderConfig, ShardEndpoint
from updatestream.binlog.errors import (
    BinlogPurged,
    BinlogReadError,
    BinlogSettingsError,
    ShardUnreachable,
)
from updatestream.binlog.events import ChangeEvent
from updatestream.binlog.row_converter import EventRow, RowConverter, Transaction
from updatestream.binlog.session import (
    BinlogStream,
    SilentReconnect,
    advance,
    connection_settings,
    describe,
    flavor_of,
    gtid_of,
    retryable,
    server_id,
)
from updatestream.core.gtid import (
    Flavor,
    GTIDPosition,
    position_contains,
)

log = logging.getLogger(__name__)

_STREAM_EVENTS = [
    MariadbGtidEvent,
    GtidEvent,
    QueryEvent,
    XidEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    # never skipped in silence: both would otherwise read as a transaction without rows
    PartialUpdateRowsEvent,
    NotImplementedEvent,
    # read by the library for every rows event; handed to the loop only to be released
    TableMapEvent,
    # a binlog file starts: the table ids of the one before may name other tables in it
    FormatDescriptionEvent,
    RotateEvent,
]
TRANSACTION_PAYLOAD_EVENT = 40  # MySQL: a compressed transaction (binlog_transaction_compression)
_DML_PREFIXES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD DATA")


def _guarded_connect(opened: list[bool]) -> Callable[..., Any]:
    def connect(**kwargs: Any) -> Any:
        if kwargs.get("db") != "information_schema":  # the stream, not the control connection
            if opened:
                raise SilentReconnect(
                    "the binlog connection dropped; reconnecting from the last finished "
                    "transaction instead of the library's initial position"
                )
            opened.append(True)
        return pymysql.connect(**kwargs)

    return connect


class BinlogRangeReader:
    """The change events of one shard's transactions with `start < GTID <= end` (every
    transaction after `start`, without end, when `end` is None)."""

    def __init__(
        self,
        endpoint: ShardEndpoint,
        config: ReaderConfig,
        start: GTIDPosition,
        end: GTIDPosition | None,
        converter: RowConverter,
        *,
        sleep: Callable[[float], None] = time.sleep,
        on_finish: Callable[[Transaction], None] | None = None,
        heartbeat_seconds: float = 1.0,
    ) -> None:
        self.endpoint = endpoint
        self.flavor = flavor_of(endpoint)
        self.position = start  # after the last finished transaction
        self.end = end
        self.transactions = 0
        self.connections: list[str] = []  # the start position of every stream connection
        self._config = config
        self._settings: dict[str, Any] | None = None
        self._converter = converter
        self._sleep = sleep
        self._tx: Transaction | None = None
        self._done = end is not None and position_contains(start, end)
        self._on_finish = on_finish
        self._follow = end is None  # a blocking dump without end
        self._heartbeat = heartbeat_seconds
        self._closed = False
        self.last_event = time.monotonic()  # when the server last sent anything (heartbeats too)

    def close(self) -> None:
        """End a following read (from any thread): it returns at the next event or heartbeat."""
        self._closed = True

    def __iter__(self) -> Iterator[ChangeEvent]:
        return (ChangeEvent(*row) for row in self.rows())

    def rows(self) -> Generator[EventRow, None, None]:
        """The events as tuples in `ChangeEvent` field order (the fast path for Spark)."""
        failures = 0
        while not self._done and not self._closed:
            finished_before = self.transactions
            try:
                yield from self._read_once()
                if self._done or self._closed:
                    return
                reason = f"the binlog ended at {self.position} before {self.end}"
            except pymysql.err.MySQLError as exc:
                if self._closed:
                    return
                if not retryable(exc):
                    raise self._refused(exc) from None
                reason = describe(exc)
            except (SilentReconnect, OSError, struct.error) as exc:
                if self._closed:
                    return
                reason = describe(exc)
            if self._tx is not None:  # a half-read transaction: nothing given out, read again
                self._tx.discard()
                self._tx = None
            if self.transactions > finished_before:
                failures = 0
            failures += 1
            if failures > self._config.retry.max_retries:
                raise ShardUnreachable(
                    f"cannot read the binlog of {self.endpoint.describe()} after {failures} "
                    f"attempts (last position {self.position}): {reason}"
                )
            log.warning(
                "binlog read of %s interrupted (%s); resuming from %s",
                self.endpoint.describe(),
                reason,
                self.position,
            )
            self._sleep(self._config.retry.backoff(failures))

    def _refused(self, exc: pymysql.err.MySQLError) -> Exception:
        message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        if exc.args and exc.args[0] == 1236 and "purged" in message:
            return BinlogPurged(
                f"{self.endpoint.describe()} no longer holds the binlogs after {self.position} "
                f"({message}); restart from earliest or from a later position",
                shard=self.endpoint.shard,
                requested=str(self.position),
                oldest="unknown",
            )
        return BinlogReadError(
            f"{self.endpoint.describe()} refused to stream its binlog from {self.position}: "
            f"{describe(exc)}"
        )

    def _open(self) -> BinlogStream:
        if self._settings is None:
            self._settings = connection_settings(self.endpoint, self._config)
        self.connections.append(str(self.position))
        # following: the server's heartbeats give the loop a turn while the shard is idle
        return BinlogStream(
            connection_settings=dict(self._settings),
            server_id=server_id(),
            blocking=self._follow,
            slave_heartbeat=self._heartbeat if self._follow else None,
            auto_position=str(self.position),
            is_mariadb=self.flavor is Flavor.MARIADB,
            only_events=[*_STREAM_EVENTS, HeartbeatLogEvent] if self._follow else _STREAM_EVENTS,
            filter_non_implemented_events=False,
            freeze_schema=True,  # a known table id's map is not decoded again (see the module)
            enable_logging=False,
            pymysql_wrapper=_guarded_connect([]),
        )

    def _finish(self) -> Iterator[EventRow]:
        """The ended transaction's rows, then the reader moves past it."""
        tx = self._tx
        assert tx is not None
        yield from self._converter.finish(tx)
        self.position = tx.position
        self._tx = None
        self.transactions += 1
        if self._on_finish is not None:
            self._on_finish(tx)
        if self.end is not None and position_contains(self.position, self.end):
            self._done = True

    def _read_once(self) -> Iterator[EventRow]:
        stream = self._open()
        convert = self._converter.convert
        standalone = False
        began = False
        try:
            for event in stream:
                self.last_event = time.monotonic()
                if self._closed:
                    return
                if isinstance(event, PartialUpdateRowsEvent | NotImplementedEvent):
                    self._refuse_event(event)
                elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                    if self._tx is not None:
                        convert(event, self._tx)
                elif isinstance(event, XidEvent):
                    if self._tx is not None:
                        yield from self._finish()
                elif isinstance(event, MariadbGtidEvent | GtidEvent):
                    if self._tx is not None:  # no commit event seen: the GTID ends it
                        yield from self._finish()
                    if self._done or not self._begin(event):
                        return
                    standalone = bool(getattr(event, "flags", 0) & 1)
                    began = False
                elif isinstance(event, QueryEvent) and self._tx is not None:
                    began, ends = self._query(event, standalone, began)
                    if ends:
                        yield from self._finish()
                elif isinstance(event, FormatDescriptionEvent | RotateEvent):
                    stream.table_map.clear()
                _release(event)
                if self._done:
                    return
        finally:
            stream.close()

    def _refuse_event(self, event: Any) -> None:
        """A compressed transaction or a partial JSON update: its rows cannot be read, so the
        read stops with what to set, rather than take the transaction for an empty one."""
        gtid = self._tx.gtid if self._tx is not None else "?"
        where = f"transaction {gtid} on {self.endpoint.describe()}"
        if isinstance(event, PartialUpdateRowsEvent):
            raise BinlogSettingsError(
                f"{where} logs a JSON update as a partial update (binlog_row_value_options="
                "PARTIAL_JSON), which holds a diff, not the document; set "
                "binlog_row_value_options='' globally and stop sessions from setting it"
            )
        if event.event_type == TRANSACTION_PAYLOAD_EVENT:
            raise BinlogSettingsError(
                f"{where} is compressed (a Transaction_payload event: "
                "binlog_transaction_compression=ON), which the reader cannot decode; set "
                "binlog_transaction_compression=OFF globally and stop sessions from setting it"
            )

    def _begin(self, event: Any) -> bool:
        """A transaction starts; False when it lies beyond the end (the read is done)."""
        text, contained_in, gtid = gtid_of(event, self.flavor)
        if contained_in(self.position):
            raise BinlogReadError(
                f"the binlog stream of {self.endpoint.describe()} went back to "
                f"{text}, already read (position {self.position}); not re-reading"
            )
        if self.end is not None and not contained_in(self.end):
            self._done = True
            return False
        self._tx = Transaction(text, advance(self.position, gtid), int(event.timestamp))
        return True

    def _query(self, event: Any, standalone: bool, began: bool) -> tuple[bool, bool]:
        """A query event inside a transaction: (BEGIN seen, the transaction ends here)."""
        assert self._tx is not None
        text = event.query if isinstance(event.query, str) else bytes(event.query).decode()
        statement = text.lstrip().upper()
        if statement.startswith(_DML_PREFIXES):
            raise BinlogSettingsError(
                f"transaction {self._tx.gtid} on {self.endpoint.describe()} was logged as a "
                "statement, not as rows (a session ran with binlog_format=STATEMENT or MIXED); "
                "set binlog_format=ROW globally and stop sessions from overriding it"
            )
        if statement == "BEGIN":
            return True, False
        if statement == "COMMIT" or statement.startswith("XA COMMIT") or standalone:
            return began, True
        # a MySQL DDL: GTID, then the statement, no BEGIN
        ends = not began and self._tx.ordinal == 0 and self.flavor is Flavor.MYSQL
        return began, ends


def _release(event: Any) -> None:
    """Break the reference cycle between a read event and its packet (each refers to the other
    in python-mysql-replication), so both are freed at once by reference counting. Left to the
    cycle collector, every event of a followed binlog is garbage that full collections, which
    hold the GIL for tens of milliseconds, have to find."""
    if hasattr(event, "packet"):
        event.packet = None
