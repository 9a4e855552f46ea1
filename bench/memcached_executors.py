"""The memcached sink written from Spark's executors (`writeFrom: executors`), 1 and 2 cores.

The workload of the driver's figure (`sinks_bench.bench_memcached`: absent keys, then the same
keys again with newer tokens, two shards) goes through `MemcachedSink.write_frame` in batches of
5,000 events, each a DataFrame of two partitions, one per shard, as the job's source makes them:
with `local[1]` the two tasks of a batch run one after the other, with `local[2]` at the same
time. The batches are built and cached before the clock starts, so a rate is the tasks' work
(rows to events, keys, tokens, memcached round trips) and the driver's adding up. Spark runs in
this process, stopped and started again for each core count.
"""

from __future__ import annotations

import time
from typing import Any

from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.sinks.sink import BatchContext

from bench.mirror_executors import CORES, frames, session
from updatestream import spec
from updatestream.binlog.events import ChangeEvent

BATCH = 5000


def _round(spark: Any, address: str, passes: list[list[ChangeEvent]], keyspace: str) -> float:
    """Invalidations per second over every pass's batches, into a fresh `keyspace`."""
    config = spec.MemcachedSink.model_validate(
        {"type": "memcached", "servers": [address], "writeFrom": "executors"}
    )
    sink = MemcachedSink(config, keyspace=keyspace)
    sink.open()
    elapsed, written, batch_id = 0.0, 0, 0
    try:
        for events in passes:
            batches = frames(spark, events, BATCH)
            started = time.perf_counter()
            for frame in batches:
                written += sink.write_frame(frame, BatchContext("b", "-", batch_id)).written
                batch_id += 1
            elapsed += time.perf_counter() - started
            for frame in batches:
                frame.unpersist()
    finally:
        sink.close()
    total = sum(len(events) for events in passes)
    assert written == total, (written, total)
    return total / elapsed


def rates(address: str, passes: list[list[ChangeEvent]], rounds: int) -> dict[str, list[float]]:
    """Invalidations per second from the executors, per core count (`"1"`, `"2"`), per round:
    each pass's changes invalidate keys whose entries the pass before left older."""
    found: dict[str, list[float]] = {str(cores): [] for cores in CORES}
    for cores in CORES:
        spark = session(cores)
        try:
            for round_no in range(1, rounds + 1):
                keyspace = f"tasks{cores}x{round_no}"
                rate = _round(spark, address, passes, keyspace)
                found[str(cores)].append(rate)
                print(f"memcached round {round_no}: {cores} executor core(s): {rate:,.0f}/s")
        finally:
            spark.stop()
    return found
