"""The Version Stream sink against a real MariaDB and a real MySQL 8 (InnoDB, REPEATABLE READ,
gap locks: seed 002's own target): gapless, in order, at most once."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from updatestream_cli import manifests
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_jobs.sinks.sink import BatchContext, SinkError
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink

from harness.sink_events import ShardLog, final_rows, split_transaction, two_shard_workload
from tests.conftest import MariaDBFixture
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.local_ports import free_port


@pytest.fixture(scope="module", params=FLAVORS)
def vs_server(request: pytest.FixtureRequest) -> MariaDBFixture:
    """The Version Stream's server: the session's MariaDB, or its MySQL 8."""
    fixture: MariaDBFixture = request.getfixturevalue(f"{request.param}_server")
    return fixture


DATABASE = "us_vstest"


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory, vs_server: MariaDBFixture) -> Path:
    root = tmp_path_factory.mktemp("secrets")
    vs_server.admin_secret(root, "vs")
    return root


def make_sink(
    server: MariaDBFixture, secrets: Path, table: str, stream: int = 0, port: int | None = None
) -> VersionStreamSink:
    sink = manifests.database_sink(
        "versionStream",
        server.host,
        port or server.port,
        DATABASE,
        "vs",
        table=table,
        stream=stream,
    )
    return VersionStreamSink(spec.VersionStreamSink.model_validate(sink), secrets_dir=secrets)


def new_table() -> str:
    return f"vs_{uuid.uuid4().hex[:10]}"


def open_sink(server: MariaDBFixture, secrets: Path) -> tuple[str, VersionStreamSink]:
    """The sink of a table of its own, opened (which creates the table)."""
    table = new_table()
    sink = make_sink(server, secrets, table)
    sink.open()
    return table, sink


def rows(server: MariaDBFixture, table: str, stream: int = 0) -> list[tuple[int, str, object]]:
    with server.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT version, entity, data FROM {table} WHERE stream = %s ORDER BY version",
            (stream,),
        )
        return [(int(v), str(e), d) for v, e, d in cur.fetchall()]


def latest_states(versions: list[tuple[int, str, object]]) -> dict[str, object]:
    state: dict[str, object] = {}
    for _, entity, data in versions:
        state[entity] = data
    return {e: json.loads(str(d)) for e, d in state.items() if d is not None}


def expected_states(work_events: list[ChangeEvent]) -> dict[str, object]:
    expected: dict[str, object] = {}
    for table, table_rows in final_rows(work_events).items():
        for pk, row in table_rows.items():
            pk_obj = json.loads(pk)
            expected[f"{table}:{json.dumps(pk_obj, separators=(',', ':'))}"] = row
    return expected


def test_batches_append_gapless_ordered_versions_once(
    vs_server: MariaDBFixture, secrets_dir: Path
) -> None:
    table, sink = open_sink(vs_server, secrets_dir)
    work = two_shard_workload()
    results = [sink.write_batch(b, BatchContext("s", "-", i)) for i, b in enumerate(work.batches)]
    sink.close()
    versions = rows(vs_server, table)
    assert [v for v, _, _ in versions] == list(range(len(work.unique)))
    assert sum(r.written for r in results) == len(work.unique)
    assert results[-1].skipped == work.duplicates == 2  # the hop copy appended nothing
    assert latest_states(versions) == expected_states(work.unique)
    # versions follow stream order: each entity's history is the order of its events
    by_entity: dict[str, list[object]] = {}
    for _, entity, data in versions:
        by_entity.setdefault(entity, []).append(None if data is None else json.loads(str(data)))
    assert by_entity['users:{"id":3}'][-2:] == [None, {"id": 3, "name": "user3-again", "visits": 0}]


def test_replayed_batch_appends_nothing(vs_server: MariaDBFixture, secrets_dir: Path) -> None:
    table, sink = open_sink(vs_server, secrets_dir)
    work = two_shard_workload()
    for i, batch in enumerate(work.batches):
        first = sink.write_batch(batch, BatchContext("s", "-", i))
        before = rows(vs_server, table)
        again = sink.write_batch(batch, BatchContext("s", "-", i))
        assert rows(vs_server, table) == before
        assert again.written == 0
        assert again.skipped == first.written + first.skipped
    sink.close()


def test_rows_of_one_source_transaction_copied_to_two_destinations_are_both_appended(
    vs_server: MariaDBFixture, secrets_dir: Path
) -> None:
    # after a split each destination numbers its copy of the source transaction's rows from 0,
    # so only table and key tell the two copies apart.
    copies = split_transaction().copies
    assert [e.tx_index for e in copies["-40"]] == [0]
    assert [e.tx_index for e in copies["40-80"]] == [0]
    table, sink = open_sink(vs_server, secrets_dir)
    result = sink.write_batch(copies["-40"] + copies["40-80"], BatchContext("s", "-", 0))
    sink.close()
    assert result.written == 2
    assert [entity for _, entity, _ in rows(vs_server, table)] == [
        'users:{"id":2}',
        'users:{"id":3}',
    ]


def test_key_change_writes_a_tombstone_for_the_old_key(
    vs_server: MariaDBFixture, secrets_dir: Path
) -> None:
    table, sink = open_sink(vs_server, secrets_dir)
    log = ShardLog("-80", 1)
    row = {"id": 1, "name": "a", "visits": 0}
    events = log.transaction(10, [("insert", "users", None, row)])
    events += log.transaction(11, [("update", "users", row, {**row, "id": 2})])
    sink.write_batch(events, BatchContext("s", "-", 0))
    sink.close()
    assert [(v, e, d is None) for v, e, d in rows(vs_server, table)] == [
        (0, 'users:{"id":1}', False),
        (1, 'users:{"id":1}', True),
        (2, 'users:{"id":2}', False),
    ]


def test_two_jobs_appending_concurrently_share_one_gapless_stream(
    vs_server: MariaDBFixture, secrets_dir: Path
) -> None:
    table = new_table()
    make_sink(vs_server, secrets_dir, table).open()
    errors: list[BaseException] = []

    def job(shard: str, domain: int) -> None:
        sink = make_sink(vs_server, secrets_dir, table, stream=7)
        log = ShardLog(shard, domain)
        try:
            for batch_id in range(20):
                events = []
                for n in range(25):
                    uid = domain * 100_000 + batch_id * 100 + n
                    row = {"id": uid, "name": shard, "visits": n}
                    events += log.transaction(100 + batch_id, [("insert", "users", None, row)])
                sink.write_batch(events, BatchContext("s", shard, batch_id))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            sink.close()

    threads = [threading.Thread(target=job, args=a) for a in (("-80", 1), ("80-", 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    versions = rows(vs_server, table, stream=7)
    assert [v for v, _, _ in versions] == list(range(2 * 20 * 25))
    for name in ("-80", "80-"):  # each job's versions keep its own order
        mine = [json.loads(str(d))["id"] for _, _, d in versions if f'"{name}"' in str(d)]
        assert mine == sorted(mine) and len(mine) == 500


def test_unreachable_server_raises_sink_error_naming_sink_and_address(
    vs_server: MariaDBFixture, secrets_dir: Path
) -> None:
    port = free_port()
    sink = make_sink(vs_server, secrets_dir, new_table(), port=port)
    work = two_shard_workload()
    with pytest.raises(SinkError) as err:
        sink.write_batch(work.batches[0], BatchContext("s", "-", 3))
    message = str(err.value)
    assert f"versionstream(127.0.0.1:{port}/{DATABASE}." in message
    assert "batch 3" in message
    assert vs_server.admin.password not in message
    with pytest.raises(SinkError, match=f"127.0.0.1:{port}"):
        sink.open()


def test_missing_secret_is_reported_without_contacting_the_server(
    vs_server: MariaDBFixture, tmp_path: Path
) -> None:
    sink = make_sink(vs_server, tmp_path, new_table())
    with pytest.raises(SinkError, match=r"versionstream\(.*Secret 'vs' has no readable key"):
        sink.open()
