"""Filtered replication: replay one source shard's transactions into the destination shards.

One `FilteredReplication` thread reads the source binlog (python-mysql-replication, MariaDB GTID
mode, blocking, with server heartbeats) from the lowest position any destination has applied
(right after the copy that is its `start_pos`: the snapshot, or earlier with a replay window, whose
transactions are then applied again over the copied rows), and for every source transaction:

- drops the rows a destination already has (its `_vt.vreplication.pos` contains the GTID);
- routes each row of the sample database to the destination owning its keyspace id;
- per destination with rows: one transaction that runs `SET TIMESTAMP = <source timestamp>`, then
  upserts its `_vt.vreplication` row (the source position after this transaction) as the FIRST
  statement, then applies the rows (multi-row INSERT ... ON DUPLICATE KEY UPDATE, DELETE by
  primary key). Position and data commit together, so a restart never applies a row twice.
- destinations without rows get a position-only transaction at most every `advance_every`
  seconds (and at once when a flush is requested, for the write cut-over).

Reconnects resume from the position of the last fully processed transaction (never from the
start of the binlog): `auto_position` is moved forward after every transaction, so the library's
own silent reconnect resumes there too, and reconnects are counted and bounded.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from updatestream.core.gtid import MariaDBGTID, MariaDBPosition
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema
from updatestream.spec import Credentials
from updatestream_cli.devcluster import sample_schema as schema
from updatestream_cli.devcluster.errors import ReshardError
from updatestream_cli.devcluster.local_server import Connection
from updatestream_cli.devcluster.rowchanges import (
    TRANSACTION_EVENTS,
    RowChange,
    execute_batched,
    row_images,
    row_statements,
)

log = logging.getLogger(__name__)

VREPLICATION_UPSERT = (
    "INSERT INTO `_vt`.`vreplication` "
    "(id, workflow, source_shard, pos, transaction_timestamp, time_updated, state) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
    "workflow = VALUES(workflow), source_shard = VALUES(source_shard), pos = VALUES(pos), "
    "transaction_timestamp = VALUES(transaction_timestamp), "
    "time_updated = VALUES(time_updated), state = VALUES(state)"
)


class ReplicationError(ReshardError):
    """Filtered replication stopped: the source binlog or a destination failed."""


@dataclass
class SourceTransaction:
    gtid: MariaDBGTID
    timestamp: int
    standalone: bool
    rows: list[RowChange] = field(default_factory=list)


@dataclass
class Destination:
    """One destination shard of a source: its range, its vreplication row and connection."""

    shard: str
    key_range: KeyRange
    vrep_id: int
    connect: Callable[[], Connection]
    pos: MariaDBPosition
    transaction_timestamp: int = 0
    last_write: float = 0.0
    conn: Connection | None = None
    applied_transactions: int = 0
    snapshot: MariaDBPosition | None = None  # the copy's snapshot, to count replayed transactions
    replayed: int = 0  # transactions with rows applied here that the snapshot already contains


class FilteredReplication:
    """Replicates one source shard into its destinations, in a background thread."""

    def __init__(
        self,
        *,
        workflow: str,
        source_shard: str,
        host: str,
        port: int,
        reader: Credentials,
        vschema: VSchema,
        destinations: Sequence[Destination],
        heartbeat: float = 1.0,
        advance_every: float = 1.0,
        max_reconnects: int = 20,
    ) -> None:
        self.workflow = workflow
        self.source_shard = source_shard
        self.host, self.port, self.reader = host, port, reader
        self.vschema = vschema
        self.destinations = list(destinations)
        self.heartbeat = heartbeat
        self.advance_every = advance_every
        self.max_reconnects = max_reconnects
        self.source_pos = self._start_position()
        self.last_timestamp = max((d.transaction_timestamp for d in self.destinations), default=0)
        self.transactions_read = 0
        self.reconnects = 0
        self.error: BaseException | None = None
        self._connects = 0
        self._stop = threading.Event()
        self._flush = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stream: BinLogStreamReader | None = None

    def _start_position(self) -> MariaDBPosition:
        """The lowest destination position: every other one contains it."""
        positions = [d.pos for d in self.destinations]
        for candidate in positions:
            if all(other.contains(candidate) for other in positions):
                return candidate
        raise ReplicationError(
            f"destinations of source shard {self.source_shard} are at incomparable positions "
            f"({', '.join(str(p) for p in positions)}); recreate the workflow"
        )

    # -- control --------------------------------------------------------------------------------

    def start(self) -> FilteredReplication:
        self._thread = threading.Thread(
            target=self._run_safely, name=f"vreplication-{self.source_shard}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for dest in self.destinations:
            if dest.conn is not None:
                with contextlib.suppress(Exception):
                    dest.conn.close()
                dest.conn = None

    def request_flush(self) -> None:
        """Write every destination's position now (used once the source is frozen)."""
        self._flush.set()

    def check(self) -> None:
        if self.error is not None:
            raise ReplicationError(
                f"filtered replication from shard {self.source_shard} failed: {self.error}; "
                "rerun the reshard to resume from _vt.vreplication"
            ) from self.error

    def caught_up(self, final: MariaDBPosition) -> bool:
        with self._lock:
            return all(d.pos.contains(final) for d in self.destinations)

    def lag(self, source_now: MariaDBPosition) -> list[dict[str, Any]]:
        """Per destination: applied position, transactions and seconds behind the source."""
        report = []
        now = time.time()
        with self._lock:
            for dest in self.destinations:
                behind = 0
                for gtid in source_now:
                    applied = dest.pos.domain_seq(gtid.domain) or 0
                    behind += max(0, gtid.seq - applied)
                report.append(
                    {
                        "source": self.source_shard,
                        "destination": dest.shard,
                        "pos": str(dest.pos),
                        "transactions_behind": behind,
                        "replayed": dest.replayed,
                        "seconds_behind": (
                            max(0.0, now - dest.transaction_timestamp) if behind else 0.0
                        ),
                    }
                )
        return report

    # -- the thread -----------------------------------------------------------------------------

    def _run_safely(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            log.exception("filtered replication from %s failed", self.source_shard)
            self.error = exc

    def _counting_connect(self, **kwargs: Any) -> Any:
        if kwargs.get("db") != "information_schema":  # the stream, not the control connection
            self._connects += 1
        return pymysql.connect(**kwargs)

    def _open_stream(self) -> BinLogStreamReader:
        return BinLogStreamReader(
            connection_settings={
                "host": self.host,
                "port": self.port,
                "user": self.reader.username,
                "password": self.reader.password,
                "read_timeout": max(30, int(self.heartbeat * 10)),
                "connect_timeout": 10,
            },
            server_id=random.randint(100_000, 2**31 - 1),  # unique per reader, or one is kicked
            blocking=True,
            is_mariadb=True,
            auto_position=str(self.source_pos),
            slave_heartbeat=self.heartbeat,
            pymysql_wrapper=self._counting_connect,
            only_events=[*TRANSACTION_EVENTS, HeartbeatLogEvent],
        )

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._stream = self._open_stream()
            try:
                self._consume(self._stream)
                failures = 0
            except pymysql.err.OperationalError as exc:
                failures += 1
                self.reconnects += 1
                if failures > 5 or self.reconnects > self.max_reconnects:
                    raise ReplicationError(
                        f"source shard {self.source_shard} ({self.host}:{self.port}) keeps "
                        f"dropping the binlog stream ({exc}); last position {self.source_pos}"
                    ) from None
                log.warning("binlog stream from %s lost (%s); resuming", self.source_shard, exc)
                time.sleep(min(5.0, 0.5 * failures))
            finally:
                with contextlib.suppress(Exception):
                    self._stream.close()
        self._advance(force=True)

    def _consume(self, stream: BinLogStreamReader) -> None:
        current: SourceTransaction | None = None
        stream_connects: int | None = None
        for event in stream:
            if stream_connects is None:
                stream_connects = self._connects
            elif self._connects > stream_connects:
                # python-mysql-replication reconnected by itself; it resumed from auto_position
                # (our last processed transaction), but bound how often that may happen.
                self.reconnects += self._connects - stream_connects
                stream_connects = self._connects
                current = None
                if self.reconnects > self.max_reconnects:
                    raise ReplicationError(
                        f"binlog stream from shard {self.source_shard} reconnected "
                        f"{self.reconnects} times; giving up at position {self.source_pos}"
                    )
            if isinstance(event, MariadbGtidEvent):
                current = SourceTransaction(
                    MariaDBGTID(event.domain_id, event.server_id, event.gtid_seq_no),
                    event.timestamp,
                    bool(event.flags & 1),
                )
            elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                if current is not None and event.schema == schema.DATABASE:
                    current.rows += self._row_changes(event)
            elif isinstance(event, XidEvent) or (
                isinstance(event, QueryEvent)
                and current is not None
                and (current.standalone or event.query == "COMMIT")
            ):
                if current is not None:
                    if isinstance(event, QueryEvent) and current.standalone:
                        log.info("%s: statement %s not replicated", self.source_shard, current.gtid)
                    self._complete(current)
                    stream.auto_position = str(self.source_pos)
                current = None
            self._advance(force=self._flush.is_set())
            if self._stop.is_set():
                return

    def _row_changes(self, event: Any) -> list[RowChange]:
        table = event.table
        if table not in schema.COLUMNS:
            return []
        changes: list[RowChange] = []
        for row in event.rows:
            before, after = row_images(event, row)
            new_ksid = None if after is None else self._ksid(table, after)
            if before is not None:
                old_ksid = self._ksid(table, before)
                if old_ksid != new_ksid:  # a delete, or the vindex column changed: the row moves
                    changes.append(RowChange(table, "delete", before, old_ksid))
            if after is not None and new_ksid is not None:
                changes.append(RowChange(table, "write", after, new_ksid))
        return changes

    def _ksid(self, table: str, values: dict[str, Any]) -> bytes:
        ksid = self.vschema.keyspace_id_for(table, values)
        if ksid is None:
            raise ReplicationError(
                f"row of {table} on {self.source_shard} has a NULL vindex column"
            )
        return ksid

    def _complete(self, tx: SourceTransaction) -> None:
        after = self.source_pos.advance(tx.gtid)
        for dest in self.destinations:
            if (dest.pos.domain_seq(tx.gtid.domain) or 0) >= tx.gtid.seq:
                continue  # applied before a restart
            rows = [r for r in tx.rows if dest.key_range.contains(r.keyspace_id)]
            if rows:
                self._write(dest, after, tx.timestamp, rows)
                if dest.snapshot is not None and (
                    (dest.snapshot.domain_seq(tx.gtid.domain) or 0) >= tx.gtid.seq
                ):
                    dest.replayed += 1
        with self._lock:
            self.source_pos = after
            self.last_timestamp = tx.timestamp
            self.transactions_read += 1

    def _advance(self, force: bool = False) -> None:
        now = time.monotonic()
        for dest in self.destinations:
            if dest.pos.contains(self.source_pos):
                continue
            if force or now - dest.last_write >= self.advance_every:
                self._write(dest, self.source_pos, self.last_timestamp, [])

    def _write(
        self, dest: Destination, pos: MariaDBPosition, timestamp: int, rows: list[RowChange]
    ) -> None:
        if dest.conn is None:
            dest.conn = dest.connect()
        conn = dest.conn
        try:
            vreplication = (
                dest.vrep_id,
                self.workflow,
                self.source_shard,
                str(pos),
                timestamp,
                int(time.time()),
                "Running",
            )
            with conn.cursor() as cur:
                # One destination transaction (autocommit is off): the source timestamp, the
                # vreplication row first, then the rows, then COMMIT; sent in one round trip
                # unless it is large.
                execute_batched(
                    cur,
                    [
                        ("SET TIMESTAMP = %s", (timestamp,)),
                        (VREPLICATION_UPSERT, vreplication),
                        *row_statements(rows),
                        ("COMMIT", None),
                    ],
                )
        except pymysql.err.MySQLError:
            with contextlib.suppress(Exception):
                conn.close()
            dest.conn = None
            raise
        with self._lock:
            dest.pos = pos
            dest.transaction_timestamp = timestamp
            dest.last_write = time.monotonic()
            dest.applied_transactions += 1
