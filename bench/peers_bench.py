"""Our source and job side by side with Debezium, on one real MariaDB each.

Debezium runs as its embedded engine in a small Java harness (`bench/peers/debezium`, built by
`make bench-peers` into the cache directory): Debezium 2.6's MySQL connector with its MariaDB
adapter (`connector.adapter=mariadb`), offsets and schema history in memory. The harness
prints when each row change reached it (see `bench.peertools`).

1. Catch-up (rows/s from an existing binlog): one local MariaDB with a binlog of ``--rows``
   row inserts in 100-row transactions (`bench.source_bench.prepare`). Each round runs, in
   turn: Debezium (`snapshot.mode=never`: it reads the binlog from its start), the plain
   python-mysql-replication read, `mariadb-binlog`, and our source through Spark into the
   no-op sink (bench-source's functions). Debezium's figure is its first to its last row
   change received (JVM start and connector start excluded); it is also given counting the
   engine's start (from the harness's `main`) and counting the JVM's start.
2. End-to-end lag at fixed write rates: a one-shard development cluster (`-`), the traffic
   generator in its own process committing single-row transactions at ``--rates`` (by
   default 600 rows/s and the rate `bench-lag` used at 50% load, read from
   `bench/results/lag.json`) for ``--duration`` seconds, with a ledger of commit times. Per
   round and rate, in turn: Debezium with its default `poll.interval.ms` (500), Debezium with
   `poll.interval.ms=10` (each started with `snapshot.mode=no_data` at the current position),
   and our job (Spark local mode, trigger ``--trigger-seconds``, 0.1 s as bench-lag) into its
   console sink (a file, first) and its Version Stream sink (a durable MariaDB, second). Each
   is warmed up with light traffic that it must deliver first. A change's lag is when the
   harness received it, or when the job's sink write returned (`bench.lagtools.TimedSink`),
   minus its commit time in the ledger. For the job, the per-batch cost is broken down by
   phase: Spark's `durationMs` parts and, per sink, the time to take the batch's rows and to
   write them.

Every figure is the median over ``--rounds`` rounds. Writes `bench/results/peers.json` (every
round, load averages before and after) and merges `debezium_lag_p99_s` (at the 50% rate,
default settings) and `source_vs_debezium_ratio` (our source through Spark / Debezium first
to last) into `bench/results/summary.json`. Run with ``make bench-peers``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger
from updatestream_cli.devcluster.schema import DATABASE
from updatestream_cli.devcluster.server import MariaDBServer
from updatestream_jobs.job import Job, spark_session

from bench import source_bench
from bench.lag_rig import spark_durations
from bench.lagtools import TimedSink, event_lags, summarize
from bench.peertools import (
    CatchUp,
    HarnessOutput,
    catch_up,
    driver_phases,
    medians,
    parse_lines,
    ratio,
    received_at,
    sink_phases,
)
from bench.report import RESULTS, console, machine, print_table, say_load, write_result
from bench.sinks_bench import DURABLE
from bench.summary import merge_summary
from updatestream import spec
from updatestream.contract.job import JobConfig

HARNESS_CLASS = "io.updatestream.bench.DebeziumPeer"
UPDATESTREAM = str(Path(sys.executable).parent / "updatestream")
SHARD = "-"
SINK_LABELS = ("console", "versionstream")
DEFAULT_RATE = 600
DEBEZIUM = "2.6.2.Final, embedded engine, MySQL connector with connector.adapter=mariadb"


# -- Debezium -------------------------------------------------------------------------------------


def debezium_properties(
    port: int,
    user: str,
    password: str,
    database: str,
    server_id: int,
    snapshot_mode: str,
    poll_interval_ms: int | None = None,
) -> dict[str, str]:
    """The engine's and the connector's properties: one MariaDB on 127.0.0.1, memory offsets
    and schema history, row changes of `database` only."""
    props = {
        "name": f"peer-{server_id}",
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "connector.adapter": "mariadb",
        "database.protocol": "jdbc:mariadb",
        "database.jdbc.driver": "org.mariadb.jdbc.Driver",
        "database.ssl.mode": "disabled",
        "database.hostname": "127.0.0.1",
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.server.id": str(server_id),
        "topic.prefix": "peer",
        "database.include.list": database,
        "snapshot.mode": snapshot_mode,
        "snapshot.locking.mode": "none",
        "include.schema.changes": "false",
        "tombstones.on.delete": "false",
        "offset.storage": "org.apache.kafka.connect.storage.MemoryOffsetBackingStore",
        "offset.flush.interval.ms": "60000",
        "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
    }
    if poll_interval_ms is not None:
        props["poll.interval.ms"] = str(poll_interval_ms)
    return props


def harness_command(build_dir: Path, props: dict[str, str], expect: int | None) -> list[str]:
    classpath = f"{build_dir / 'debezium-peer.jar'}{os.pathsep}{build_dir / 'lib' / '*'}"
    command = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
               HARNESS_CLASS]  # fmt: skip
    if expect is not None:
        command += ["--expect", str(expect)]
    return command + [f"{key}={value}" for key, value in props.items()]


class Harness:
    """The Debezium harness streaming in the background; `stop()` closes its input and waits."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.output = HarnessOutput()
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,))
        self._reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.output.add(line)

    def wait_for(self, what: str, ready: Callable[[HarnessOutput], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready(self.output):
            if self.output.errors:
                raise SystemExit(f"Debezium failed: {self.output.errors[0]}")
            if self.process.poll() is not None:
                raise SystemExit(f"the Debezium harness exited ({self.process.returncode})")
            if time.monotonic() > deadline:
                raise SystemExit(f"Debezium: no {what} within {timeout:.0f}s")
            time.sleep(0.2)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)
        self._log.close()


def debezium_catch_up(
    build_dir: Path, server: MariaDBServer, user: str, password: str, rows: int, log: Path
) -> CatchUp:
    props = debezium_properties(int(server.port or 0), user, password, "bench", 5400, "never")
    with log.open("ab") as err:
        done = subprocess.run(
            harness_command(build_dir, props, rows), stdout=subprocess.PIPE, stderr=err,
            text=True, timeout=900, check=False,
        )  # fmt: skip
    result = catch_up(parse_lines(done.stdout.splitlines()), rows)
    if done.returncode != 0:
        raise SystemExit(f"the Debezium harness exited with {done.returncode}")
    return result


# -- catch-up -------------------------------------------------------------------------------------


def timed_rate(count: Callable[[], int], expected: int, label: str) -> float:
    began = time.perf_counter()
    rows = count()
    elapsed = time.perf_counter() - began
    if rows != expected:
        raise SystemExit(f"{label}: counted {rows} rows, expected {expected}")
    return rows / elapsed


def catch_up_rounds(
    build_dir: Path, root: Path, rows: int, rounds: int
) -> list[dict[str, float | None]]:
    server, options, _start, _end = source_bench.prepare(root, rows)
    password = (root / "secrets" / source_bench.READER_SECRET / "password").read_text()
    out: list[dict[str, float | None]] = []
    try:
        dbz_password = secrets.token_urlsafe(16)
        server.create_account("dbz", dbz_password, ["GRANT ALL PRIVILEGES ON *.* TO {user}"])
        spark = spark_session("local[2]", "peers-bench-catch-up")
        try:
            counted = source_bench.spark_count(spark, options)  # warm-up; checks the count
            if counted != rows:
                raise SystemExit(f"source (Spark): counted {counted}, expected {rows}")
            for number in range(1, rounds + 1):
                dbz = debezium_catch_up(build_dir, server, "dbz", dbz_password, rows,
                                        root / "debezium.log")  # fmt: skip
                figures: dict[str, float | None] = {
                    "debezium_first_to_last_rows_per_s": dbz.first_to_last_rows_per_s,
                    "debezium_with_engine_start_rows_per_s": dbz.with_engine_start_rows_per_s,
                    "debezium_with_jvm_start_rows_per_s": dbz.with_jvm_start_rows_per_s,
                    "debezium_engine_start_s": dbz.engine_start_s,
                    "plain_reader_rows_per_s": timed_rate(
                        lambda: source_bench.plain_reader(server, password), rows, "plain"
                    ),
                    "mariadb_binlog_rows_per_s": timed_rate(
                        lambda: source_bench.mariadb_binlog(server, password), rows, "tool"
                    ),
                    "source_rows_per_s": timed_rate(
                        lambda: source_bench.noop_write(spark, options, rows), rows, "source"
                    ),
                }
                out.append(figures)
                console.print(
                    f"catch-up round {number}: "
                    + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items() if v and v > 10)
                )
        finally:
            spark.stop()
    finally:
        server.stop()
    return out


