"""The mirror sink against real servers: a MariaDB source shard (for the column types) and a
mirror of its own, MariaDB or MySQL 8 (every test runs on both), that is stopped and started
again in one test."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from updatestream_cli import manifests
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_jobs.sinks import SINKS, SinkContext, build_sinks
from updatestream_jobs.sinks.mirror_sink import MirrorSink
from updatestream_jobs.sinks.sink import (
    BatchContext,
    MirrorSinkSchemaError,
    SinkError,
    SinkUnavailable,
)

from harness.accounts import write_secret
from harness.sink_events import ShardLog, final_rows, two_shard_workload
from tests.concurrency import run_at_once
from tests.conftest import MariaDBFixture, ServerFactory
from updatestream import spec
from updatestream.binlog.events import ChangeEvent, encode_value
from updatestream.core.gtid import MariaDBPosition
from updatestream.core.token import SourceProvenance
from updatestream.mirror import mirror_writer

USERS = (
    "CREATE TABLE users (id BIGINT NOT NULL, name VARCHAR(100) CHARACTER SET utf8mb4 NOT NULL "
    "DEFAULT '', visits INT NOT NULL DEFAULT 0, PRIMARY KEY (id)) ENGINE=InnoDB"
)
ITEMS = (
    "CREATE TABLE items (shop VARCHAR(20) NOT NULL, code VARBINARY(16) NOT NULL, "
    "price DECIMAL(10,2) NULL, tags SET('a','b','c') NULL, seen DATETIME(6) NULL, "
    "doc JSON NULL, PRIMARY KEY (shop, code))"
)


@pytest.fixture(scope="module", params=FLAVORS)
def mirror_server(request: pytest.FixtureRequest) -> MariaDBFixture:
    """The mirror's own server of each flavor (a test stops and starts it)."""
    factory: ServerFactory = request.getfixturevalue(f"{request.param}_server_factory")
    return factory.start(f"mirror-sink-{request.param}")


@pytest.fixture(scope="module")
def secrets_dir(
    tmp_path_factory: pytest.TempPathFactory,
    mariadb_server: MariaDBFixture,
    mirror_server: MariaDBFixture,
) -> Path:
    root = tmp_path_factory.mktemp("secrets")
    mariadb_server.admin_secret(root, "source")
    mirror_server.admin_secret(root, "mirror")
    return root


@pytest.fixture
def source(mariadb_server: MariaDBFixture) -> Iterator[str]:
    """A source database of the test's own with `users` and `items`."""
    database = f"src_{uuid.uuid4().hex[:8]}"
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"USE {database}")
        cur.execute(USERS)
        cur.execute(ITEMS)
    yield database
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {database}")


def keyspace(server: MariaDBFixture) -> spec.Keyspace:
    shard = manifests.shard("-", server.host, server.port, "source")
    return spec.Keyspace.model_validate(manifests.keyspace([shard], {"sharded": False}))


def make_sink(
    source_server: MariaDBFixture,
    mirror: MariaDBFixture,
    secrets: Path,
    source_db: str,
    registry: CollectorRegistry | None = None,
    **extra: Any,
) -> MirrorSink:
    config = spec.MirrorSink.model_validate(
        {
            "type": "mirror",
            "mysql": {"host": mirror.host, "port": mirror.port},
            "database": f"m_{source_db}",
            "credentialsSecret": {"name": "mirror"},
            "sourceDatabase": source_db,
            **extra,
        }
    )
    sink = MirrorSink(
        config, secrets_dir=secrets, keyspace=keyspace(source_server), registry=registry
    )
    sink.open()
    return sink


def live(mirror: MariaDBFixture, source_db: str, table: str = "users") -> dict[int, dict[str, Any]]:
    with mirror.connect(f"m_{source_db}") as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table}_live")
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def stored(mirror: MariaDBFixture, source_db: str) -> dict[int, tuple[Any, ...]]:
    with mirror.connect(f"m_{source_db}") as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, visits, _us_deleted, _us_ts, _us_shard FROM users")
        return {row[0]: row for row in cur.fetchall()}


