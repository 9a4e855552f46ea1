"""Every column type the source reads gives one value whichever way a row was read: a row's
binlog image and the snapshot's SELECT of it encode to the same JSON text, byte for byte, on
MariaDB and on MySQL 8 (FLOAT, DOUBLE, BIT, BINARY(n), VARBINARY, TIME, TIMESTAMP, DATETIME,
YEAR, DECIMAL, CHAR, spatial, JSON). On MySQL a JSON column is the server's own text of the
document, however awkward (doubles, big integers, DECIMAL, temporal and binary values, control
characters, documents too large for the small binary format)."""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Iterator

import pytest
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_jobs.source.options import SourceConfig, parse_options

from tests.conftest import ServerFactory, ServerFixture
from tests.jobs.test_source_start import single_shard_options
from updatestream.binlog.mysql_json import format_double
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import RowConverter
from updatestream.binlog.session import ShardSession, flavor_of
from updatestream.core.gtid import GTIDPosition
from updatestream.core.snapshot_plan import Chunk
from updatestream.core.token import EventToken
from updatestream.snapshot.chunks import ChunkReader
from updatestream.snapshot.tables import describe_table, last_key

TABLE = """CREATE TABLE commerce.typed (
  id BIGINT NOT NULL PRIMARY KEY, f FLOAT NULL, d DOUBLE NULL, b BIT(10) NULL, b1 BIT(1) NULL,
  bn BINARY(4) NULL, vb VARBINARY(8) NULL, t TIME(3) NULL, ts TIMESTAMP(6) NULL,
  dt DATETIME NULL, y YEAR NULL, dec_ DECIMAL(30,10) NULL, c CHAR(5) NULL, g GEOMETRY NULL,
  j JSON NULL) DEFAULT CHARSET=utf8mb4"""
ROWS = [
    "(1, 1.1, 0.1, b'1000000001', b'1', x'4100', x'00', '-12:03:04.5', "
    "'2020-01-01 00:00:00.5', '2020-02-29 23:59:59', 2020, -12345.0000000001, 'ab', "
    'ST_GeomFromText(\'LINESTRING(0 0, 1 1)\'), \'{"a": [1, 2.5, "é"], "bb": null}\')',
    "(2, 3.4e38, 1e300, b'0', b'0', x'00000000', x'', '838:59:59', NULL, NULL, 1901, 0, "
    "'', ST_GeomFromText('POINT(1 2)'), NULL)",
    "(3, -1.1e-30, -0.0, NULL, NULL, x'41424344', x'ffff', '00:00:00', "
    "'1970-01-01 00:00:01', '1000-01-01 00:00:00', NULL, 99999999999999999999.9999999999, "
    "'zz  ', NULL, '[1e21, 0.00001, -0.0, 1.0, 18446744073709551615, -9223372036854775808]')",
    "(4, 1.23456789, 1234567890123456.8, b'1111111111', NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, '{}')",
]
# MySQL builds JSON values no text spells: DECIMAL, dates, times, binary strings (opaque)
MYSQL_JSON = [
    "CAST(1.50 AS JSON)",
    "JSON_ARRAY(CAST('2020-01-02' AS DATE), CAST(-1.50 AS DECIMAL(5,2)), x'00ff', "
    "CAST('2020-01-02 03:04:05.5' AS DATETIME(6)), CAST('-12:00:01' AS TIME), CAST(0 AS JSON))",
    "JSON_OBJECT('x', CAST(0.000 AS DECIMAL(10,3)), 'yy', CAST(100 AS DECIMAL(10,0)), "
    "'z', CAST(b'101' AS JSON), 'geo', CAST(ST_GeomFromText('POINT(1 2)') AS JSON))",
]

# the typed table hashed on its id
TYPED_VSCHEMA = {
    "sharded": True,
    "vindexes": {"hash": {"type": "hash"}},
    "tables": {"typed": {"column_vindexes": [{"column": "id", "name": "hash"}]}},
}


