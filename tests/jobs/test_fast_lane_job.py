"""The fast lane in a running job (Spark local mode, real shards, real memcached): a change's
invalidation reaches memcached well before the micro-batch that records it, and that batch then
writes nothing and counts no duplicate; with `fastLane: false` only the batch invalidates."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.manifests import update_stream
from updatestream_jobs.job import Job, source_options
from updatestream_jobs.sinks.sink import BatchContext, Sink, SinkResult

from tests.jobs.test_fast_lane import insert_user, wait_for_entry
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.contract.job_config import JobConfig

TRIGGER = 2.0  # seconds: the micro-batch comes 0 to 2 s after a change, plus its own time


class KeyTimes:
    """A sink wrapper that notes when the batch holding each user's change was written."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.name = inner.name
        self.written: dict[int, float] = {}

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        held = list(events)
        result = self.inner.write_batch(held, ctx)
        now = time.time()
        for event in held:
            if event.table == "users":
                self.written.setdefault(json.loads(event.pk or "{}")["id"], now)
        return result


def job_config(
    cluster: DevCluster, memcached: MemcachedServer, tmp: Path, **sink: Any
) -> JobConfig:
    start = {"mode": "gtid", "gtid": {s: cluster.server(s).gtid_position() for s in ("-80", "80-")}}
    cache = {"type": "memcached", "servers": [memcached.address], **sink}
    stream = spec.parse_update_stream(update_stream("fast", "commerce", start, [cache]))
    return JobConfig(
        stream=stream,
        keyspace=cluster.keyspace(),
        secrets_dir=cluster.secrets_dir,
        checkpoint=tmp / "checkpoint",
        trigger_seconds=TRIGGER,
        status_file=tmp / "status.json",
    )


def test_an_invalidation_arrives_well_before_its_micro_batch(
    spark: Any, cluster: DevCluster, memcached: MemcachedServer, tmp_path: Path
) -> None:
    memcached.flush()
    job = Job(job_config(cluster, memcached, tmp_path))
    timed = KeyTimes(job.sinks[0])
    job.sinks = [timed]
    job.start(spark)
    try:
        insert_user(cluster)  # the first batch: Spark's and the workers' start
        deadline = time.monotonic() + 300
        while not timed.written:
            assert job.query.isActive and time.monotonic() < deadline, job.query.exception()
            time.sleep(0.2)
        seen: dict[int, tuple[float, float]] = {}  # user -> (committed, in memcached)
        for _ in range(6):
            key, committed = insert_user(cluster)
            seen[int(key.rsplit(":", 1)[1])] = (
                committed,
                wait_for_entry(memcached, key, committed),
            )
            time.sleep(0.7)
        while not set(seen) <= set(timed.written):
            assert job.query.isActive and time.monotonic() < deadline, job.query.exception()
            time.sleep(0.2)
        status = json.loads((tmp_path / "status.json").read_text())
    finally:
        job.stop()
    fast = [at - committed for committed, at in seen.values()]
    ahead = [timed.written[user] - at for user, (_, at) in seen.items()]
    print(f"fast lane lag {sorted(fast)}; batch later by {sorted(ahead)}")
    assert max(fast) < 1.5, fast  # loaded machine: generous; a quiet one sees milliseconds
    assert min(ahead) > 0 and statistics.median(ahead) > 0.3, ahead
    (results,) = status["sinks"].values()
    assert results["duplicatesDelivered"] == 0, results
    assert results["written"] <= 1, results  # only the first user's: before the lane was up


def test_fast_lane_false_leaves_invalidation_to_the_batches(
    cluster: DevCluster, memcached: MemcachedServer, tmp_path: Path
) -> None:
    on = job_config(cluster, memcached, tmp_path)
    off = job_config(cluster, memcached, tmp_path, fastLane=False)
    (lane,) = json.loads(source_options(on, "-")["fastLaneSinks"])
    assert lane["servers"] == [memcached.address]
    assert "fastLaneSinks" not in source_options(off, "-")