def expected_users(events: list[ChangeEvent]) -> dict[int, dict[str, Any]]:
    rows = final_rows(events).get("users", {})
    return {
        r["id"]: {"id": r["id"], "name": r.get("name", ""), "visits": r.get("visits", 0)}
        for r in rows.values()
    }


@pytest.fixture
def sink(
    mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, secrets_dir: Path, source: str
) -> MirrorSink:
    """The mirror sink of the test's source database, into the mirror server."""
    return make_sink(mariadb_server, mirror_server, secrets_dir, source)


def ctx(batch_id: int, replay: bool = False) -> BatchContext:
    """Batch `batch_id` of stream s, key range `-`."""
    return BatchContext("s", "-", batch_id, replay=replay)


def alter_users(source_server: MariaDBFixture, source_db: str, change: str) -> None:
    """Change the source's `users` table: `ALTER TABLE users <change>`."""
    with source_server.connect(source_db) as conn, conn.cursor() as cur:
        cur.execute(f"ALTER TABLE users {change}")


def user(id_: int, name: str, visits: int = 0) -> dict[str, Any]:
    return {"id": id_, "name": name, "visits": visits}


def test_the_sink_is_registered_and_built_from_its_spec(
    mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, secrets_dir: Path
) -> None:
    assert SINKS["mirror"] == "updatestream_jobs.sinks.mirror_sink:MirrorSink"
    config = spec.MirrorSink.model_validate(
        {"type": "mirror", "mysql": {"host": "db"}, "credentialsSecret": {"name": "m"}}
    )
    assert config.tombstone_horizon == 7 * 86400 and config.table_prefix == ""
    context = SinkContext("commerce", secrets_dir, keyspace_spec=keyspace(mariadb_server))
    (sink,) = build_sinks([config], context)
    assert isinstance(sink, MirrorSink) and sink.name == "mirror(db:3306/mirror)"


def test_batches_apply_and_a_replay_changes_nothing(
    sink: MirrorSink, mirror_server: MariaDBFixture, source: str
) -> None:
    work = two_shard_workload()
    for index, batch in enumerate(work.batches):
        first = sink.write_batch(batch, ctx(index))
        before = stored(mirror_server, source)
        again = sink.write_batch(batch, ctx(index, replay=True))
        assert stored(mirror_server, source) == before
        assert again.written == 0 and again.duplicates_delivered == 0
        assert again.skipped >= first.written
    sink.close()
    assert live(mirror_server, source) == expected_users(work.unique)
    # the two hop copies of the last batch are skipped: one compares equal to the row it
    # wrote first (a duplicate delivered, that batch being no replay), the other is superseded
    # in the batch by a newer change of its key (a mirror keeps states, not changes)
    assert first.skipped == work.duplicates == 2 and first.written == 1
    assert first.duplicates_delivered == 1


def test_a_delete_is_a_tombstone_that_an_older_insert_cannot_resurrect(
    sink: MirrorSink, mirror_server: MariaDBFixture, source: str
) -> None:
    log = ShardLog("-80", 1)
    insert = log.transaction(100, [("insert", "users", None, user(1, "a"))])
    delete = log.transaction(101, [("delete", "users", user(1, "a"), None)])
    sink.write_batch(insert + delete, ctx(0))
    assert live(mirror_server, source) == {}
    row = stored(mirror_server, source)[1]
    assert row[3] == 1 and row[1] is None and row[4] == 101  # the tombstone: key and token
    # the insert delivered again later (a restart from an older position) stays ignored
    result = sink.write_batch(insert, ctx(1))
    assert result.written == 0 and result.skipped == 1
    assert live(mirror_server, source) == {} and stored(mirror_server, source)[1] == row
    # a newer insert of the key brings it back
    again = log.transaction(102, [("insert", "users", None, user(1, "b"))])
    sink.write_batch(again, ctx(2))
    sink.close()
    assert live(mirror_server, source) == {1: user(1, "b")}


