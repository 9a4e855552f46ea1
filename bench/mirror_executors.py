"""The mirror applied from Spark's executors (`writeFrom: executors`) with 1 and with 2 cores.

The same workload as the driver's figures (`mirror_bench.workload`: inserts then updates, two
shards) goes through `MirrorSink.write_frame` in micro-batches of 10,000 events, each a
DataFrame of two partitions, one per shard, as the job's source makes them: with `local[1]` the
two tasks of a batch run one after the other, with `local[2]` at the same time. Every batch is
built and cached before the clock starts, so a rate is the tasks' apply (rows to events,
collapse, guarded upserts, commits) and the driver's adding up, not Spark building rows. Spark
runs in this process, stopped and started again for each core count.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_jobs.sinks.mirror_sink import MirrorSink
from updatestream_jobs.sinks.sink import BatchContext

from updatestream import spec
from updatestream.binlog.events import SPARK_SCHEMA_DDL, ChangeEvent

BATCH = 10_000
CORES = (1, 2)


def session(cores: int) -> Any:
    from updatestream_jobs.job import spark_session

    return spark_session(f"local[{cores}]", f"mirror-executors-{cores}")


def frames(spark: Any, events: list[ChangeEvent], size: int = BATCH) -> list[Any]:
    """The workload as cached DataFrames of `size` events, one partition per shard."""
    found = []
    for start in range(0, len(events), size):
        batch = sorted(events[start : start + size], key=lambda e: e.shard)  # stable: in order
        shards = len({e.shard for e in batch})
        rows = spark.sparkContext.parallelize([e.as_tuple() for e in batch], shards)
        frame = spark.createDataFrame(rows, SPARK_SCHEMA_DDL).persist()
        frame.count()
        found.append(frame)
    return found


def mirror_config(
    server: MariaDBServer, database: str, source: str, **extra: str
) -> spec.MirrorSink:
    """The bench's mirror sink spec: `database` on `server`, the source table's columns read
    from `source` there."""
    return spec.MirrorSink.model_validate(
        {
            "type": "mirror",
            "mysql": {"host": server.host, "port": server.port},
            "database": database,
            "credentialsSecret": {"name": "bench"},
            "sourceDatabase": source,
            **extra,
        }
    )


def sink(server: MariaDBServer, secrets: Path, keyspace: spec.Keyspace, source: str) -> MirrorSink:
    config = mirror_config(server, f"tasks_{time.monotonic_ns()}", source, writeFrom="executors")
    mirror = MirrorSink(config, secrets_dir=secrets, keyspace=keyspace)
    mirror.open()
    return mirror


def rates(
    server: MariaDBServer,
    secrets: Path,
    keyspace: spec.Keyspace,
    source: str,
    events: list[ChangeEvent],
    rounds: int,
) -> dict[str, list[float]]:
    """Rows applied per second from the executors, per core count (`"1"`, `"2"`), per round."""
    found: dict[str, list[float]] = {str(cores): [] for cores in CORES}
    for cores in CORES:
        spark = session(cores)
        try:
            for round_no in range(1, rounds + 1):
                batches = frames(spark, events)
                mirror = sink(server, secrets, keyspace, source)
                taken = 0
                started = time.perf_counter()
                for batch_id, frame in enumerate(batches):
                    result = mirror.write_frame(frame, BatchContext("b", "-", batch_id))
                    taken += result.written + result.skipped
                elapsed = time.perf_counter() - started
                mirror.close()
                for frame in batches:
                    frame.unpersist()
                assert taken == len(events), (taken, len(events))
                rate = len(events) / elapsed
                found[str(cores)].append(rate)
                print(f"round {round_no}: {cores} executor core(s): {rate:,.0f} rows/s")
        finally:
            spark.stop()
    return found
