"""The source on MySQL 8 as it is: the settings it needs, each refused with what to set; the
transactions it cannot read (compressed, partial JSON updates) refused where they appear, never
taken for empty ones; every start (`now`, `earliest` from the empty GTID set, a timestamp, a GTID
set of several server UUIDs); and purged binlogs as a typed error naming the shard."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from updatestream_jobs.source.options import SourceConfig, parse_options

from tests.conftest import MySQLFixture, MySQLServerFactory
from tests.jobs.test_source_refusals import reader, resolve_now
from tests.jobs.test_source_start import read_all, resolve, single_shard_options
from updatestream.binlog.errors import BinlogPurged, BinlogSettingsError
from updatestream.binlog.session import ShardSession
from updatestream.core.gtid import MySQLGTIDSet

SECONDS = 6
OTHER_PRIMARY = str(uuid.UUID(int=0x5EED))  # a former primary of the shard


def options_for(fixture: MySQLFixture, folder: Path, **extra: str) -> dict[str, str]:
    return {**single_shard_options(fixture, folder, flavor="mysql"), **extra}


def position(fixture: MySQLFixture) -> MySQLGTIDSet:
    return MySQLGTIDSet.parse(fixture.server.gtid_position())


@pytest.fixture(scope="module")
def misconfigured(
    mysql_server_factory: MySQLServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MySQLFixture, dict[str, str]]]:
    fixture = mysql_server_factory.start(
        "mysql-misconfigured",
        extra_args=[
            "--gtid-mode=OFF",
            "--enforce-gtid-consistency=OFF",
            "--binlog-row-image=NOBLOB",
            "--binlog-transaction-compression=ON",
            "--binlog-row-value-options=PARTIAL_JSON",
        ],
    )
    try:
        yield fixture, options_for(fixture, tmp_path_factory.mktemp("mysql-misconfigured"))
    finally:
        fixture.server.stop()


def test_refuses_each_mysql_setting_naming_shard_address_and_fix(misconfigured: tuple) -> None:
    fixture, options = misconfigured
    config = parse_options(options)
    where = f"shard - (127.0.0.1:{fixture.port})"
    expected = [
        (f"binlog_row_image is NOBLOB on {where}; set binlog_row_image=FULL",
         ["SET GLOBAL binlog_row_image = 'FULL'"]),
        (f"enforce_gtid_consistency is OFF on {where}; set enforce_gtid_consistency=ON",
         ["SET GLOBAL enforce_gtid_consistency = ON"]),
        (f"gtid_mode is OFF on {where}; set gtid_mode=ON",
         [f"SET GLOBAL gtid_mode = {mode}" for mode in ("OFF_PERMISSIVE", "ON_PERMISSIVE", "ON")]),
        (f"binlog_transaction_compression is ON on {where}; set "
         "binlog_transaction_compression=OFF", ["SET GLOBAL binlog_transaction_compression = OFF"]),
        (f"binlog_row_value_options is PARTIAL_JSON on {where}; set binlog_row_value_options='' "
         "(no PARTIAL_JSON)", ["SET GLOBAL binlog_row_value_options = ''"]),
    ]  # fmt: skip
    with fixture.connect() as conn, conn.cursor() as cur:
        for message, fixes in expected:
            with pytest.raises(BinlogSettingsError) as refused:
                resolve_now(config)
            assert str(refused.value) == message
            assert fixture.admin.password not in str(refused.value)
            for statement in fixes:
                cur.execute(statement)
    resolve_now(config)  # all fixed: accepted


def _logged(fixture: MySQLFixture, *statements: str) -> tuple[MySQLGTIDSet, MySQLGTIDSet]:
    before = position(fixture)
    with fixture.connect() as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        conn.commit()
    return before, position(fixture)


@pytest.fixture(scope="module")
def shard(
    mysql_server_factory: MySQLServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MySQLFixture, dict[str, str], MySQLGTIDSet, MySQLGTIDSet]]:
    """A MySQL shard that had another primary first (its GTIDs are in the set too), then two
    transactions per second of its own over several seconds, one binlog file per second."""
    fixture = mysql_server_factory.start("mysql-source")
    options = options_for(fixture, tmp_path_factory.mktemp("mysql-source"))
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("RESET MASTER")
        cur.execute("CREATE DATABASE commerce")
        cur.execute("CREATE TABLE commerce.users (id BIGINT PRIMARY KEY, name VARCHAR(20))")
        for number in range(1, 4):  # what the former primary wrote, replicated here
            cur.execute(f"SET gtid_next = '{OTHER_PRIMARY}:{number}'")
            cur.execute("INSERT INTO commerce.users VALUES (%s, 'old')", (1000 + number,))
            conn.commit()
        cur.execute("SET gtid_next = 'AUTOMATIC'")
        after_setup = position(fixture)
        for second in range(SECONDS):
            time.sleep(1.0 - time.time() % 1.0 + 0.02)
            for row in range(2):
                cur.execute("INSERT INTO commerce.users VALUES (%s, 'r')", (second * 10 + row,))
                conn.commit()
            cur.execute("FLUSH BINARY LOGS")
    try:
        yield fixture, options, after_setup, position(fixture)
    finally:
        fixture.server.stop()


def config(options: dict[str, str], **extra: str) -> SourceConfig:
    return parse_options({**options, **extra})


def test_earliest_streams_from_the_empty_gtid_set(shard: tuple) -> None:
    fixture, options, _, _ = shard
    earliest = resolve(config(options, start="earliest"))
    assert str(earliest.position) == ""  # the first binlog was never purged
    end = MySQLGTIDSet.parse(fixture.server.gtid_position())
    events = read_all(config(options), earliest.position, end)
    assert [e.pk for e in events[:3]] == [f'{{"id":{1000 + n}}}' for n in range(1, 4)]
    assert len(events) == 3 + 2 * SECONDS
    assert str(events[-1].gtid) == str(end)


def test_a_gtid_set_of_two_primaries_and_a_timestamp_start_exactly(shard: tuple) -> None:
    fixture, options, after_setup, _ = shard
    assert OTHER_PRIMARY in str(after_setup) and "," in str(after_setup)
    cfg = config(options)
    own = read_all(cfg, after_setup, position(fixture))
    assert len(own) == 2 * SECONDS
    started = resolve(config(options, start=json.dumps({"-": str(after_setup)})))
    assert started.position == after_setup
    previous = after_setup
    firsts: dict[int, Any] = {}  # timestamp -> the position before its first transaction
    for event in own:
        firsts.setdefault(event.timestamp, previous)
        previous = MySQLGTIDSet.parse(event.gtid)
    for timestamp, expected in firsts.items():
        token = resolve(config(options, start=str(timestamp)))
        assert token.position == expected
        first = read_all(cfg, token.position, position(fixture))[0]
        assert first.timestamp == timestamp
    now = resolve(config(options, start="now"))
    assert now.position == position(fixture)


def test_a_compressed_transaction_is_refused_where_it_appears(shard: tuple) -> None:
    fixture, options, _, _ = shard
    start, end = _logged(
        fixture,
        "SET SESSION binlog_transaction_compression = ON",
        "INSERT INTO commerce.users VALUES (5001, 'zipped')",
    )
    with pytest.raises(BinlogSettingsError, match="binlog_transaction_compression=OFF") as no:
        list(reader(config(options), start, end))
    assert f"shard - (127.0.0.1:{fixture.port})" in str(no.value)
    assert str(end).rpartition(":")[2].rpartition("-")[2] in str(no.value)  # its GTID


def test_a_partial_json_update_is_refused_where_it_appears(shard: tuple) -> None:
    fixture, options, _, _ = shard
    _logged(fixture, "ALTER TABLE commerce.users ADD COLUMN doc JSON")
    _logged(fixture, "UPDATE commerce.users SET doc = '{\"a\": [1, 2]}' WHERE id = 1001")
    start, end = _logged(
        fixture,
        "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
        "UPDATE commerce.users SET doc = JSON_SET(doc, '$.a[0]', 5) WHERE id = 1001",
    )
    with pytest.raises(BinlogSettingsError, match="PARTIAL_JSON"):
        list(reader(config(options), start, end))


def test_purged_binlogs_name_the_shard_and_what_to_do(shard: tuple) -> None:
    fixture, options, after_setup, traffic_end = shard
    files = [name for name, _ in fixture.server.binlog_files()]
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute(f"PURGE BINARY LOGS TO '{files[3]}'")
    where = f"shard - (127.0.0.1:{fixture.port})"
    with pytest.raises(BinlogPurged) as by_gtid:
        resolve(config(options, start=json.dumps({"-": str(after_setup)})))
    assert by_gtid.value.shard == "-" and where in str(by_gtid.value)
    assert "earliest" in str(by_gtid.value)
    with pytest.raises(BinlogPurged) as reading:  # a read past the start checks
        list(reader(config(options), after_setup, position(fixture)))
    assert where in str(reading.value) and "earliest" in str(reading.value)
    assert "purged" in str(reading.value)
    earliest = resolve(config(options, start="earliest"))
    with ShardSession(config(options).endpoint("-"), config(options).reader) as session:
        purged = str(session.query("SELECT @@GLOBAL.gtid_purged")[0][0]).replace("\n", "")
    assert earliest.position == MySQLGTIDSet.parse(purged)
    remaining = read_all(config(options), earliest.position, traffic_end)
    assert remaining and all(e.pk != '{"id":1001}' for e in remaining)