def test_out_of_order_changes_never_move_a_row_backward(
    mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, secrets_dir: Path, source: str
) -> None:
    registry = CollectorRegistry()
    sink = make_sink(mariadb_server, mirror_server, secrets_dir, source, registry)
    rng = random.Random(7)
    logs = [ShardLog("-80", 1), ShardLog("80-", 2)]
    events: list[ChangeEvent] = []
    state: dict[int, dict[str, Any] | None] = {}
    for step in range(300):
        key = rng.randrange(1, 25)
        log = logs[key % 2]  # each key lives on one shard
        old = state.get(key)
        if old is None:
            op, before, after = "insert", None, user(key, f"n{step}", step)
        elif rng.random() < 0.2:
            op, before, after = "delete", old, None
        else:
            op, before, after = "update", old, user(key, f"n{step}", step)
        events += log.transaction(1_000 + step // 3, [(op, "users", before, after)])
        state[key] = after
    shuffled = events[:]
    rng.shuffle(shuffled)
    for index in range(0, len(shuffled), 20):  # every key's changes arrive out of order
        sink.write_batch(shuffled[index : index + 20], ctx(index))
    expected = {k: v for k, v in state.items() if v is not None}
    assert live(mirror_server, source) == expected
    # in order again, as a restart from the start would deliver them: nothing moves
    before = stored(mirror_server, source)
    result = sink.write_batch(events, ctx(999))
    sink.close()
    assert result.written == 0 and stored(mirror_server, source) == before
    ignored = registry.get_sample_value(
        "updatestream_mirror_rows_ignored_total",
        {"stream": "s", "sink": sink.name, "cause": "older"},
    )
    assert ignored is not None and ignored > 0


def test_a_copy_compares_by_its_origin_and_same_second_shards_by_arrival(
    mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, secrets_dir: Path, source: str
) -> None:
    registry = CollectorRegistry()
    sink = make_sink(mariadb_server, mirror_server, secrets_dir, source, registry)
    src, dst = ShardLog("-80", 1), ShardLog("-40", 3)
    first = src.transaction(500, [("insert", "users", None, user(2, "orig"))])
    update = src.transaction(501, [("update", "users", user(2, "orig"), user(2, "upd"))])
    # the destination's copy of the first transaction arrives after the update: it is older
    copy = src.copy_to(first, dst)
    sink.write_batch(first + update, ctx(0))
    result = sink.write_batch(copy, ctx(1))
    assert result.written == 0 and live(mirror_server, source)[2]["name"] == "upd"
    # a change on the destination in the same second as the source's last: arrival order
    after_cutover = dst.transaction(501, [("update", "users", user(2, "upd"), user(2, "dst"))])
    result = sink.write_batch(after_cutover, ctx(2))
    sink.close()
    assert result.written == 1 and live(mirror_server, source)[2]["name"] == "dst"
    unknown = registry.get_sample_value(
        "updatestream_mirror_unknown_order_total", {"stream": "s", "sink": sink.name}
    )
    assert unknown == 1
    provenance = SourceProvenance("-80", MariaDBPosition.parse(first[0].gtid), 500)
    assert copy[0].source_gtid == str(provenance.position)


def test_types_round_trip_with_a_composite_key(
    sink: MirrorSink, mirror_server: MariaDBFixture, source: str
) -> None:
    row = {
        "shop": "s1",
        "code": b"\x00\xffk",
        "price": "12.50",
        "tags": {"a", "c"},
        "seen": dt.datetime(2024, 5, 1, 10, 11, 12, 123),
        "doc": '{"k": [1, 2]}',
    }
    encoded = {k: encode_value(v) for k, v in row.items()}
    pk = json.dumps({"shop": "s1", "code": encoded["code"]})
    log = ShardLog("-", 5)
    base = log.transaction(10, [("insert", "users", None, user(9, "-"))])[0]
    events = [
        dataclasses.replace(base, table="items", pk=pk, after=json.dumps(encoded)),
        dataclasses.replace(
            base,
            op="update",
            table="items",
            pk=pk,
            before=json.dumps(encoded),
            after=json.dumps({**encoded, "price": "13.00"}),
            tx_index=1,
        ),
    ]
    assert sink.write_batch(events, ctx(0)).written == 1
    sink.close()
    with mirror_server.connect(f"m_{source}") as conn, conn.cursor() as cur:
        cur.execute("SELECT shop, code, price, tags, seen, doc FROM items_live")
        (got,) = cur.fetchall()
    assert got[0] == "s1" and got[1] == b"\x00\xffk" and str(got[2]) == "13.00"
    assert got[3] == "a,c" and got[4].isoformat() == "2024-05-01T10:11:12.000123"
    assert json.loads(got[5]) == {"k": [1, 2]}


def test_a_new_source_column_is_added_to_the_mirror(
    sink: MirrorSink, mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, source: str
) -> None:
    log = ShardLog("-80", 1)
    sink.write_batch(log.transaction(10, [("insert", "users", None, user(1, "a"))]), ctx(0))
    alter_users(mariadb_server, source, "ADD COLUMN email VARCHAR(190) NULL DEFAULT 'none'")
    with_email = {**user(2, "b"), "email": "b@example.org"}
    sink.write_batch(log.transaction(11, [("insert", "users", None, with_email)]), ctx(1))
    sink.close()
    rows = live(mirror_server, source)
    # the row the source filled with the default when it added the column gets it here too
    assert rows == {1: {**user(1, "a"), "email": "none"}, 2: with_email}
    with mirror_server.connect(f"m_{source}") as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = 'users' AND COLUMN_NAME = 'email'",
            (f"m_{source}",),
        )
        assert cur.fetchall() == (("varchar(190)",),)


