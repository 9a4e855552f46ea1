"""Read a shard's binlog with python-mysql-replication, as transactions (test helper).

MariaDB 10.11 drops a GTID-mode binlog dump opened with the non-blocking flag part-way through
the binlog (the client sees "connection reset by peer" and python-mysql-replication silently
reconnects from the start, forever), so this reads in blocking mode up to the server's
`@@gtid_binlog_pos` taken first, and stops there.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from updatestream.spec import Credentials

_reader_ids = itertools.count(random.randint(10_000, 1_000_000))  # distinct per reader


@dataclass
class BinlogRow:
    schema: str
    table: str
    op: str  # insert, update, delete
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    timestamp: int


@dataclass
class BinlogTransaction:
    gtid: str
    timestamp: int  # of the GTID event
    rows: list[BinlogRow] = field(default_factory=list)
    xid_timestamp: int | None = None


def read_transactions(
    host: str, port: int, creds: Credentials, start: str = ""
) -> list[BinlogTransaction]:
    """Every row transaction after GTID position `start` ("" = the whole binlog) up to now."""
    conn = pymysql.connect(host=host, port=port, user=creds.username, password=creds.password)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            row = cur.fetchone()
    finally:
        conn.close()
    ends = {g for g in str(row[0] if row else "").split(",") if g}
    if not ends or ends <= set(start.split(",")):
        return []
    stream = BinLogStreamReader(
        connection_settings={
            "host": host,
            "port": port,
            "user": creds.username,
            "password": creds.password,
            "read_timeout": 60,
        },
        server_id=next(_reader_ids),
        blocking=True,
        is_mariadb=True,
        auto_position=start,
        only_events=[
            MariadbGtidEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
            XidEvent,
            QueryEvent,
        ],
    )
    transactions: list[BinlogTransaction] = []
    current: BinlogTransaction | None = None
    standalone = False
    try:
        for event in stream:
            if isinstance(event, MariadbGtidEvent):
                current = BinlogTransaction(event.gtid, event.timestamp)
                transactions.append(current)
                standalone = bool(event.flags & 1)
                continue
            assert current is not None
            ended = isinstance(event, XidEvent) or (
                isinstance(event, QueryEvent) and (standalone or event.query == "COMMIT")
            )
            if isinstance(event, XidEvent):
                current.xid_timestamp = event.timestamp
            if ended:
                ends.discard(current.gtid)
                if not ends:
                    break
            elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                for row in event.rows:
                    if isinstance(event, WriteRowsEvent):
                        op, before, after = "insert", None, row["values"]
                    elif isinstance(event, UpdateRowsEvent):
                        op, before, after = "update", row["before_values"], row["after_values"]
                    else:
                        op, before, after = "delete", row["values"], None
                    current.rows.append(
                        BinlogRow(event.schema, event.table, op, before, after, event.timestamp)
                    )
    finally:
        stream.close()
    return [tx for tx in transactions if tx.rows]
