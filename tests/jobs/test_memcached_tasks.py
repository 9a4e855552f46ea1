"""The memcached sink written from Spark's executors (`writeFrom: executors`) in a running job
(Spark local mode, real shards, a real memcached): a backlog read in small pieces, so a batch
has more tasks than shards and one key's changes can be in two tasks; every key the traffic
touched ends on its newest change, nothing is counted as a duplicate delivered, with the fast
lane off (only the tasks write) and on (the tasks find the fast lane's entries). Without Spark:
the tasks' partitions written in reverse order leave every key as the driver's in-order write
does, and a task whose memcached does not answer fails with the sink's typed error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymemcache.client.base import Client
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_jobs.sinks.executor_tasks import SinkTaskFailure, driver_error
from updatestream_jobs.sinks.memcached_sink import MemcachedSink, MemcachedTask
from updatestream_jobs.sinks.sink import BatchContext, SinkError

from harness.cluster_job import cluster_job, wait_caught_up
from harness.sink_events import two_shard_workload
from harness.verify_command import verify_sink
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.local_ports import free_port

PIECES = {"inlineMaxBytes": "65536", "maxPartitionBytes": "65536"}


def traffic(cluster: DevCluster, ledger: Path, seconds: float, seed: int) -> None:
    generator = TrafficGenerator(
        cluster.manifest_path,
        cluster.secrets_dir,
        ledger,
        TrafficOptions(rate=150, duration=seconds, seed=seed),
    )
    generator.run()
    generator.close()


@pytest.mark.parametrize("fast_lane", [False, True], ids=["batches-only", "fast-lane"])
def test_spark_tasks_invalidate_a_backlog_cut_in_pieces_and_every_key_ends_newest(
    spark: Any, cluster: DevCluster, memcached: MemcachedServer, tmp_path: Path, fast_lane: bool
) -> None:
    memcached.flush()
    start = {"mode": "gtid", "gtid": {s: cluster.server(s).gtid_position() for s in ("-80", "80-")}}
    cache = {
        "type": "memcached",
        "servers": [memcached.address],
        "fastLane": fast_lane,
        "writeFrom": "executors",
    }
    stream = spec.parse_update_stream(manifests.update_stream("tasks", "commerce", start, [cache]))
    job = cluster_job(cluster, stream, tmp_path, source_options=PIECES)
    before, during = tmp_path / "before.jsonl", tmp_path / "during.jsonl"
    traffic(cluster, before, 2.0, seed=21)  # a backlog before the job starts
    job.start(spark)
    try:
        traffic(cluster, during, 3.0, seed=22)
        wait_caught_up(job, cluster, tmp_path / "status.json")
    finally:
        job.stop()
    sink = job.sinks[0]
    assert isinstance(sink, MemcachedSink) and sink.most_tasks > 2  # more tasks than shards

    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(before.read_text() + during.read_text())
    report = verify_sink(
        ledger, "memcached",
        "--servers", memcached.address,
        "--keyspace-manifest", str(cluster.manifest_path),
        "--secrets-dir", str(cluster.secrets_dir),
    )  # fmt: skip
    assert report["lost"] == 0 and not report.get("stale_keys"), report
    assert report["duplicates_delivered"] == 0 and report["delivered"] > 100, report
    state = json.loads((tmp_path / "status.json").read_text())["sinks"][sink.name]
    assert state["duplicatesDelivered"] == 0, state
    if fast_lane:  # the fast lane wrote first: the tasks found their own changes there
        assert state["skipped"] > 0, state
    else:
        assert state["written"] > 100, state


def _config(servers: list[str]) -> str:
    cache = {"type": "memcached", "servers": servers, "writeFrom": "executors"}
    return spec.MemcachedSink.model_validate(cache).model_dump_json(by_alias=True)


def _row(event: ChangeEvent) -> dict[str, Any]:
    return {name: getattr(event, name) for name in ChangeEvent.__dataclass_fields__}


def test_partitions_written_in_reverse_leave_every_key_as_the_driver_does(
    memcached: MemcachedServer,
) -> None:
    events = [e for batch in two_shard_workload().batches[:3] for e in batch]
    config = spec.MemcachedSink.model_validate_json(_config([memcached.address]))
    client = Client(("127.0.0.1", memcached.port), default_noreply=False)
    driver = MemcachedSink(config, keyspace="commerce")
    keys = list(driver.changes(events))
    try:
        memcached.flush()
        driver.write_batch(events, BatchContext("s", "-", 0))
        in_order = client.get_many(keys)
        memcached.flush()
        task = MemcachedTask(_config([memcached.address]), "commerce", {})
        thirds = [events[i::3] for i in range(3)]  # each keeps its own events in stream order
        reports = [next(task(iter(_row(e) for e in part))) for part in reversed(thirds)]
        assert client.get_many(keys) == in_order and len(in_order) == len(keys) > 10
        assert sum(r["changed"] + r["unchanged"] for r in reports) >= len(keys)
        assert set(reports[-1]["heartbeats"]) <= {"-80", "80-"}
    finally:
        client.close()
        driver.close()


def test_a_task_whose_memcached_does_not_answer_fails_with_the_sinks_typed_error() -> None:
    address = f"127.0.0.1:{free_port()}"
    events = two_shard_workload().batches[0]
    task = MemcachedTask(_config([address]), "commerce", {})
    with pytest.raises(SinkTaskFailure) as raised:
        next(task(iter(_row(e) for e in events)))
    error = driver_error(RuntimeError(f"Job aborted\n{raised.value}\n\tat org.apache"))
    assert isinstance(error, SinkError) and address in str(error), error
    assert "nothing acknowledged" in str(error)