def test_a_new_column_another_writer_added_first_is_taken_not_a_failure(
    mariadb_server: MariaDBFixture,
    mirror_server: MariaDBFixture,
    secrets_dir: Path,
    source: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two writers of one mirror (two Spark tasks of a batch, `writeFrom: executors`) both meet
    a new source column: the one whose ALTER comes second finds the column there (MySQL error
    1060), reads the table again and applies its rows."""
    first, second = (make_sink(mariadb_server, mirror_server, secrets_dir, source) for _ in "ab")
    log = ShardLog("-80", 1)
    first.write_batch(log.transaction(10, [("insert", "users", None, user(1, "a"))]), ctx(0))
    second.write_batch(log.transaction(11, [("insert", "users", None, user(2, "b"))]), ctx(0))
    alter_users(mariadb_server, source, "ADD COLUMN email VARCHAR(190) NULL")
    with mirror_server.connect() as conn, conn.cursor() as cur:  # the second writer's read
        stale = mirror_writer.read_table(cur, f"m_{source}", "users")
    first.write_batch(
        log.transaction(12, [("insert", "users", None, {**user(3, "c"), "email": "c@x"})]), ctx(1)
    )
    reads: list[str] = []
    real = mirror_writer.read_table

    def read_before_the_first_alter(cursor: Any, database: str, table: str) -> Any:
        reads.append(table)
        return stale if len(reads) == 1 else real(cursor, database, table)

    monkeypatch.setattr(mirror_writer, "read_table", read_before_the_first_alter)
    result = second.write_batch(
        log.transaction(13, [("insert", "users", None, {**user(4, "d"), "email": "d@x"})]), ctx(1)
    )
    first.close()
    second.close()
    assert result.written == 1 and len(reads) == 2  # the ALTER failed once, then read again
    rows = live(mirror_server, source)
    assert rows[3]["email"] == "c@x" and rows[4]["email"] == "d@x" and rows[1]["email"] is None


def deadlocks(server: MariaDBFixture) -> int:
    """The deadlocks InnoDB detected on `server` since it started."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks'"
        )
        (count,) = cur.fetchone()
    return int(count)