@pytest.fixture(scope="module", params=FLAVORS)
def shard(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerFixture, SourceConfig, GTIDPosition]]:
    factory: ServerFactory = request.getfixturevalue(f"{request.param}_server_factory")
    fixture = factory.start(f"column-types-{request.param}")
    folder = tmp_path_factory.mktemp("types")
    config = parse_options(single_shard_options(fixture, folder, request.param, TYPED_VSCHEMA))
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("CREATE DATABASE commerce")
        cur.execute(TABLE)
        start = _position(config)
        cur.execute("INSERT INTO commerce.typed VALUES " + ", ".join(ROWS))
        awkward = json.dumps('a\x01\b\f\r\x1f\\"/\x7f é 🎉', ensure_ascii=False)
        cur.execute("UPDATE commerce.typed SET j = %s WHERE id = 2", (awkward,))
        if request.param == "mysql":
            for number, expression in enumerate(MYSQL_JSON, start=10):
                cur.execute(f"INSERT INTO commerce.typed (id, j) VALUES ({number}, {expression})")
            big = {f"k{i:05d}": ["x" * 20, i, i / 7] for i in range(2500)}  # > 64 KiB: large
            cur.execute("INSERT INTO commerce.typed (id, j) VALUES (20, %s)", (json.dumps(big),))
        cur.execute("UPDATE commerce.typed SET c = 'up' WHERE id = 4")
        cur.execute("ALTER TABLE commerce.typed ADD COLUMN tx TEXT, ADD COLUMN tv VARCHAR(5)")
        cur.execute("UPDATE commerce.typed SET tx = '', tv = IF(id = 1, '', 'x')")
        conn.commit()
    try:
        yield fixture, config, start
    finally:
        fixture.server.stop()


def _position(config: SourceConfig) -> GTIDPosition:
    with ShardSession(config.endpoint("-"), config.reader) as session:
        return session.current_position()[0]


def _binlog_images(config: SourceConfig, start: GTIDPosition) -> dict[str, str]:
    endpoint = config.endpoint("-")
    converter = RowConverter(config.reader, "-", flavor_of(endpoint))
    reader = BinlogRangeReader(endpoint, config.reader, start, _position(config), converter)
    return {event.pk or "": event.after or "" for event in reader}


def _snapshot_images(config: SourceConfig) -> dict[str, str]:
    endpoint = config.endpoint("-")
    with ShardSession(endpoint, config.reader) as session:
        info = describe_table(session, "commerce", "typed")
        last = last_key(session, info)
        position = session.current_position()[0]
    assert last is not None
    chunk = Chunk("t:typed", "-", "typed", None, last)
    reader = ChunkReader(config.reader, endpoint, chunk, EventToken(0, "-", position))
    return {row[4]: row[7] for row in reader.rows()}


def test_a_row_encodes_alike_from_the_binlog_and_from_the_snapshot(shard: tuple) -> None:
    _, config, start = shard
    binlog = _binlog_images(config, start)
    snapshot = _snapshot_images(config)
    assert len(binlog) >= 4 and set(binlog) == set(snapshot)
    differing = [
        (key, column, value, json.loads(snapshot[key])[column])
        for key in binlog
        for column, value in json.loads(binlog[key]).items()
        if json.loads(snapshot[key]).get(column) != value
    ]
    assert differing == []
    assert [key for key in binlog if binlog[key] != snapshot[key]] == []
    first = json.loads(binlog['{"id":1}'])
    assert first["f"] == 1.1 and first["b"] == 513 and first["b1"] == 1
    assert first["tx"] == "" and first["tv"] == ""  # empty text stays text
    assert first["bn"] == {"$base64": "QQAAAA=="}  # BINARY(4) keeps its trailing zero bytes
    assert json.loads(binlog['{"id":4}'])["f"] == 1.2345679


def test_a_json_column_is_the_servers_own_text(shard: tuple) -> None:
    fixture, config, start = shard
    binlog = _binlog_images(config, start)
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT id, CAST(j AS CHAR) FROM commerce.typed WHERE j IS NOT NULL")
        texts = {f'{{"id":{key}}}': text for key, text in cur.fetchall()}
    assert texts and {k: json.loads(binlog[k])["j"] for k in texts} == texts
    if fixture.server.flavor == "mysql":
        assert texts['{"id":3}'] == (
            "[1e21, 0.00001, -0.0, 1.0, 18446744073709551615, -9223372036854775808]"
        )
        assert texts['{"id":11}'].startswith('["2020-01-02", -1.50, "base64:type15:AP8=", ')


def test_doubles_are_written_as_mysql_writes_them(mysql_server: ServerFixture) -> None:
    """Random doubles of every magnitude against the server's text of each."""
    rng = random.Random(24)
    values = [float(v) for v in (0.0, 1e15, 1e-15, 1e16, 1e-16, 123456789012345678.0, 5e-324)]
    while len(values) < 4000:
        value = struct.unpack("<d", rng.randbytes(8))[0]
        if value == value and abs(value) != float("inf"):
            values.append(value)
    values += [rng.random() * 10.0**e for e in range(-300, 300, 3)]
    with mysql_server.connect() as conn, conn.cursor() as cur:
        for at in range(0, len(values), 500):
            part = values[at : at + 500]
            marks = ", ".join(["CAST(%s AS DOUBLE)"] * len(part))
            cur.execute(f"SELECT JSON_ARRAY({marks})", [repr(v) for v in part])
            texts = str(cur.fetchone()[0])[1:-1].split(", ")
            assert [format_double(v) for v in part] == texts