# -- end-to-end lag -------------------------------------------------------------------------------


class LagRig:
    """A one-shard development cluster, a durable Version Stream server and Spark."""

    def __init__(self, root: Path, build_dir: Path, trigger: float) -> None:
        self.root = root
        self.build_dir = build_dir
        self.trigger = trigger
        self.seq = 0
        self.stack = contextlib.ExitStack()
        try:
            self._start()
        except BaseException:
            self.stack.close()
            raise

    def _start(self) -> None:
        self.cluster = DevCluster(self.root / "cluster")
        self.stack.callback(self.cluster.down)
        self.cluster.up(SHARD)
        self.shard = self.cluster.server(SHARD)
        self.dbz_password = secrets.token_urlsafe(16)
        self.shard.create_account(
            "dbz", self.dbz_password, ["GRANT ALL PRIVILEGES ON *.* TO {user}"]
        )
        self.versionstream = MariaDBServer(
            base_dir=self.root / "versionstream", server_id=4242, extra_args=DURABLE
        )
        self.stack.callback(self.versionstream.stop)
        self.versionstream.start()
        vs_password = secrets.token_urlsafe(16)
        self.versionstream.create_account(
            "vs", vs_password, ["GRANT ALL PRIVILEGES ON *.* TO {user}"]
        )
        secret = self.cluster.secrets_dir / "bench-versionstream"
        secret.mkdir(parents=True)
        (secret / "username").write_text("vs")
        (secret / "password").write_text(vs_password)
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
            UPDATESTREAM, "devcluster", "traffic", "--dir", str(self.cluster.dir),
            "--rate", f"{rate:.0f}", "--duration", str(duration), "--ledger", str(ledger),
            "--seed", str(self.seq), "--max-tx-rows", "1",
        ]  # fmt: skip
        with (self.root / "traffic.log").open("ab") as log:
            subprocess.run(command, check=True, stdout=log, stderr=log, timeout=duration + 600)
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

    def job(self, rate: float, duration: float, warmup: float) -> dict[str, Any]:
        self.seq += 1
        name = f"peers-{self.seq}"  # a new stream each time: sinks keep batch ids per stream
        stream = spec.parse_update_stream(
            {
                "apiVersion": "updatestream.io/v1alpha1",
                "kind": "UpdateStream",
                "metadata": {"name": name},
                "spec": {
                    "keyspace": self.cluster.keyspace_name,
                    "keyRanges": [SHARD],
                    "start": {"mode": "gtid", "gtid": {SHARD: self.shard.gtid_position()}},
                    "sinks": [
                        {"type": "console", "path": str(self.root / f"{name}.jsonl")},
                        {
                            "type": "versionStream",
                            "mysql": {"host": "127.0.0.1", "port": self.versionstream.port},
                            "credentialsSecret": {"name": "bench-versionstream"},
                        },
                    ],
                },
            }
        )
        job = Job(
            JobConfig(
                stream=stream,
                keyspace=self.cluster.keyspace(),
                secrets_dir=self.cluster.secrets_dir,
                checkpoint=self.root / f"{name}-checkpoint",
                trigger_seconds=self.trigger,
                status_file=self.root / f"{name}-status.json",
            )
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
                label: summarize(*event_lags(ledger, sink.delivered_at())).as_dict()
                for label, sink in zip(SINK_LABELS, sinks, strict=True)
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
                f"{at['job'][-1]['sinks']['versionstream']['p99_s']}"
            )
    return runs


