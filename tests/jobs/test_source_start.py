"""Where a stream starts: by timestamp (binary search over the binlogs), earliest, GTID positions,
and the typed error when the binlogs it needs were purged. A real MariaDB of this module's own."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from updatestream_cli import manifests
from updatestream_cli.devcluster.sample_schema import VSCHEMA
from updatestream_jobs.source.binlog_ranges import ShardRange, read_shard_range
from updatestream_jobs.source.options import SourceConfig, parse_options
from updatestream_jobs.source.planner import BatchPlanner

from tests.conftest import MariaDBFixture, MariaDBServerFactory
from updatestream.binlog.errors import BinlogPurged
from updatestream.binlog.events import ChangeEvent
from updatestream.core.gtid import GTIDPosition, MariaDBPosition, parse_position
from updatestream.core.token import EventToken

FILES = 8


def single_shard_options(
    server: MariaDBFixture,
    folder: Path,
    flavor: str = "mariadb",
    vschema: dict[str, Any] = VSCHEMA,
) -> dict[str, str]:
    """Options for a one-shard keyspace `-` on `server` (of `flavor`, its tables as `vschema`
    says), with its admin user as the Secret."""
    server.admin_secret(folder / "secrets", "shard-admin")
    shard = manifests.shard("-", server.host, server.port, "shard-admin", flavor)
    keyspace = manifests.keyspace([shard], vschema)
    return {"keyspace": json.dumps(keyspace), "secretsDir": str(folder / "secrets")}


@pytest.fixture(scope="module")
def server(
    mariadb_server_factory: MariaDBServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MariaDBFixture, dict[str, str], str]]:
    """A server whose binlog holds two transactions per second over several seconds, one binlog
    file per second."""
    fixture = mariadb_server_factory.start("source-start")
    options = single_shard_options(fixture, tmp_path_factory.mktemp("start"))
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("RESET MASTER")
        cur.execute("CREATE DATABASE commerce")
        cur.execute(
            "CREATE TABLE commerce.users (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL)"
        )
        cur.execute("SELECT @@gtid_binlog_pos")
        after_ddl = str(cur.fetchone()[0])
        for second in range(FILES):
            time.sleep(1.0 - time.time() % 1.0 + 0.02)  # the start of the next second
            for row in range(2):
                cur.execute("INSERT INTO commerce.users VALUES (%s, 'r')", (second * 10 + row,))
            cur.execute("FLUSH BINARY LOGS")
    try:
        yield fixture, options, after_ddl
    finally:
        fixture.server.stop()


def config(options: dict[str, str], **extra: str) -> SourceConfig:
    return parse_options({**options, **extra})


def read_all(cfg: SourceConfig, start: GTIDPosition, end: GTIDPosition) -> list[ChangeEvent]:
    part = ShardRange(
        "-", EventToken(0, "-", start).dumps(), EventToken(0, "-", end).dumps(), False
    )
    return list(read_shard_range(cfg, part))


def resolve(cfg: SourceConfig) -> EventToken:
    planner = BatchPlanner(cfg)
    try:
        return planner.resolve(cfg.start)["-"]
    finally:
        planner.close()


def dumps_in_log(fixture: MariaDBFixture) -> list[str]:
    text = fixture.server.error_log.read_text(errors="replace")
    return re.findall(r"Start binlog_dump to slave_server\(\d+\), pos\(([^,]*), 4\)", text)


def test_start_by_timestamp_lands_on_the_first_transaction_at_or_after_it(server: tuple) -> None:
    fixture, options, after_ddl = server
    cfg = config(options)
    transactions = read_all(cfg, MariaDBPosition(), parse_position(fixture.server.gtid_position()))
    assert len(transactions) == 2 * FILES
    before: dict[int, str] = {}  # timestamp -> the position before its first transaction
    previous = after_ddl
    for event in transactions:
        before.setdefault(event.timestamp, previous)
        previous = event.gtid
    assert len(before) == FILES
    for timestamp, expected in before.items():
        token = resolve(config(options, start=str(timestamp)))
        assert (str(token.position), token.timestamp) == (expected, timestamp)
        first = read_all(cfg, token.position, parse_position(previous))[0]
        second = timestamp - min(before)
        assert first.timestamp == timestamp and first.pk == f'{{"id":{second * 10}}}'
    after_all = resolve(config(options, start=str(max(before) + 60)))
    assert str(after_all.position) == previous


def test_timestamp_search_reads_few_binlog_files(server: tuple) -> None:
    """A binary search over the files (plus one positioned scan), not a scan from the start."""
    fixture, options, _ = server
    files = len(fixture.server.binlog_files())
    assert files >= FILES
    middle = read_all(
        config(options), MariaDBPosition(), parse_position(fixture.server.gtid_position())
    )[FILES].timestamp
    seen = len(dumps_in_log(fixture))
    resolve(config(options, start=str(middle)))
    dumps = dumps_in_log(fixture)[seen:]
    assert all(name.startswith("mariadb-bin.") for name in dumps)  # positioned reads
    assert 2 <= len(dumps) <= 2 + files.bit_length()
    assert "mariadb-bin.000001" not in dumps[-1:]  # the final scan starts at a later file


def test_purged_binlogs_are_a_typed_error(server: tuple) -> None:
    fixture, options, _ = server
    cfg = config(options)
    everything = read_all(cfg, MariaDBPosition(), parse_position(fixture.server.gtid_position()))
    files = [name for name, _ in fixture.server.binlog_files()]
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute(f"PURGE BINARY LOGS TO '{files[4]}'")
    oldest = fixture.server.binlog_files()[0][0]
    assert oldest == files[4]
    with pytest.raises(BinlogPurged) as purged:
        resolve(config(options, start=str(everything[0].timestamp)))
    assert purged.value.shard == "-" and purged.value.requested == str(everything[0].timestamp)
    assert f"shard - (127.0.0.1:{fixture.port})" in str(purged.value)
    assert oldest in str(purged.value) and "earliest" in str(purged.value)
    with pytest.raises(BinlogPurged, match="purged"):
        resolve(config(options, start=json.dumps({"-": everything[1].gtid})))
    earliest = resolve(config(options, start="earliest"))
    remaining = read_all(cfg, earliest.position, parse_position(fixture.server.gtid_position()))
    # The oldest file held is the fifth: it starts with the transactions of the fifth second.
    assert [e.gtid for e in remaining] == [e.gtid for e in everything[-2 * (FILES - 4) :]]
    later = resolve(config(options, start=json.dumps({"-": remaining[0].gtid})))
    assert str(later.position) == remaining[0].gtid