def test_two_tasks_inserting_interleaved_new_keys_meet_no_deadlock(
    mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, secrets_dir: Path, source: str
) -> None:
    """Two writers of one mirror (two Spark tasks: a snapshot's chunks of two shards) insert new
    keys that interleave: the bulk read of stored tokens locks no gaps (READ COMMITTED), so
    neither holds the gap the other inserts into."""
    sinks = [make_sink(mariadb_server, mirror_server, secrets_dir, source) for _ in range(2)]
    logs = [ShardLog("-80", 1), ShardLog("80-", 2)]
    before = deadlocks(mirror_server)

    def apply(task: int) -> None:
        for batch in range(6):
            first = batch * 2000
            rows = [
                ("insert", "users", None, user(2 * (first + i) + task, "n")) for i in range(2000)
            ]
            sinks[task].apply_events(logs[task].transaction(100 + batch, rows))

    run_at_once(apply, 2)
    for sink in sinks:
        sink.close()
    assert deadlocks(mirror_server) == before
    assert len(live(mirror_server, source)) == 2 * 6 * 2000


def test_a_dropped_source_column_is_a_typed_error(
    sink: MirrorSink, mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, source: str
) -> None:
    log = ShardLog("-80", 1)
    sink.write_batch(
        log.transaction(10, [("insert", "users", None, user(1, "a", 3))]),
        ctx(0),
    )
    alter_users(mariadb_server, source, "DROP COLUMN visits")
    events = log.transaction(11, [("insert", "users", None, {"id": 2, "name": "b"})])
    with pytest.raises(MirrorSinkSchemaError) as err:
        sink.write_batch(events, ctx(1))
    assert isinstance(err.value, SinkError)
    message = str(err.value)
    assert "users" in message and "visits" in message and "DROP COLUMN" in message
    sink.close()
    assert live(mirror_server, source) == {1: user(1, "a", 3)}  # nothing of the batch written


def test_a_retyped_column_is_a_typed_error_when_the_table_is_checked(
    sink: MirrorSink,
    mariadb_server: MariaDBFixture,
    mirror_server: MariaDBFixture,
    secrets_dir: Path,
    source: str,
) -> None:
    log = ShardLog("-80", 1)
    batch = log.transaction(10, [("insert", "users", None, user(1, "a"))])
    sink.write_batch(batch, ctx(0))
    sink.close()
    alter_users(mariadb_server, source, "MODIFY visits BIGINT NOT NULL DEFAULT 0")
    restarted = make_sink(mariadb_server, mirror_server, secrets_dir, source)
    retyped = r"column visits is int(\(11\))? in the mirror but "  # MySQL 8: no display width
    with pytest.raises(MirrorSinkSchemaError, match=retyped):
        restarted.write_batch(batch, ctx(1))
    restarted.close()


def test_tombstones_older_than_the_horizon_are_purged(
    mariadb_server: MariaDBFixture, mirror_server: MariaDBFixture, secrets_dir: Path, source: str
) -> None:
    registry = CollectorRegistry()
    sink = make_sink(
        mariadb_server,
        mirror_server,
        secrets_dir,
        source,
        registry,
        tombstoneHorizonSeconds=3600,
        purgeEveryBatches=2,
    )
    now = int(time.time())
    log = ShardLog("-80", 1)
    events = []
    for key, ts in ((1, now - 7200), (2, now - 7000), (3, now - 60)):
        events += log.transaction(ts - 1, [("insert", "users", None, user(key, "x"))])
        events += log.transaction(ts, [("delete", "users", user(key, "x"), None)])
    first = sink.write_batch(events, ctx(0))
    assert first.written == 3 and set(stored(mirror_server, source)) == {1, 2, 3}
    sink.write_batch([], ctx(1))  # the second batch purges
    sink.close()
    assert set(stored(mirror_server, source)) == {3}
    labels = {"stream": "s", "sink": sink.name}
    assert registry.get_sample_value("updatestream_mirror_tombstones_purged_total", labels) == 2
    assert registry.get_sample_value("updatestream_mirror_tombstones_written_total", labels) == 3


