"""A duplicate that reaches a sink is counted: each sink against its real server (MariaDB for the
Version Stream, memcached, files for CDCv2) is handed a batch, then a later batch holding a hop
copy of a change it already had (filtered replication's copy: the same source transaction). The
sink keeps it out and reports it in `duplicates_delivered`; the job's tracker turns that into
`updatestream_duplicates_delivered_total{stream,sink}` and the status file's
`duplicatesDelivered`. A replayed batch (the same batch id again, or one the checkpoint logged
without a commit) repeats what the sink holds and counts nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pymemcache.client.base import Client
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_jobs.job import uncommitted_batches
from updatestream_jobs.progress_tracker import ProgressTracker
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink
from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.sinks.sink import BatchContext, Sink
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink
from updatestream_jobs.stream_metrics import StreamMetrics

from harness.sink_events import ShardLog
from tests.conftest import MariaDBFixture
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.cache.entry import encode

T0 = 1_700_000_000


def versionstream(server: MariaDBFixture, tmp_path: Path) -> Callable[[], Sink]:
    (tmp_path / "secrets" / "vs").mkdir(parents=True)
    (tmp_path / "secrets" / "vs" / "username").write_text(server.admin.username)
    (tmp_path / "secrets" / "vs" / "password").write_text(server.admin.password)
    config = spec.VersionStreamSink.model_validate(
        {
            "type": "versionStream",
            "mysql": {"host": server.host, "port": server.port},
            "database": "us_dupes",
            "table": f"vs_{uuid.uuid4().hex[:10]}",
            "credentialsSecret": {"name": "vs"},
        }
    )
    return lambda: VersionStreamSink(config, secrets_dir=tmp_path / "secrets")


def memcached_sink(server: MemcachedServer, keyspace: str) -> MemcachedSink:
    config = spec.MemcachedSink.model_validate({"type": "memcached", "servers": [server.address]})
    return MemcachedSink(config, keyspace=keyspace)


def cdcv2(tmp_path: Path) -> CDCv2Sink:
    config = spec.CDCv2Sink.model_validate(
        {"type": "cdcv2", "path": str(tmp_path / "cdc"), "allowedLatenessSeconds": 1}
    )
    return CDCv2Sink(config)


@pytest.fixture(params=["versionstream", "memcached", "cdcv2"])
def make_sink(
    request: pytest.FixtureRequest, tmp_path: Path, memcached: MemcachedServer
) -> Callable[[], Sink]:
    """New sink objects (a restarted job's) over the same table, keys or directory."""
    if request.param == "versionstream":
        return versionstream(request.getfixturevalue("mariadb_server"), tmp_path)
    if request.param == "memcached":
        keyspace = f"ks{uuid.uuid4().hex[:8]}"
        return lambda: memcached_sink(memcached, keyspace)
    return lambda: cdcv2(tmp_path)


def batches() -> tuple[list[ChangeEvent], list[ChangeEvent]]:
    """Batch 0: a change on -80. Batch 1: a later change, and the copy filtered replication
    made of the first one on destination -40 (a hop duplicate the dedup did not drop)."""
    source, destination = ShardLog("-80", 1), ShardLog("-40", 3)
    first = source.transaction(T0, [("insert", "users", None, {"id": 1, "name": "a"})])
    second = source.transaction(T0 + 1, [("insert", "users", None, {"id": 5, "name": "b"})])
    copy = source.copy_to(first, destination)
    return [*first, source.heartbeat(T0 + 1)], second + copy + [source.heartbeat(T0 + 2)]


def test_a_duplicate_that_reaches_a_sink_is_counted_and_a_replay_is_not(
    make_sink: Callable[[], Sink], tmp_path: Path
) -> None:
    metrics = StreamMetrics("orders")
    status = tmp_path / "status.json"
    tracker = ProgressTracker("orders", "-", metrics=metrics, status_file=status)
    sink = make_sink()
    metrics.add_sinks([sink.name])
    sink.open()
    first, second = batches()
    try:
        results = [
            sink.write_batch(first, BatchContext("orders", "-", 0)),
            sink.write_batch(second, BatchContext("orders", "-", 1)),
        ]
        # Spark runs batch 1 again in this process, then, restarted, as a logged replay.
        results.append(sink.write_batch(second, BatchContext("orders", "-", 1)))
        restarted = make_sink()
        restarted.open()
        try:
            results.append(restarted.write_batch(second, BatchContext("orders", "-", 1, True)))
        finally:
            restarted.close()
    finally:
        sink.close()
    assert [r.duplicates_delivered for r in results] == [0, 1, 0, 0]
    assert results[1].written >= 1  # the later change itself was written
    for result in results[:2]:
        tracker.sink_result(sink.name, result)
    tracker.finish_batch(1)
    labels = {"stream": "orders", "sink": sink.name}
    value = metrics.registry.get_sample_value("updatestream_duplicates_delivered_total", labels)
    assert value == 1
    assert json.loads(status.read_text())["sinks"][sink.name]["duplicatesDelivered"] == 1


@pytest.mark.parametrize("make_sink", ["versionstream", "cdcv2"], indirect=True)
def test_the_same_change_twice_in_one_batch_is_a_duplicate_delivered(
    make_sink: Callable[[], Sink],
) -> None:
    """By identity; memcached sees tokens per key, where one transaction's rows share a token."""
    first, _ = batches()
    sink = make_sink()
    sink.open()
    try:
        result = sink.write_batch(first[:1] + first, BatchContext("orders", "-", 0))
    finally:
        sink.close()
    assert result.duplicates_delivered == 1


def test_an_application_loaded_entry_at_a_change_is_no_duplicate(
    memcached: MemcachedServer,
) -> None:
    """An entry with a value whose token is that of the change (the application read exactly
    there) is not a change the sink had: only invalidations' token-only entries count."""
    first, _ = batches()
    sink = memcached_sink(memcached, f"ks{uuid.uuid4().hex[:8]}")
    key = next(iter(sink.changes(first)))
    app = Client(("127.0.0.1", memcached.port), default_noreply=False)
    app.set(key, encode(first[0].token, b'"loaded"'))
    app.close()
    sink.open()
    try:
        result = sink.write_batch(first, BatchContext("orders", "-", 0))
    finally:
        sink.close()
    assert (result.skipped, result.duplicates_delivered) == (1, 0)


def test_uncommitted_batches_are_the_offsets_logged_after_the_last_commit(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert uncommitted_batches(checkpoint) == frozenset()
    for folder, ids in (("offsets", (0, 1, 2, 3)), ("commits", (0, 1, 2))):
        (checkpoint / folder).mkdir(parents=True)
        for batch_id in ids:
            (checkpoint / folder / str(batch_id)).write_text("v1\n")
    (checkpoint / "offsets" / ".3.crc").write_text("")
    assert uncommitted_batches(checkpoint) == frozenset({3})
    (checkpoint / "commits" / "3").write_text("v1\n")
    assert uncommitted_batches(checkpoint) == frozenset()
