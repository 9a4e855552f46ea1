"""`bench-peers`' lag part: our job and Debezium at fixed write rates on one shard.

A one-shard development cluster (`-`) of MariaDB or MySQL 8, a durable Version Stream server of
the same flavor and one Spark session (`LagRig`); per round and rate, Debezium at its default
poll interval, Debezium at 10 ms and our job, each warmed up first; lags are joined with the
traffic generator's ledger. The job writes a console file, the Version Stream and memcached, in
that order, and its memcached fast lane (on, the default) logs when it applied each transaction
(`fastLaneLog`): `fastlane` is that time minus the commit, the invalidation's own lag, and
`tailed` the time the shard's binlog tail read the transaction's commit event minus the commit
(the delivery of the binlog to the driver; `fastlane` minus `tailed` is the lane's own work).
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger
from updatestream_cli.devcluster.local_server import LocalServer, ServerFlavor
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.mysql_server import MySQLServer
from updatestream_cli.devcluster.sample_schema import DATABASE
from updatestream_cli.manifests import update_stream
from updatestream_jobs.job import Job, spark_session

from bench.debezium_peer import Harness, debezium_properties, harness_command
from bench.lag_rig import spark_durations
from bench.lagtools import TimedSink, event_lags, fast_lane_times, summarize
from bench.peertools import driver_phases, medians, received_at, sink_phases
from bench.report import console
from bench.sinks_bench import DURABLE
from harness.accounts import ALL_PRIVILEGES, account_with_secret
from harness.cluster_job import cluster_job
from harness.stream_job import CLI
from updatestream import spec

SHARD = "-"
SINK_LABELS = ("console", "versionstream", "memcached")  # the order the job writes them
FAST_LANE = "fastlane"  # the memcached fast lane's invalidations, ahead of the batches
# the fast lane's first phase: the binlog tail has read the transaction's commit event
TAILED = "tailed"
VS_SECRET = "bench-versionstream"


class LagRig:
    """A one-shard development cluster, a durable Version Stream server and Spark."""

    def __init__(
        self, root: Path, build_dir: Path, trigger: float, flavor: ServerFlavor = "mariadb"
    ) -> None:
        self.root = root
        self.build_dir = build_dir
        self.trigger = trigger
        self.flavor = flavor
        self.seq = 0
        self.stack = contextlib.ExitStack()
        try:
            self._start()
        except BaseException:
            self.stack.close()
            raise

    def _start(self) -> None:
        self.cluster = DevCluster(self.root / "cluster", flavor=self.flavor)
        self.stack.callback(self.cluster.down)
        self.cluster.up(SHARD)
        self.shard = self.cluster.server(SHARD)
        self.dbz_password = secrets.token_urlsafe(16)
        self.shard.create_account("dbz", self.dbz_password, [ALL_PRIVILEGES])
        kind = MySQLServer if self.flavor == "mysql" else MariaDBServer
        self.versionstream: LocalServer = kind(
            base_dir=self.root / "versionstream", server_id=4242, extra_args=DURABLE
        )
        self.stack.callback(self.versionstream.stop)
        self.versionstream.start()
        account_with_secret(self.versionstream, self.cluster.secrets_dir, VS_SECRET, "vs")
        self.memcached = MemcachedServer(memory_mb=128).start()
        self.stack.callback(self.memcached.stop)
        self.spark = spark_session("local[2]", "peers-bench-lag")
        self.stack.callback(self.spark.stop)

    def close(self) -> None:
        self.stack.close()

    def traffic(self, rate: float, duration: float) -> list[LedgerEntry]:
        """Single-row transactions at `rate` for `duration` seconds, from the generator's own
        process; returns its ledger."""
        self.seq += 1
        ledger = self.root / f"ledger-{self.seq}.jsonl"
        command = [
            CLI, "devcluster", "traffic", "--dir", str(self.cluster.dir),
            "--rate", f"{rate:.0f}", "--duration", str(duration), "--ledger", str(ledger),
            "--seed", str(self.seq), "--max-tx-rows", "1",
        ]  # fmt: skip
        log_path = self.root / "traffic.log"
        with log_path.open("ab") as log:
            done = subprocess.run(command, stdout=log, stderr=log, timeout=duration + 600)
        if done.returncode != 0:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError(
                f"the traffic generator exited with {done.returncode}:\n" + "\n".join(tail)
            )
        return list(read_ledger(ledger))

    def debezium(
        self, poll_ms: int | None, rate: float, duration: float, warmup: float
    ) -> dict[str, Any]:
        self.seq += 1
        props = debezium_properties(
            int(self.shard.port or 0),
            "dbz",
            self.dbz_password,
            DATABASE,
            5400 + self.seq,
            "no_data",
            poll_ms,
            flavor=self.flavor,
        )
        harness = Harness(harness_command(self.build_dir, props, None), self.root / "debezium.log")
        try:
            harness.wait_for("connector start", lambda o: o.started_at is not None, 180)
            warm = {(e.shard, e.gtid) for e in self.traffic(100, warmup)}
            harness.wait_for("warm-up changes", lambda o: warm <= received_at(o, SHARD).keys(), 180)
            ledger = self.traffic(rate, duration)
            wanted = {(e.shard, e.gtid) for e in ledger}
            harness.wait_for("changes", lambda o: wanted <= received_at(o, SHARD).keys(), 300)
        finally:
            harness.stop()
        report = summarize(*event_lags(ledger, received_at(harness.output, SHARD)))
        return {"committed_rows_per_s": committed_rate(ledger), **report.as_dict()}

    def _sink_specs(self, name: str) -> list[dict[str, Any]]:
        """The job's sinks, in `SINK_LABELS`' order."""
        return [
            {"type": "console", "path": str(self.root / f"{name}.jsonl")},
            {
                "type": "versionStream",
                "mysql": {"host": "127.0.0.1", "port": self.versionstream.port},
                "credentialsSecret": {"name": VS_SECRET},
            },
            {"type": "memcached", "servers": [self.memcached.address]},
        ]

    def job(
        self,
        rate: float,
        duration: float,
        warmup: float,
        source_options: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        self.seq += 1
        name = f"peers-{self.seq}"  # a new stream each time: sinks keep batch ids per stream
        sink_specs = self._sink_specs(name)
        lane_log = self.root / f"{name}-fast-lane.jsonl"
        start = {"mode": "gtid", "gtid": {SHARD: self.shard.gtid_position()}}
        manifest = update_stream(name, self.cluster.keyspace_name, start, sink_specs, [SHARD])
        stream = spec.parse_update_stream(manifest)
        job = cluster_job(
            self.cluster,
            stream,
            self.root,
            checkpoint=self.root / f"{name}-checkpoint",
            status_file=self.root / f"{name}-status.json",
            trigger_seconds=self.trigger,
            source_options={**(source_options or {}), "fastLaneLog": str(lane_log)},
        )
        sinks = [TimedSink(sink) for sink in job.sinks]
        job.sinks = list(sinks)
        job.start(self.spark)
        try:
            wait_delivered(job, sinks, self.traffic(100, warmup))
            ledger = self.traffic(rate, duration)
            wait_delivered(job, sinks, ledger)
            first = min(e.commit_time for e in ledger)
            last = max(e.commit_time for e in ledger)
            parts = spark_durations(job.query, first, last)
            driver = driver_phases(list(job.batch_phases), SINK_LABELS, first, last)
        finally:
            job.stop()
        return {
            "committed_rows_per_s": committed_rate(ledger),
            "sinks": {
                **{
                    label: summarize(*event_lags(ledger, sink.delivered_at())).as_dict()
                    for label, sink in zip(SINK_LABELS, sinks, strict=True)
                },
                FAST_LANE: summarize(*event_lags(ledger, fast_lane_times(lane_log))).as_dict(),
                TAILED: summarize(
                    *event_lags(ledger, fast_lane_times(lane_log, "tailedAt"))
                ).as_dict(),
            },
            "batch_phases": sink_phases(
                {label: sink.batches for label, sink in zip(SINK_LABELS, sinks, strict=True)},
                first,
                last,
            ),
            "spark_batch_parts_s": parts,
            "driver_phases_s": driver,
        }


def committed_rate(ledger: list[LedgerEntry]) -> float:
    first = min(e.commit_time for e in ledger)
    last = max(e.commit_time for e in ledger)
    return round(len(ledger) / max(last - first, 1e-9))


def wait_delivered(
    job: Job, sinks: list[TimedSink], ledger: list[LedgerEntry], timeout: float = 300
) -> None:
    wanted = {(e.shard, e.gtid) for e in ledger}
    deadline = time.monotonic() + timeout
    while not all(wanted <= sink.delivered_at().keys() for sink in sinks):
        if not job.query.isActive:
            raise SystemExit(f"the job stopped: {job.query.exception()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the sinks did not deliver the ledger within {timeout:.0f}s")
        time.sleep(0.2)


def lag_rounds(
    rig: LagRig, rates: list[int], rounds: int, duration: float, warmup: float
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """rate -> system -> one result per round; the systems interleaved within each round."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        str(rate): {"debezium_default": [], "debezium_poll10": [], "job": []} for rate in rates
    }
    for number in range(1, rounds + 1):
        for rate in rates:
            at = runs[str(rate)]
            at["debezium_default"].append(rig.debezium(None, rate, duration, warmup))
            at["debezium_poll10"].append(rig.debezium(10, rate, duration, warmup))
            at["job"].append(rig.job(rate, duration, warmup))
            console.print(
                f"lag round {number} at {rate} rows/s: p50/p99 Debezium default "
                f"{at['debezium_default'][-1]['p50_s']}/{at['debezium_default'][-1]['p99_s']}, "
                f"poll 10 ms {at['debezium_poll10'][-1]['p50_s']}/"
                f"{at['debezium_poll10'][-1]['p99_s']}, job console "
                f"{at['job'][-1]['sinks']['console']['p50_s']}/"
                f"{at['job'][-1]['sinks']['console']['p99_s']}, Version Stream "
                f"{at['job'][-1]['sinks']['versionstream']['p50_s']}/"
                f"{at['job'][-1]['sinks']['versionstream']['p99_s']}, fast lane "
                f"{at['job'][-1]['sinks'][FAST_LANE]['p50_s']}/"
                f"{at['job'][-1]['sinks'][FAST_LANE]['p99_s']} (tailed "
                f"{at['job'][-1]['sinks'][TAILED]['p50_s']}/"
                f"{at['job'][-1]['sinks'][TAILED]['p99_s']})"
            )
    return runs


def lag_medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per system: the median over rounds of p50, p99 and max (the job: per sink), and the
    job's per-batch phases."""
    keys = ("p50_s", "p99_s", "max_s", "committed_rows_per_s")
    out: dict[str, Any] = {}
    for system in ("debezium_default", "debezium_poll10"):
        out[system] = medians([{k: r[k] for k in keys} for r in runs[system]])
    for label in (*SINK_LABELS, FAST_LANE, TAILED):
        out[f"job_{label}"] = medians([{k: r["sinks"][label][k] for k in keys[:3]}
                                       for r in runs["job"]])  # fmt: skip
    out["job_batch_phases"] = medians([flat(r["batch_phases"]) for r in runs["job"]])
    out["job_spark_batch_parts_s"] = medians([r["spark_batch_parts_s"] for r in runs["job"]])
    out["job_driver_phases_s"] = medians([r["driver_phases_s"] for r in runs["job"]])
    return out


def flat(nested: dict[str, Any], prefix: str = "") -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