def test_the_mirror_down_then_up(
    sink: MirrorSink, mirror_server: MariaDBFixture, source: str
) -> None:
    log = ShardLog("-80", 1)
    sink.write_batch(log.transaction(10, [("insert", "users", None, user(1, "a"))]), ctx(0))
    batch = log.transaction(11, [("insert", "users", None, user(2, "b"))])
    mirror_server.server.stop()
    try:
        with pytest.raises(SinkUnavailable) as err:  # an outage the job waits out
            sink.write_batch(batch, ctx(1))
        assert (err.value.kind, err.value.address) == ("mirror", sink.address)
        message = str(err.value)
        assert f"mirror({mirror_server.host}:{mirror_server.port}/m_{source})" in message
        assert "batch 1" in message and mirror_server.admin.password not in message
        with pytest.raises(SinkError):  # still down: the retry fails the same way
            sink.write_batch(batch, ctx(1, replay=True))
    finally:
        mirror_server.server.start()
    result = sink.write_batch(batch, ctx(1, replay=True))
    sink.close()
    assert result.written == 1
    assert live(mirror_server, source) == {1: user(1, "a"), 2: user(2, "b")}


def test_a_key_change_leaves_a_tombstone_for_the_old_key(
    sink: MirrorSink, mirror_server: MariaDBFixture, source: str
) -> None:
    log = ShardLog("-80", 1)
    events = log.transaction(10, [("insert", "users", None, user(1, "a"))])
    events += log.transaction(11, [("update", "users", user(1, "a"), user(12, "a"))])
    assert sink.write_batch(events, ctx(0)).written == 2
    # the insert of key 1 delivered again later is older than the key change's tombstone
    assert sink.write_batch(events[:1], ctx(1)).written == 0
    sink.close()
    assert live(mirror_server, source) == {12: user(12, "a")}
    assert stored(mirror_server, source)[1][3:5] == (1, 11)


def test_the_documented_privileges_are_enough(
    mariadb_server: MariaDBFixture,
    mirror_server: MariaDBFixture,
    secrets_dir: Path,
    source: str,
    tmp_path: Path,
) -> None:
    database = f"m_{source}"
    password = uuid.uuid4().hex
    mirror_server.server.create_account(
        "us_mirror_writer",
        password,
        [
            f"GRANT CREATE, ALTER, CREATE VIEW, DROP, SELECT, INSERT, UPDATE, DELETE "
            f"ON `{database}`.* TO {{user}}"
        ],
    )
    with mirror_server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    secrets = tmp_path / "secrets"
    mariadb_server.admin_secret(secrets, "source")
    write_secret(secrets, "mirror", "us_mirror_writer", password)
    sink = make_sink(mariadb_server, mirror_server, secrets, source)
    log = ShardLog("-80", 1)
    sink.write_batch(log.transaction(10, [("insert", "users", None, user(1, "a"))]), ctx(0))
    alter_users(mariadb_server, source, "ADD COLUMN email VARCHAR(190) NULL")
    row = {**user(2, "b"), "email": "b@example.org"}
    sink.write_batch(log.transaction(11, [("insert", "users", None, row)]), ctx(1))
    sink.write_batch(log.transaction(12, [("delete", "users", row, None)]), ctx(2))
    assert sink.purge() == 1  # the tombstone (timestamp 12) is far beyond the horizon
    sink.close()
    assert live(mirror_server, source) == {1: {**user(1, "a"), "email": None}}
