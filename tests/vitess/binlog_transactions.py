"""Read a tablet's MySQL 8 binlog with python-mysql-replication, as transactions (test helper).

Reads from the first binlog file up to the end position the server reports when the read
starts (`SHOW MASTER STATUS`), in blocking mode, and stops there. Unlike the development
cluster's reader it keeps every transaction (also those without rows, like DDL) and the
statements other than BEGIN; JSON values arrive as MySQL's text (`updatestream.binlog.mysql_json`,
installed as the binlog source installs it), so ledger digests compare.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysqlreplication.event import GtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from tests.devcluster.binlog_reader import BinlogRow, open_reader
from updatestream.binlog import mysql_json
from updatestream.spec import Credentials

mysql_json.install()
_ROW_EVENTS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}


@dataclass
class BinlogTransaction:
    gtid: str
    timestamp: int  # of the GTID event's header
    rows: list[BinlogRow] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # statements other than BEGIN
    xid_timestamp: int | None = None

    def tables(self) -> list[str]:
        return [f"{r.schema}.{r.table}" for r in self.rows]


def _binlog_bounds(host: str, port: int, creds: Credentials) -> tuple[str, str, int]:
    """The first binlog file, and the file and position the server writes at now."""
    conn = pymysql.connect(host=host, port=port, user=creds.username, password=creds.password)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            first = cur.fetchone()
            cur.execute("SHOW MASTER STATUS")
            end = cur.fetchone()
    finally:
        conn.close()
    assert first is not None and end is not None
    return str(first[0]), str(end[0]), int(end[1])


def read_transactions(host: str, port: int, creds: Credentials) -> list[BinlogTransaction]:
    """Every transaction in the server's binlogs, from the first file up to now."""
    first_file, end_file, end_pos = _binlog_bounds(host, port, creds)
    stream = open_reader(
        host,
        port,
        creds,
        is_mariadb=False,
        log_file=first_file,
        log_pos=4,
        resume_stream=True,
        only_events=[GtidEvent, QueryEvent, XidEvent, RotateEvent, *_ROW_EVENTS],
    )
    transactions: list[BinlogTransaction] = []
    current: BinlogTransaction | None = None
    try:
        for event in stream:
            if isinstance(event, GtidEvent):
                current = BinlogTransaction(gtid=event.gtid, timestamp=event.timestamp)
                transactions.append(current)
            elif isinstance(event, QueryEvent) and current is not None:
                text = event.query if isinstance(event.query, str) else event.query.decode()
                if text != "BEGIN":
                    current.queries.append(text)
            elif type(event) in _ROW_EVENTS and current is not None:
                _add_rows(current, event)
            elif isinstance(event, XidEvent) and current is not None:
                current.xid_timestamp = event.timestamp
            if (stream.log_file, stream.log_pos) >= (end_file, end_pos):
                break
    finally:
        stream.close()
    return transactions


def _add_rows(tx: BinlogTransaction, event: Any) -> None:
    op = _ROW_EVENTS[type(event)]
    for row in event.rows:
        if op == "update":
            before, after = row["before_values"], row["after_values"]
        elif op == "insert":
            before, after = None, row["values"]
        else:
            before, after = row["values"], None
        tx.rows.append(BinlogRow(event.schema, event.table, op, before, after, event.timestamp))
