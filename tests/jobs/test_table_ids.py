"""The reader decodes a table map once per table id and binlog file: rows still read as their own
table across a DDL statement (the table's new id) and across a server restart, after which the
server hands out ids from the start again, so one id names another table in the next file."""

from __future__ import annotations

import json
from pathlib import Path

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import TableMapEvent
from updatestream_jobs.source.options import parse_options

from tests.conftest import MySQLFixture, MySQLServerFactory
from tests.jobs.test_source_mysql import _logged, options_for, position
from tests.jobs.test_source_refusals import reader
from updatestream.binlog.events import ChangeEvent
from updatestream.core.gtid import MySQLGTIDSet


def table_ids(fixture: MySQLFixture) -> list[tuple[int, str]]:
    """(table id, table) of every table map event in the server's binlogs, in order."""
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        first = cur.fetchall()[0][0]
    settings = {"host": fixture.host, "port": fixture.port, "user": fixture.admin.username,
                "password": fixture.admin.password}  # fmt: skip
    stream = BinLogStreamReader(connection_settings=settings, server_id=98765, blocking=False,
                                log_file=first, log_pos=4, resume_stream=True,
                                only_events=[TableMapEvent], only_schemas=["commerce"])  # fmt: skip
    try:
        return [(event.table_id, event.table) for event in stream]
    finally:
        stream.close()


def rows(events: list[ChangeEvent]) -> list[tuple[str | None, dict[str, object]]]:
    return [(e.table, json.loads(e.after or "{}")) for e in events]


def test_rows_read_as_their_table_across_a_ddl_and_a_restart_that_reuses_table_ids(
    mysql_server_factory: MySQLServerFactory, tmp_path: Path
) -> None:
    server = mysql_server_factory.start("mysql-table-ids")
    try:
        read_across_a_ddl_and_a_restart(server, tmp_path)
    finally:
        server.server.stop()


def read_across_a_ddl_and_a_restart(server: MySQLFixture, tmp_path: Path) -> None:
    options = options_for(server, tmp_path)
    _logged(
        server,
        "CREATE DATABASE commerce",
        "CREATE TABLE commerce.users (id BIGINT PRIMARY KEY, name VARCHAR(20))",
        "CREATE TABLE commerce.orders (order_id BIGINT PRIMARY KEY, user_id BIGINT, n INT)",
    )
    start = position(server)
    _logged(server, "INSERT INTO commerce.users VALUES (1, 'before')")
    _logged(server, "ALTER TABLE commerce.users ADD COLUMN city VARCHAR(10)")
    _logged(server, "INSERT INTO commerce.users VALUES (2, 'altered', 'x')")
    server.server.stop()
    server.server.start()
    before = table_ids(server)
    assert [table for _, table in before] == ["users", "users"]
    assert before[0][0] != before[1][0]  # the DDL: a new id
    # The restarted server counts ids from the start again: orders, reopened each time, takes
    # ids until it takes one users had before.
    orders = []
    for number in range(1, 400):
        _logged(
            server,
            "FLUSH LOCAL TABLES commerce.orders",
            f"INSERT INTO commerce.orders VALUES ({number}, 2, 7)",
        )
        orders.append(("orders", {"order_id": number, "user_id": 2, "n": 7}))
        if table_ids(server)[-1][0] >= before[0][0]:
            break
    assert table_ids(server)[-1][0] in {i for i, _ in before}
    _logged(server, "INSERT INTO commerce.users VALUES (3, 'restarted', 'y')")
    end: MySQLGTIDSet = position(server)
    read = list(reader(parse_options(options), start, end))
    assert rows(read) == [
        ("users", {"id": 1, "name": "before"}),
        ("users", {"id": 2, "name": "altered", "city": "x"}),
        *orders,
        ("users", {"id": 3, "name": "restarted", "city": "y"}),
    ]