def lag_medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per system: the median over rounds of p50, p99 and max (the job: per sink), and the
    job's per-batch phases."""
    keys = ("p50_s", "p99_s", "max_s", "committed_rows_per_s")
    out: dict[str, Any] = {}
    for system in ("debezium_default", "debezium_poll10"):
        out[system] = medians([{k: r[k] for k in keys} for r in runs[system]])
    for label in SINK_LABELS:
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


def bench_lag_half_rate(path: Path = RESULTS / "lag.json") -> int | None:
    """The rate bench-lag used at 50% load (its first round's), when it has run."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return int(data["loads"]["50%"]["runs"][0]["requested_rows_per_s"])
    except (OSError, KeyError, IndexError, ValueError, TypeError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debezium-dir", type=Path, required=True,
                        help="the harness's build: debezium-peer.jar and lib/")  # fmt: skip
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the catch-up binlog")
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    parser.add_argument(
        "--rates", default=None, help="rows/s, comma-separated (default: 600, bench-lag's 50%%)"
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of traffic per run")
    parser.add_argument("--warmup-seconds", type=float, default=3.0)
    parser.add_argument("--trigger-seconds", type=float, default=0.1)
    parser.add_argument("--skip-lag", action="store_true", help="catch-up only")
    args = parser.parse_args()
    half = bench_lag_half_rate()
    if args.rates:
        rates = [int(r) for r in args.rates.split(",")]
    else:
        rates = sorted({DEFAULT_RATE, *([half] if half else [])})
    load_before = say_load()
    with tempfile.TemporaryDirectory(prefix="peers-bench-") as tmp:
        root = Path(tmp)
        (root / "catch-up").mkdir()
        catch = catch_up_rounds(args.debezium_dir, root / "catch-up", args.rows, args.rounds)
        load_between = say_load()
        lag: dict[str, dict[str, list[dict[str, Any]]]] = {}
        if not args.skip_lag:
            (root / "lag").mkdir()
            rig = LagRig(root / "lag", args.debezium_dir, args.trigger_seconds)
            try:
                lag = lag_rounds(rig, rates, args.rounds, args.duration, args.warmup_seconds)
            finally:
                rig.close()
    load_after = say_load()
    report(args, rates, half, catch, lag, [load_before, load_between, load_after])


def report(
    args: argparse.Namespace,
    rates: list[int],
    half: int | None,
    catch: list[dict[str, float | None]],
    lag: dict[str, dict[str, list[dict[str, Any]]]],
    loads: list[list[float]],
) -> None:
    catch_median = medians(catch)
    print_table(
        f"Catch-up over a {args.rows:,}-row binlog, rows/s, median of {args.rounds} rounds",
        ["reader", "rows/s"],
        [[k.removesuffix("_rows_per_s"), v] for k, v in catch_median.items()
         if k.endswith("_rows_per_s")],
    )  # fmt: skip
    lag_median = {rate: lag_medians(runs) for rate, runs in lag.items()}
    rows = []
    for rate, figures in lag_median.items():
        for system in ("debezium_default", "debezium_poll10", "job_console", "job_versionstream"):
            f = figures[system]
            rows.append([rate, system, f["p50_s"], f["p99_s"], f["max_s"]])
    if rows:
        print_table(
            f"End-to-end lag (s), single-row commits, median of {args.rounds} rounds of "
            f"{args.duration:.0f}s; job trigger {args.trigger_seconds}s",
            ["rows/s", "system", "p50", "p99", "max"],
            rows,
        )
    source_ratio = ratio(catch_median["source_rows_per_s"],
                         catch_median["debezium_first_to_last_rows_per_s"])  # fmt: skip
    summary_rate = str(half) if half and str(half) in lag_median else None
    if summary_rate is None and lag_median:
        summary_rate = str(rates[-1])
    dbz_p99 = lag_median[summary_rate]["debezium_default"]["p99_s"] if summary_rate else None
    write_result(
        "peers",
        {
            "machine": machine(),
            "load_average_before": loads[0],
            "load_average_between": loads[1],
            "load_average_after": loads[2],
            "debezium": DEBEZIUM,
            "rows": args.rows,
            "rounds": args.rounds,
            "catch_up": {"rounds": catch, "median": catch_median},
            "lag": {
                "rates": rates,
                "bench_lag_50pct_rate": half,
                "seconds_per_run": args.duration,
                "trigger_seconds": args.trigger_seconds,
                "job_sink_order": list(SINK_LABELS),
                "runs": lag,
                "median": lag_median,
            },
            "source_vs_debezium_ratio": source_ratio,
            "debezium_lag_p99_s": dbz_p99,
            "debezium_lag_p99_rate": int(summary_rate) if summary_rate else None,
        },
    )
    summary: dict[str, Any] = {"source_vs_debezium_ratio": source_ratio}
    if dbz_p99 is not None:
        summary["debezium_lag_p99_s"] = dbz_p99
    merge_summary(summary)
    console.print(json.dumps(summary))


if __name__ == "__main__":
    main()
