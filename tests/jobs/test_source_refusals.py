"""The source refuses, with a typed error naming the shard, what it cannot stream faithfully:
servers not logging full row images with metadata, statement-logged transactions, tables the
VSchema does not route, and shards it cannot reach."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from updatestream_jobs.source.options import SourceConfig, parse_options
from updatestream_jobs.source.planner import BatchPlanner

from tests.conftest import MariaDBFixture, MariaDBServerFactory
from tests.jobs.test_source_start import single_shard_options
from updatestream.binlog.errors import BinlogSettingsError, ShardUnreachable, UnknownTable
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import RowConverter
from updatestream.binlog.session import flavor_of
from updatestream.core.gtid import GTIDPosition, parse_position
from updatestream.core.start import Start
from updatestream.core.vschema import VSchemaError


def resolve_now(config: SourceConfig) -> None:
    planner = BatchPlanner(config)
    try:
        planner.resolve(Start("now"))
    finally:
        planner.close()


def reader(config: SourceConfig, start: GTIDPosition, end: GTIDPosition) -> BinlogRangeReader:
    endpoint = config.endpoint("-")
    converter = RowConverter(config.reader, "-", flavor_of(endpoint))
    return BinlogRangeReader(endpoint, config.reader, start, end, converter, sleep=lambda _: None)


@pytest.fixture(scope="module")
def misconfigured(
    mariadb_server_factory: MariaDBServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MariaDBFixture, dict[str, str]]]:
    fixture = mariadb_server_factory.start(
        "source-misconfigured",
        extra_args=[
            "--binlog-format=STATEMENT",
            "--binlog-row-image=MINIMAL",
            "--binlog-row-metadata=MINIMAL",
        ],
    )
    try:
        yield fixture, single_shard_options(fixture, tmp_path_factory.mktemp("misconfigured"))
    finally:
        fixture.server.stop()


def test_refuses_each_binlog_setting_naming_shard_address_and_fix(misconfigured: tuple) -> None:
    fixture, options = misconfigured
    config = parse_options(options)
    where = f"shard - (127.0.0.1:{fixture.port})"
    expected = [
        ("binlog_format", "STATEMENT", "ROW", f"binlog_format is STATEMENT on {where}; set "
         "binlog_format=ROW"),
        ("binlog_row_image", "MINIMAL", "FULL", f"binlog_row_image is MINIMAL on {where}; set "
         "binlog_row_image=FULL"),
        ("binlog_row_metadata", "MINIMAL", "FULL", f"binlog_row_metadata is MINIMAL on {where}; "
         "set binlog_row_metadata=FULL"),
    ]  # fmt: skip
    with fixture.connect() as conn, conn.cursor() as cur:
        for variable, _, good, message in expected:
            with pytest.raises(BinlogSettingsError) as refused:
                resolve_now(config)
            assert str(refused.value) == message
            assert fixture.admin.password not in str(refused.value)
            cur.execute(f"SET GLOBAL {variable} = '{good}'")
    resolve_now(config)  # all three fixed: accepted


def logged_range(cur: Any, *statements: str) -> tuple[GTIDPosition, GTIDPosition]:
    """Run the statements; the server's binlog positions before and after them."""
    cur.execute("SELECT @@gtid_binlog_pos")
    start = parse_position(str(cur.fetchone()[0]))
    for statement in statements:
        cur.execute(statement)
    cur.execute("SELECT @@gtid_binlog_pos")
    return start, parse_position(str(cur.fetchone()[0]))


def test_refuses_a_statement_logged_transaction(
    mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    config = parse_options(single_shard_options(mariadb_server, tmp_path))
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS source_refusals")
        cur.execute("CREATE TABLE IF NOT EXISTS source_refusals.users (id BIGINT PRIMARY KEY)")
        start, end = logged_range(
            cur,
            "SET SESSION binlog_format = 'STATEMENT'",
            "INSERT INTO source_refusals.users VALUES (4242)",
        )
    with pytest.raises(BinlogSettingsError, match="logged as a statement") as refused:
        list(reader(config, start, end))
    assert f"shard - (127.0.0.1:{mariadb_server.port})" in str(refused.value)


def test_refuses_a_table_without_primary_vindex(
    mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    options = single_shard_options(mariadb_server, tmp_path)
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS source_refusals")
        cur.execute("CREATE TABLE IF NOT EXISTS source_refusals.unrouted (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE IF NOT EXISTS source_refusals.users (id BIGINT PRIMARY KEY)")
        start, end = logged_range(
            cur,
            "INSERT INTO source_refusals.unrouted VALUES (1)",
            "INSERT INTO source_refusals.users VALUES (1)",
        )
    with pytest.raises(
        UnknownTable, match=r"source_refusals\.unrouted, which has no primary vindex"
    ):
        list(reader(parse_options(options), start, end))
    with pytest.raises(VSchemaError, match="unrouted"):
        parse_options({**options, "tables": "users,unrouted"})
    only_users = list(reader(parse_options({**options, "tables": "users"}), start, end))
    assert [(e.table, e.pk) for e in only_users] == [("users", '{"id":1}')]
    assert only_users[0].tx_index == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_shard_after_bounded_retries(
    mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    options = single_shard_options(mariadb_server, tmp_path)
    keyspace = json.loads(options["keyspace"])
    port = free_port()
    keyspace["spec"]["shards"][0]["mysql"]["port"] = port
    config = parse_options(
        {
            **options,
            "keyspace": json.dumps(keyspace),
            "maxRetries": "2",
            "connectTimeoutSeconds": "2",
        }
    )
    with pytest.raises(ShardUnreachable) as control:
        resolve_now(config)
    assert str(control.value).startswith(
        f"cannot reach shard - (127.0.0.1:{port}) after 3 attempts"
    )
    stream = reader(config, parse_position("0-1-1"), parse_position("0-1-5"))
    with pytest.raises(ShardUnreachable) as binlog:
        list(stream)
    assert f"binlog of shard - (127.0.0.1:{port}) after 3 attempts" in str(binlog.value)
    assert len(stream.connections) == 3 and set(stream.connections) == {"0-1-1"}
