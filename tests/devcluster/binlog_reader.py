"""Read a shard's binlog with python-mysql-replication, as transactions (test helper).

Reads in blocking mode up to the server's GTID position taken first, and stops there:

- MariaDB 10.11 drops a GTID-mode binlog dump opened with the non-blocking flag part-way through
  the binlog (the client sees "connection reset by peer" and python-mysql-replication silently
  reconnects from the start, forever). The end is `@@gtid_binlog_pos`.
- MySQL 8: the end is `@@GLOBAL.gtid_executed` (one server UUID on a development shard). The
  library cannot send an empty GTID set, so "the whole binlog" is a file dump from the first
  binlog file (the development servers never purge theirs). JSON columns come from the binlog
  in MySQL's binary form; with `updatestream.binlog.mysql_json` installed (as the binlog
  source does) python-mysql-replication hands them over as the text MySQL gives back for them.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from updatestream.binlog import mysql_json
from updatestream.core.gtid import MySQLGTIDSet
from updatestream.spec import Credentials

mysql_json.install()

_reader_ids = itertools.count(random.randint(10_000, 1_000_000))  # distinct per reader


def open_reader(host: str, port: int, creds: Credentials, **options: Any) -> BinLogStreamReader:
    """A blocking python-mysql-replication reader of the server's binlog, under a replica
    server id of its own; `options` are the reader's other arguments."""
    settings = {
        "host": host,
        "port": port,
        "user": creds.username,
        "password": creds.password,
        "read_timeout": 60,
        "ssl_disabled": True,
    }
    return BinLogStreamReader(
        connection_settings=settings, server_id=next(_reader_ids), blocking=True, **options
    )


@dataclass
class BinlogRow:
    schema: str
    table: str
    op: str  # insert, update, delete
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    timestamp: int  # of the row event's header


@dataclass
class BinlogTransaction:
    gtid: str
    timestamp: int  # of the GTID event
    rows: list[BinlogRow] = field(default_factory=list)
    xid_timestamp: int | None = None


def _end(conn: pymysql.connections.Connection, flavor: str) -> set[str]:
    """The GTIDs whose transactions end the read: MariaDB's `domain-server-seq` of each domain,
    MySQL's `uuid:N` of the last transaction of each UUID."""
    variable = "gtid_executed" if flavor == "mysql" else "gtid_binlog_pos"
    with conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{variable}")
        row = cur.fetchone()
    text = str(row[0] if row else "").replace("\n", "")
    if flavor == "mariadb":
        return {g for g in text.split(",") if g}
    return {f"{sid}:{ranges[-1][1]}" for sid, ranges in MySQLGTIDSet.parse(text).entries.items()}


def read_transactions(
    host: str, port: int, creds: Credentials, start: str = "", flavor: str = "mariadb"
) -> list[BinlogTransaction]:
    """Every row transaction after GTID position `start` ("" = the whole binlog) up to now."""
    conn = pymysql.connect(
        host=host, port=port, user=creds.username, password=creds.password, ssl_disabled=True
    )
    try:
        ends = _end(conn, flavor)
    finally:
        conn.close()
    if flavor == "mysql":
        done = MySQLGTIDSet.parse(start)
        ends = {g for g in ends if not done.contains_gtid(*_sid_gno(g))}
    elif ends <= set(start.split(",")):
        ends = set()
    if not ends:
        return []
    stream = open_reader(
        host,
        port,
        creds,
        is_mariadb=flavor == "mariadb",
        # MySQL: no GTID set is a dump of every binlog file (the library sends no empty set)
        auto_position=None if flavor == "mysql" and not start else start,
        only_events=[
            MariadbGtidEvent,
            GtidEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
            XidEvent,
            QueryEvent,
        ],
    )
    try:
        transactions = _transactions(stream, ends, flavor)
    finally:
        stream.close()
    return [tx for tx in transactions if tx.rows]


def _sid_gno(gtid: str) -> tuple[str, int]:
    sid, _, gno = gtid.rpartition(":")
    return sid, int(gno)


def _transactions(stream: Any, ends: set[str], flavor: str) -> list[BinlogTransaction]:
    transactions: list[BinlogTransaction] = []
    current: BinlogTransaction | None = None
    standalone = began = False
    for event in stream:
        if isinstance(event, MariadbGtidEvent | GtidEvent):
            gtid = event.gtid if flavor == "mysql" else str(event.gtid)
            current = BinlogTransaction(gtid, event.timestamp)
            transactions.append(current)
            standalone = bool(getattr(event, "flags", 0) & 1)
            began = False
            continue
        if current is None:
            continue
        if isinstance(event, QueryEvent) and event.query == "BEGIN":
            began = True
            continue
        ended = isinstance(event, XidEvent) or (
            isinstance(event, QueryEvent)
            and (standalone or event.query == "COMMIT" or (flavor == "mysql" and not began))
        )
        if isinstance(event, XidEvent):
            current.xid_timestamp = event.timestamp
        if ended:
            ends.discard(current.gtid)
            if not ends:
                break
        elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            _add_rows(current, event, flavor)
    return transactions


def _add_rows(tx: BinlogTransaction, event: Any, flavor: str) -> None:
    for row in event.rows:
        if isinstance(event, WriteRowsEvent):
            op, before, after = "insert", None, row["values"]
        elif isinstance(event, UpdateRowsEvent):
            op, before, after = "update", row["before_values"], row["after_values"]
        else:
            op, before, after = "delete", row["values"], None
        tx.rows.append(BinlogRow(event.schema, event.table, op, before, after, event.timestamp))
