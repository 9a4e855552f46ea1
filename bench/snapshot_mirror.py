"""The snapshot end to end, for `bench.snapshot_bench`: a stream that starts with a snapshot of
`orders`, through the streaming job, into a mirror database, checked equal to the shards.

The job (`Job`, Spark `local[2]`, `availableNow`) reads the snapshot in chunks
(``snapshotChunkRows``, 4 chunks per micro-batch) and writes every batch through its mirror sink
from the executors (``writeFrom: executors``: each chunk's task collapses and applies its rows
with guarded multi-row upserts, one commit per task) into a `mariadbd` of its own with
durable commits and a 1 GiB buffer pool (a mirror sized for its table; the shards keep the
development cluster's settings). Figures: rows read (events the sink took, written or
skipped), rows written (`SinkResult.written`), rows in the mirror equal to the shards' (count
and a CRC32 sum over every column, computed by each server), the time from the query's start to
its end, and the steady rate after the first micro-batch (which carries Spark's and the workers'
start).

`reader_steady` gives the same split for a query's progress reports (the reader into Spark's
no-op sink).
"""

from __future__ import annotations

import datetime as dt
import tempfile
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.manifests import update_stream

from bench.lagtools import BatchRecord, TimedSink
from bench.sinks_bench import DURABLE
from harness.accounts import account_with_secret
from updatestream import spec
from updatestream.contract.job_config import JobConfig

MIRROR_SECRET = "bench-mirror"
MIRROR_ARGS = (*DURABLE, "--innodb-buffer-pool-size=1G")
# every column of `orders`, as text, the same on a shard and in the mirror's live view
ROW_TEXT = (
    "CONCAT_WS('|', order_id, user_id, sku, quantity, price, IFNULL(note, '~null~'), state, "
    "placed_at)"
)


def start_mirror_server(root: Path, cluster: DevCluster) -> MariaDBServer:
    """The mirror's server, and its account as a Secret beside the cluster's."""
    server = MariaDBServer(base_dir=root / "mirror", server_id=4343, extra_args=MIRROR_ARGS)
    server.start()
    account_with_secret(server, cluster.secrets_dir, MIRROR_SECRET, "mirror")
    return server


def steady(batches: list[BatchRecord]) -> dict[str, float]:
    """The first batch's rows and end, and the rate of the batches after it (batches that
    carried rows; a batch's rows are the events its sink took)."""
    batches = [b for b in batches if b.taken]
    if len(batches) < 2:
        return {"first_batch_rows": 0, "steady_rows_per_s": 0.0}
    first = batches[0]
    rows = sum(b.taken for b in batches[1:])
    return {
        "first_batch_rows": first.taken,
        "steady_rows_per_s": rows / (batches[-1].completed_at - first.completed_at),
    }


def run_mirror(
    cluster: DevCluster, mirror_port: int, database: str, chunk_rows: int
) -> dict[str, Any]:
    """One snapshot of `orders` into the mirror database `database` (a child process's work)."""
    from updatestream_jobs.job import Job, spark_session

    spark = spark_session("local[2]", "bench-snapshot-mirror")
    sink = {
        "type": "mirror",
        "mysql": {"host": "127.0.0.1", "port": mirror_port},
        "credentialsSecret": {"name": MIRROR_SECRET},
        "database": database,
        "writeFrom": "executors",
    }
    stream = spec.parse_update_stream(
        update_stream("snapshot-mirror", cluster.keyspace_name, {"mode": "snapshot"}, [sink],
                      tables=["orders"])
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as checkpoint:
        job = Job(
            JobConfig(
                stream=stream,
                keyspace=cluster.keyspace(),
                secrets_dir=cluster.secrets_dir,
                checkpoint=Path(checkpoint),
                available_now=True,
                source_options={"snapshotChunkRows": str(chunk_rows),
                                "snapshotChunksPerBatch": "4"},
            )
        )  # fmt: skip
        timed = TimedSink(job.sinks[0])
        job.sinks = [timed]
        began = time.monotonic()
        query = job.start(spark)
        query.awaitTermination()
        seconds = time.monotonic() - began
        job.stop()
    spark.stop()
    return {
        "seconds": seconds,
        "rows": sum(b.taken for b in timed.batches),
        "written": sum(b.written for b in timed.batches),
        "batches": len(timed.batches),
        **steady(timed.batches),
    }


def checksum(server: MariaDBServer, table: str) -> tuple[int, int]:
    """(rows, sum of CRC32 of every row's text), computed by the server."""
    with server.root_connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), COALESCE(SUM(CRC32({ROW_TEXT})), 0) FROM {table}")
        count, total = cur.fetchone()  # type: ignore[misc]
    return int(count), int(total)


def verify(cluster: DevCluster, mirror: MariaDBServer, database: str) -> dict[str, Any]:
    """The mirror's live rows against the serving shards' `orders`: count and checksum."""
    shards = [
        checksum(cluster.server(s), "commerce.orders")
        for s in cluster.keyspace().spec.serving_shards
    ]
    held = checksum(mirror, f"`{database}`.orders_live")
    expected = (sum(c for c, _ in shards), sum(t for _, t in shards))
    return {"shard_rows": expected[0], "mirror_rows": held[0], "equal": held == expected}


def drop(mirror: MariaDBServer, database: str) -> None:
    with mirror.root_connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def reader_steady(progress: list[Any]) -> dict[str, float]:
    """The first micro-batch's rows and seconds, and the rate of the batches after it, from a
    query's progress reports (each: its start and `durationMs.triggerExecution`)."""
    batches = []
    for report in progress:
        if report.numInputRows:
            start = dt.datetime.fromisoformat(report.timestamp.replace("Z", "+00:00"))
            end = start.timestamp() + report.durationMs.get("triggerExecution", 0) / 1000
            batches.append(
                (end, int(report.numInputRows), report.durationMs.get("triggerExecution", 0) / 1000)
            )
    if len(batches) < 2:
        return {"first_batch_rows": 0, "first_batch_s": 0.0, "steady_rows_per_s": 0.0}
    rows = sum(n for _, n, _ in batches[1:])
    return {
        "first_batch_rows": batches[0][1],
        "first_batch_s": round(batches[0][2], 3),
        "steady_rows_per_s": rows / (batches[-1][0] - batches[0][0]),
    }
