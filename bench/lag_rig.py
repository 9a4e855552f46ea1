"""The lag benchmark's rig: a 2-shard development cluster, the sinks' servers, the streaming job
reading both shards into four sinks, and the C load generator committing traffic beside it.

Everything is real and local: two `mariadbd` shards (`-80,80-`); one `mariadbd` with durable
commits for the sinks that write to a database (Version Stream and mirror, each in its own
database); one memcached; CDCv2 files; the job (`Job`, Spark `local[2]`) in this process, each of
its sinks wrapped in `bench.lagtools.TimedSink`; the traffic from `bench/loadgen` in its own
process, with a ledger of every committed row change and its commit clock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from pathlib import Path
from typing import Any

import psutil
import pymysql
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import LedgerEntry
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.manifests import update_stream
from updatestream_jobs.job import spark_session

from bench.lagtools import TimedSink
from bench.loadgen_runner import LoadOptions, LoadRun, run_load
from bench.report import console, median
from bench.sinks_bench import DURABLE
from harness.accounts import account_with_secret
from harness.cluster_job import cluster_job
from updatestream import spec

SHARDS = ("-80", "80-")
STREAM = "lag-bench"
SINK_LABELS = ("versionstream", "memcached", "cdcv2", "mirror")  # the order the job writes them
SINKS_SECRET = "bench-sinks"


class Rig:
    """The cluster, the sinks' servers, Spark and the job; `close()` stops all of it."""

    def __init__(
        self,
        root: Path,
        trigger: float,
        source_options: dict[str, str] | None = None,
        connections: int = 4,
    ) -> None:
        self.root = root
        self.connections_per_shard = connections
        self.stack = contextlib.ExitStack()
        self.seed = 1
        self.checkpoint_number = 0
        try:
            self._start_servers()
        except BaseException:
            self.stack.close()
            raise
        self.trigger = trigger
        self.source_options = source_options or {}

    def _start_servers(self) -> None:
        self.cluster = DevCluster(self.root / "cluster")
        self.stack.callback(self.cluster.down)
        self.cluster.up(",".join(SHARDS))
        self.memcached = MemcachedServer(memory_mb=256).start()
        self.stack.callback(self.memcached.stop)
        self.sinks_server = MariaDBServer(
            base_dir=self.root / "sinks", server_id=4242, extra_args=DURABLE
        )
        self.stack.callback(self.sinks_server.stop)
        self.sinks_server.start()
        account_with_secret(self.sinks_server, self.cluster.secrets_dir, SINKS_SECRET, "sinks")
        self.cdc = self.root / "cdc"

    def start_job(self) -> None:
        """Spark and the job, streaming both shards from their current positions."""
        endpoint = {"host": "127.0.0.1", "port": self.sinks_server.port}
        credentials = {"name": SINKS_SECRET}
        sinks = [
            {"type": "versionStream", "mysql": endpoint, "credentialsSecret": credentials},
            {"type": "memcached", "servers": [self.memcached.address]},
            {"type": "cdcv2", "path": str(self.cdc)},
            {
                "type": "mirror",
                "mysql": endpoint,
                "credentialsSecret": credentials,
                "writeFrom": "executors",
            },
        ]
        start = {"mode": "gtid", "gtid": self.positions()}
        stream = spec.parse_update_stream(
            update_stream(STREAM, self.cluster.keyspace_name, start, sinks)
        )
        # the batches of a backlog are persisted in the driver's heap (1 GiB by default)
        self.spark = spark_session("local[2]", "lag-bench", {"spark.driver.memory": "3g"})
        self.stack.callback(self.spark.stop)
        self.job = cluster_job(
            self.cluster,
            stream,
            self.root,
            checkpoint=self.root / f"checkpoint-{self.checkpoint_number}",
            trigger_seconds=self.trigger,
            source_options=self.source_options,
        )
        self.sinks = [TimedSink(sink) for sink in self.job.sinks]
        for timed in self.sinks[1:]:
            if timed.writes_from_executors:  # the Version Stream saw every batch's events
                timed.peer = self.sinks[0]
        self.job.sinks = list(self.sinks)
        self.stack.callback(self.job.stop)
        self.job.start(self.spark)

    def start_warm(self, attempts: int = 3) -> None:
        """Start the job and let it deliver 10 s of light traffic. On a busy machine Spark's
        Python workers may miss Spark's fixed 10 s to connect back at the start: then the job
        starts again, from a fresh checkpoint, at the shards' new positions."""
        for attempt in range(1, attempts + 1):
            self.start_job()
            try:
                self.wait_delivered(self.traffic(200, 10).ledger)
                return
            except SystemExit as exc:
                if "failed to connect back" not in str(exc) or attempt == attempts:
                    raise
            console.print("a Spark Python worker did not start in time; starting the job again")
            self.job.stop()
            self.spark.stop()
            self.checkpoint_number += 1

    def positions(self) -> dict[str, str]:
        return {shard: self.cluster.server(shard).gtid_position() for shard in SHARDS}

    def connections(self) -> int:
        """Connections the shards have accepted so far (`Connections`, this query's included)."""
        return sum(
            int(str(self.cluster.server(s).query("SHOW GLOBAL STATUS LIKE 'Connections'")[0][1]))
            for s in SHARDS
        )

    def traffic(self, rate: float, duration: float) -> LoadRun:
        """The C generator for `duration` seconds at `rate` row changes/s (0: unthrottled)."""
        self.seed += 1
        options = LoadOptions(
            rate=rate, duration=duration, seed=self.seed, connections=self.connections_per_shard
        )
        ledger = self.root / f"ledger-{self.seed}.jsonl"
        return run_load(self.cluster.manifest_path, self.cluster.secrets_dir, ledger, options)

    def wait_delivered(self, ledger: list[LedgerEntry], timeout: float = 900) -> float:
        """Until every sink has written every transaction of the ledger; returns when the last
        sink's write that completed it returned."""
        wanted = {(e.shard, e.gtid) for e in ledger}
        deadline = time.monotonic() + timeout
        while True:
            if all(wanted <= sink.delivered_at().keys() for sink in self.sinks):
                delivered = self.sinks[-1].delivered_at()
                return max(delivered[key] for key in wanted)
            if not self.job.query.isActive:
                raise SystemExit(f"the job stopped: {self.job.query.exception()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"the sinks did not deliver the ledger within {timeout:.0f}s")
            time.sleep(0.5)

    def close(self) -> None:
        self.stack.close()


def process_cpu(process: psutil.Process, reaped: bool = True) -> float:
    """User and system CPU seconds of a process (with `reaped`, of its ended children too)."""
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    own = times.user + times.system
    return own + (times.children_user + times.children_system if reaped else 0.0)


def cpu_seconds(rig: Rig) -> dict[str, float]:
    """CPU seconds so far of every part of the rig: this process (the job's driver Python,
    without its children); Spark's JVM; the stream reader's runner (the Python process Spark
    runs the source's planning in, with the binlog tails and the fast lane); Spark's other
    Python processes (the workers that run tasks, with their ended children and the JVM's);
    the two shards, the sinks' MariaDB and memcached. The load generator reports its own."""
    me = psutil.Process()
    jvms = [p for p in me.children() if p.name() == "java"]
    python = [d for p in jvms for d in p.children(recursive=True)]
    runners = [p for p in python if _is_source_runner(p)]
    jvm_reaped = sum(process_cpu(p) - process_cpu(p, reaped=False) for p in jvms)
    return {
        "job_driver_python": round(process_cpu(me, reaped=False), 3),
        "spark_jvm": round(sum(process_cpu(p, reaped=False) for p in jvms), 3),
        "source_runner": round(sum(process_cpu(p) for p in runners), 3),
        "spark_python_workers": round(
            sum(process_cpu(p) for p in python if p not in runners) + jvm_reaped, 3
        ),
        "shards_mariadbd": round(
            sum(process_cpu(psutil.Process(rig.cluster.server(s).pid)) for s in SHARDS), 3
        ),
        "sinks_mariadbd": round(process_cpu(psutil.Process(rig.sinks_server.pid)), 3),
        "memcached": round(process_cpu(psutil.Process(rig.memcached.pid)), 3),
    }


def _is_source_runner(process: psutil.Process) -> bool:
    try:
        return "python_streaming_source_runner" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def cpu_per_row(before: dict[str, float], after: dict[str, float], generator_s: float,
                rows: int, wall_s: float) -> dict[str, Any]:  # fmt: skip
    """µs of CPU per row change of each part between two `cpu_seconds`, and the cores all of
    it kept busy over `wall_s`."""
    spent = {part: after[part] - before[part] for part in after}
    spent["load_generator"] = generator_s
    return {
        "us_per_row": {part: round(s / max(rows, 1) * 1e6, 1) for part, s in spent.items()},
        "total_us_per_row": round(sum(spent.values()) / max(rows, 1) * 1e6, 1),
        "cores_busy": round(sum(spent.values()) / max(wall_s, 1e-9), 2),
    }


def connect_ms(rig: Rig, attempts: int = 20) -> dict[str, float]:
    """Median milliseconds to open and close one connection to a shard as the binlog reader:
    with PyMySQL's defaults (as the source connects when `tls` is `disabled`), and with
    `ssl_disabled=True`; alternated, side by side. The shards do not offer TLS either way."""
    creds = rig.cluster.credentials("reader")
    server = rig.cluster.server(SHARDS[0])
    variants: dict[str, dict[str, Any]] = {
        "pymysql_defaults": {},
        "ssl_disabled": {"ssl_disabled": True},
    }
    times: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(attempts):
        for label, extra in variants.items():
            began = time.perf_counter()
            pymysql.connect(host=server.host, port=server.port, user=creds.username,
                            password=creds.password, **extra).close()  # fmt: skip
            times[label].append((time.perf_counter() - began) * 1000)
    return {label: round(median(values), 2) for label, values in times.items()}


def connections_per_batch(rig: Rig, opened: int, since: float) -> float:
    """Connections each shard accepted per micro-batch since `since`, leaving out the load
    generator's (its writers per shard) and the counting query's own (one per shard)."""
    batches = sum(1 for b in rig.sinks[0].batches if b.started_at >= since)
    own = (rig.connections_per_shard + 1) * len(SHARDS)
    return round((opened - own) / max(batches, 1) / len(SHARDS), 2)


def spark_durations(query: Any, since: float, until: float) -> dict[str, float]:
    """Median seconds of each part of Spark's micro-batches that read rows in [since, until]
    (`durationMs` of the query's progress reports: latestOffset, addBatch = the sinks, ...)."""
    parts: dict[str, list[float]] = {}
    for progress in query.recentProgress:
        started = dt.datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00"))
        if since <= started.timestamp() <= until and progress.numInputRows > 0:
            for part, ms in progress.durationMs.items():
                parts.setdefault(part, []).append(ms / 1000)
    return {part: round(median(values), 3) for part, values in sorted(parts.items())}
