"""End-to-end lag of the streaming job under steady load, per sink, on a 2-shard cluster.

Everything is real and local: a development cluster of two `mariadbd` shards (`-80,80-`), the
traffic generator in its own process (`updatestream devcluster traffic`, with a ledger of
every committed row change and its commit time), and the streaming job (`Job`, Spark local
mode, in this process) reading both shards from their current positions into three sinks: the
Version Stream (a MariaDB of its own with durable commits), memcached and CDCv2 files. The
job's micro-batch trigger is ``--trigger-seconds`` (by default 0.1 s, the job's own default).

Each of the job's sinks is wrapped (`bench.lagtools.TimedSink`) to record when its
`write_batch` returned for each batch and which transactions the batch held. The lag of a row
change is that time minus the commit time in the ledger. The job writes the sinks one after
another in the order of the stream's spec, Version Stream first, so a sink's lag includes the
writes of the sinks before it. The job reads a batch of up to 10,000 events from Spark (the
shards) once, before the first sink's call, so every sink's lag includes that read.
For CDCv2 a second figure, "cdcv2 complete", is the time a progress statement declared the
change's second complete (readers wait for it; the sink holds a second back for
``allowedLatenessSeconds`` = 1); the changes of the last 3 s of each load are left out of it,
since after the traffic stops only the idle shards' heartbeats move that frontier.

1. Warm-up: light traffic, then wait until every sink has every change. Then, side by side,
   the time to open one connection to a shard as the source does (PyMySQL's defaults) and with
   `ssl_disabled=True`.
2. Maximum sustainable rate: unthrottled traffic (``--rate 0``) for ``--probe-seconds``,
   the job streaming at the same time; the rate is the ledger's row changes divided by the time
   from the first commit to the last sink write that delivered them (the lower of what the
   generator could commit and what the job could deliver, on this machine, together).
3. ``--rounds`` rounds of 25%, 50% and 90% of that rate for ``--duration`` seconds each,
   waiting after each until every sink has every change. Per load and sink: the median over
   rounds of p50, p99 and max.

Writes `bench/results/lag.json`, prints a table and merges `lag_p50_s`, `lag_p99_s` and
`lag_max_s` (50% load, Version Stream), `max_rate_rows_per_s` and `lag_trigger_s` into
`bench/results/summary.json`. Run with ``make bench-lag`` or
``python -m bench.lag_bench [--duration S] [--rounds N] [--trigger-seconds T]
[--source-option tail=false]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.manifests import update_stream
from updatestream_jobs.job import Job, spark_session
from updatestream_jobs.sinks.cdcv2_sink import stream_directory
from updatestream_jobs.sinks.sink import BatchContext

from bench.lagtools import BatchRecord, TimedSink, cdcv2_complete_times, event_lags, summarize
from bench.report import console, machine, median, print_table, say_load, write_result
from bench.sinks_bench import DURABLE
from bench.summary import merge_summary
from harness.accounts import account_with_secret
from updatestream import spec
from updatestream.contract.job_config import JobConfig

SHARDS = ("-80", "80-")
STREAM = "lag-bench"
UPDATESTREAM = str(Path(sys.executable).parent / "updatestream")
SINK_LABELS = ("versionstream", "memcached", "cdcv2")
TAIL_SECONDS = 3.0  # left out of "cdcv2 complete" at the end of each load (see the docstring)


class Rig:
    """The cluster, the sinks' servers, Spark and the job; `close()` stops all of it."""

    def __init__(
        self, root: Path, trigger: float, source_options: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.stack = contextlib.ExitStack()
        self.seed = 1
        try:
            self._start(trigger, source_options or {})
        except BaseException:
            self.stack.close()
            raise

    def _start(self, trigger: float, source_options: dict[str, str]) -> None:
        self.cluster = DevCluster(self.root / "cluster")
        self.stack.callback(self.cluster.down)
        self.cluster.up(",".join(SHARDS))
        self.memcached = MemcachedServer(memory_mb=256).start()
        self.stack.callback(self.memcached.stop)
        self.versionstream = MariaDBServer(
            base_dir=self.root / "versionstream", server_id=4242, extra_args=DURABLE
        )
        self.stack.callback(self.versionstream.stop)
        self.versionstream.start()
        secret = "bench-versionstream"
        account_with_secret(self.versionstream, self.cluster.secrets_dir, secret, "vs")
        self.cdc = self.root / "cdc"
        sink_specs: list[dict[str, Any]] = [
            {
                "type": "versionStream",
                "mysql": {"host": "127.0.0.1", "port": self.versionstream.port},
                "credentialsSecret": {"name": secret},
            },
            {"type": "memcached", "servers": [self.memcached.address]},
            {"type": "cdcv2", "path": str(self.cdc)},
        ]
        start = {"mode": "gtid", "gtid": self.positions()}
        stream = spec.parse_update_stream(
            update_stream(STREAM, self.cluster.keyspace_name, start, sink_specs)
        )
        self.spark = spark_session("local[2]", "lag-bench")
        self.stack.callback(self.spark.stop)
        self.job = Job(
            JobConfig(
                stream=stream,
                keyspace=self.cluster.keyspace(),
                secrets_dir=self.cluster.secrets_dir,
                checkpoint=self.root / "checkpoint",
                trigger_seconds=trigger,
                source_options=source_options,
                status_file=self.root / "status.json",
            )
        )
        self.sinks = [TimedSink(sink) for sink in self.job.sinks]
        self.job.sinks = list(self.sinks)
        self.stack.callback(self.job.stop)
        self.job.start(self.spark)

    def positions(self) -> dict[str, str]:
        return {shard: self.cluster.server(shard).gtid_position() for shard in SHARDS}

    def connections(self) -> int:
        """Connections the shards have accepted so far (`Connections`, this query's included)."""
        return sum(
            int(str(self.cluster.server(s).query("SHOW GLOBAL STATUS LIKE 'Connections'")[0][1]))
            for s in SHARDS
        )

    def traffic(self, rate: float, duration: float) -> list[LedgerEntry]:
        """Run the traffic generator in its own process; returns its ledger."""
        self.seed += 1
        ledger = self.root / f"ledger-{self.seed}.jsonl"
        command = [
            UPDATESTREAM, "devcluster", "traffic", "--dir", str(self.cluster.dir),
            "--rate", f"{rate:.0f}", "--duration", str(duration), "--ledger", str(ledger),
            "--seed", str(self.seed),
        ]  # fmt: skip
        with (self.root / "traffic.log").open("ab") as log:
            subprocess.run(command, check=True, stdout=log, stderr=log, timeout=duration + 600)
        return list(read_ledger(ledger))

    def wait_delivered(self, ledger: list[LedgerEntry], timeout: float = 600) -> None:
        """Until every sink has written every transaction of the ledger."""
        wanted = {(e.shard, e.gtid) for e in ledger}
        deadline = time.monotonic() + timeout
        while True:
            if all(wanted <= sink.delivered_at().keys() for sink in self.sinks):
                return
            if not self.job.query.isActive:
                raise SystemExit(f"the job stopped: {self.job.query.exception()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"the sinks did not deliver the ledger within {timeout:.0f}s")
            time.sleep(0.5)

    def close(self) -> None:
        self.stack.close()


def lags_of(rig: Rig, ledger: list[LedgerEntry]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label, sink in zip(SINK_LABELS, rig.sinks, strict=True):
        out[label] = summarize(*event_lags(ledger, sink.delivered_at())).as_dict()
    cdcv2 = rig.sinks[SINK_LABELS.index("cdcv2")]
    directory = stream_directory(rig.cdc, BatchContext(STREAM, "-", 0))
    end = max(e.commit_time for e in ledger) - TAIL_SECONDS
    steady = [e for e in ledger if e.commit_time <= end]
    out["cdcv2 complete"] = summarize(
        *event_lags(steady, cdcv2_complete_times(directory, cdcv2))
    ).as_dict()
    return out


def batch_figures(rig: Rig, since: float, until: float) -> dict[str, Any]:
    """Batches started in [since, until]: how many per second, their median duration in the
    driver (the first sink's call to the last sink's return), and per sink the median time to
    take the batch's events (for the first sink: reading them from the shards; for the others:
    from Spark's cached copy) and to write them."""

    def window(sink: TimedSink) -> list[BatchRecord]:
        return [b for b in sink.batches if since <= b.started_at <= until]

    ends = {b.batch_id: b.completed_at for b in rig.sinks[-1].batches}
    spans = [ends[b.batch_id] - b.started_at for b in window(rig.sinks[0]) if b.batch_id in ends]
    rows = [sum(b.transactions.values()) for b in window(rig.sinks[0])]
    sinks = {
        label: {
            "take_s": round(median([b.read_at - b.started_at for b in window(sink)] or [0]), 3),
            "write_s": round(median([b.completed_at - b.read_at for b in window(sink)] or [0]), 3),
        }
        for label, sink in zip(SINK_LABELS, rig.sinks, strict=True)
    }
    return {
        "batches_per_s": round(len(spans) / max(until - since, 1e-9), 2),
        "median_batch_s": round(median(spans), 3) if spans else 0.0,
        "median_batch_rows": median(rows) if rows else 0,
        "median_sink_s": sinks,
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
    """Connections each shard accepted per micro-batch since `since`, leaving out the traffic
    generator's and the counting query's own (one each per shard)."""
    batches = sum(1 for b in rig.sinks[0].batches if b.started_at >= since)
    return round((opened - 2 * len(SHARDS)) / max(batches, 1) / len(SHARDS), 2)


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


def probe_max_rate(rig: Rig, seconds: float) -> dict[str, Any]:
    console.print(f"maximum rate: unthrottled traffic for {seconds:.0f}s with the job streaming")
    ledger = rig.traffic(0, seconds)
    rig.wait_delivered(ledger)
    first = min(e.commit_time for e in ledger)
    last_commit = max(e.commit_time for e in ledger)
    delivered = rig.sinks[-1].delivered_at()
    last_write = max(delivered[(e.shard, e.gtid)] for e in ledger)
    figures = {
        "rows": len(ledger),
        "committed_rows_per_s": round(len(ledger) / (last_commit - first)),
        "sustained_rows_per_s": round(len(ledger) / (last_write - first)),
        "catch_up_s": round(last_write - last_commit, 2),
        **batch_figures(rig, first, last_commit),
        "spark_batch_parts_s": spark_durations(rig.job.query, first, last_commit),
    }
    console.print(f"  {figures}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per load")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three loads")
    parser.add_argument("--probe-seconds", type=float, default=30.0, help="max-rate probe")
    parser.add_argument("--warmup-seconds", type=float, default=10.0)
    parser.add_argument("--trigger-seconds", type=float, default=0.1)
    parser.add_argument(
        "--source-option",
        type=lambda text: tuple(text.split("=", 1)),
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a source option of the job, e.g. tail=false (repeatable)",
    )
    args = parser.parse_args()
    load_before = say_load()
    loads = (0.25, 0.5, 0.9)
    runs: dict[str, list[dict[str, Any]]] = {f"{int(f * 100)}%": [] for f in loads}
    with tempfile.TemporaryDirectory(prefix="lag-bench-") as tmp:
        rig = Rig(Path(tmp), args.trigger_seconds, dict(args.source_option))
        try:
            console.print(f"warm-up: {args.warmup_seconds:.0f}s at 100 rows/s")
            rig.wait_delivered(rig.traffic(100, args.warmup_seconds))
            connect = connect_ms(rig)
            console.print(f"one shard connection (ms): {connect}")
            probe = probe_max_rate(rig, args.probe_seconds)
            max_rate = probe["sustained_rows_per_s"]
            for round_no in range(args.rounds):
                for fraction in loads:
                    rate = fraction * max_rate
                    began, connections = time.time(), rig.connections()
                    ledger = rig.traffic(rate, args.duration)
                    rig.wait_delivered(ledger)
                    first = min(e.commit_time for e in ledger)
                    last = max(e.commit_time for e in ledger)
                    run = {
                        "shard_connections_per_batch": connections_per_batch(
                            rig, rig.connections() - connections, began
                        ),
                        "requested_rows_per_s": round(rate),
                        "committed_rows_per_s": round(len(ledger) / (last - first)),
                        "load_average": say_load(),
                        **batch_figures(rig, first, last),
                        "spark_batch_parts_s": spark_durations(rig.job.query, first, last),
                        "sinks": lags_of(rig, ledger),
                    }
                    runs[f"{int(fraction * 100)}%"].append(run)
                    vs = run["sinks"]["versionstream"]
                    console.print(
                        f"round {round_no + 1}, {fraction:.0%} ({rate:.0f} rows/s): Version "
                        f"Stream p50 {vs['p50_s']}s p99 {vs['p99_s']}s max {vs['max_s']}s"
                    )
        finally:
            rig.close()
    report(args, probe, runs, load_before, connect)


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for sink in runs[0]["sinks"]:
        out[sink] = {}
        for key in ("p50_s", "p99_s", "max_s"):
            values = [r["sinks"][sink][key] for r in runs if r["sinks"][sink][key] is not None]
            out[sink][key] = round(median(values), 3) if values else None
    return out


def report(
    args: argparse.Namespace,
    probe: dict[str, Any],
    runs: dict[str, list[dict[str, Any]]],
    load_before: list[float],
    connect: dict[str, float],
) -> None:
    loads = {name: {"runs": r, "median": medians(r)} for name, r in runs.items()}
    rows = []
    for name, data in loads.items():
        rate = data["runs"][0]["requested_rows_per_s"]
        for sink, figures in data["median"].items():
            rows.append([name, rate, sink, figures["p50_s"], figures["p99_s"], figures["max_s"]])
    print_table(
        f"End-to-end lag (s), median of {args.rounds} rounds of {args.duration:.0f}s, "
        f"trigger {args.trigger_seconds}s; max sustainable rate "
        f"{probe['sustained_rows_per_s']:,} rows/s",
        ["load", "rows/s", "sink", "p50", "p99", "max"],
        rows,
    )
    half = loads["50%"]["median"]["versionstream"]  # the goals are judged in the summary
    write_result(
        "lag",
        {
            "machine": machine(),
            "load_average_before": load_before,
            "trigger_seconds": args.trigger_seconds,
            "source_options": dict(args.source_option),
            "seconds_per_load": args.duration,
            "rounds": args.rounds,
            "shards": list(SHARDS),
            "sink_order": list(SINK_LABELS),
            "max_rate": probe,
            "shard_connect_ms": connect,
            "loads": loads,
        },
    )
    merge_summary(
        {
            "machine": machine(),
            "lag_p50_s": half["p50_s"],
            "lag_p99_s": half["p99_s"],
            "lag_max_s": half["max_s"],
            "lag_trigger_s": args.trigger_seconds,
            "max_rate_rows_per_s": probe["sustained_rows_per_s"],
        }
    )


if __name__ == "__main__":
    main()
