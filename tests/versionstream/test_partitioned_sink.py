"""The Version Stream sink with `partitions: 4` against a real MariaDB: every change once, in
its entity's partition, and the combined stream read by the cache is the stream's final state."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pymysql
import pytest
from updatestream_jobs.sinks.sink import BatchContext
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink

from harness.sink_events import final_rows, two_shard_workload
from tests.conftest import MariaDBFixture
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.versionstream import CombinedStream, MultiSnapshotCache, SubStream, partition_of

DATABASE = "us_vspsink"


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory, mariadb_server: MariaDBFixture) -> Path:
    root = tmp_path_factory.mktemp("secrets")
    (root / "vs").mkdir()
    (root / "vs" / "username").write_text(mariadb_server.admin.username + "\n")
    (root / "vs" / "password").write_text(mariadb_server.admin.password + "\n")
    return root


def sink_of(server: MariaDBFixture, secrets: Path, table: str) -> VersionStreamSink:
    config = spec.VersionStreamSink.model_validate(
        {
            "type": "versionStream",
            "mysql": {"host": server.host, "port": server.port},
            "database": DATABASE,
            "table": table,
            "credentialsSecret": {"name": "vs"},
            "partitions": 4,
        }
    )
    return VersionStreamSink(config, secrets_dir=secrets)


def expected_states(events: list[ChangeEvent]) -> dict[str, Any]:
    return {
        f"{table}:{json.dumps(json.loads(pk), separators=(',', ':'))}": row
        for table, rows in final_rows(events).items()
        for pk, row in rows.items()
    }


def test_batches_go_to_their_partitions_once_and_recombine(
    mariadb_server: MariaDBFixture, secrets_dir: Path
) -> None:
    table = f"vsp_{uuid.uuid4().hex[:10]}"
    sink = sink_of(mariadb_server, secrets_dir, table)
    assert "4 partitions" in sink.name
    sink.open()
    work = two_shard_workload(users=40)
    results = []
    for i, batch in enumerate(work.batches):
        results.append(sink.write_batch(batch, BatchContext("s", "-", i)))
        again = sink.write_batch(batch, BatchContext("s", "-", i))  # a replay appends nothing
        assert again.written == 0 and again.duplicates_delivered == 0
    sink.close()
    assert sum(r.written for r in results) == len(work.unique)
    assert results[-1].skipped == work.duplicates
    with mariadb_server.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT stream, version, entity FROM {table} ORDER BY stream, version")
        stored = cur.fetchall()
    streams = {int(s) for s, _, _ in stored}
    assert streams == {0, 1, 2, 3}
    for stream in streams:
        versions = [(int(v), str(e)) for s, v, e in stored if int(s) == stream]
        assert [v for v, _ in versions] == list(range(len(versions)))
        assert {partition_of(e, 4) for _, e in versions} == {stream}

    def connect() -> pymysql.connections.Connection:
        return mariadb_server.connect(autocommit=False)

    reader = CombinedStream(connect, table=table, database=DATABASE, partitions=4)
    last = reader.fetch_last_version()
    assert last is not None
    expected = expected_states(work.unique)
    assert MultiSnapshotCache(reader).entities(last) == expected
    assert MultiSnapshotCache(SubStream(reader, "users")).entities(last) == expected
    reader.close()
