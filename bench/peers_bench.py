"""Our source and job side by side with Debezium, on a real MariaDB and on a real MySQL 8.

Debezium runs as its embedded engine in a small Java harness (`bench/peers/debezium`, built by
`make bench-peers` into the cache directory), with each flavor's own connector: Debezium's
MariaDB connector 3.5.0 on MariaDB, its MySQL connector 3.6.1 on MySQL, offsets and schema
history in memory. The harness prints when each row change reached it (see `bench.peertools`).
Everything below runs once per flavor (`--flavors`), MariaDB first.

1. Catch-up (rows/s from an existing binlog): one local MariaDB with a binlog of ``--rows``
   row inserts in 100-row transactions (`bench.source_bench.prepare`). Each round runs, in
   turn: Debezium (`snapshot.mode=never`: it reads the binlog from its start), the plain
   python-mysql-replication read, `mariadb-binlog` (MariaDB only), and our source through Spark
   into the
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
   console sink (a file, first), its Version Stream sink (a durable server, second) and
   memcached (third), whose fast lane's own times are logged (`fastLaneLog`). Each
   is warmed up with light traffic that it must deliver first. A change's lag is when the
   harness received it, or when the job's sink write returned (`bench.lagtools.TimedSink`),
   minus its commit time in the ledger. For the job, the per-batch cost is broken down by
   phase: Spark's `durationMs` parts and, per sink, the time to take the batch's rows and to
   write them.

Every figure is the median over ``--rounds`` rounds. Writes `bench/results/peers.json` (every
round, load averages before and after; MariaDB's at the top, MySQL's under `mysql`) and merges
`SUMMARY_LAGS` at the 50% rate (Debezium at its defaults and at `poll.interval.ms=10`, the fast
lane's invalidations, the Version Stream) and `source_vs_debezium_ratio` (our source through
Spark / Debezium first to last), and the same with `_mysql`, into `bench/results/summary.json`.
Run with ``make bench-peers``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.local_server import ServerFlavor
from updatestream_jobs.job import spark_session

from bench import source_bench
from bench.debezium_peer import DEBEZIUM, debezium_catch_up
from bench.peers_lag import SINK_LABELS, LagRig, lag_medians, lag_rounds
from bench.peertools import medians, ratio
from bench.report import RESULTS, console, machine, print_table, say_load, write_result
from bench.summary import merge_summary

DEFAULT_RATE = 600
# lag figures of the summary rate merged into summary.json (MySQL's with `_mysql`)
SUMMARY_LAGS = (
    "debezium_lag_p99_s",
    "debezium_fast_lag_p99_s",
    "invalidation_lag_p50_s",
    "invalidation_lag_p99_s",
    "versionstream_lag_p50_s",
    "versionstream_lag_p99_s",
)


# -- catch-up -------------------------------------------------------------------------------------


def timed_rate(count: Callable[[], int], expected: int, label: str) -> float:
    began = time.perf_counter()
    rows = count()
    elapsed = time.perf_counter() - began
    if rows != expected:
        raise SystemExit(f"{label}: counted {rows} rows, expected {expected}")
    return rows / elapsed


def catch_up_rounds(
    build_dir: Path, root: Path, rows: int, rounds: int, flavor: ServerFlavor = "mariadb"
) -> list[dict[str, float | None]]:
    server, options, start, _end = source_bench.prepare(root, rows, flavor)
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
                                        root / "debezium.log", start)  # fmt: skip
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
                    )
                    if flavor == "mariadb"
                    else None,
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


def bench_lag_half_rate(path: Path = RESULTS / "lag.json") -> int | None:
    """The rate bench-lag used at 50% load (its first round's), when it has run."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return int(data["loads"]["50%"]["runs"][0]["requested_rows_per_s"])
    except (OSError, KeyError, IndexError, ValueError, TypeError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--debezium-dir",
        type=Path,
        required=True,
        help="the MariaDB connector's harness build: debezium-peer.jar, lib/",
    )
    parser.add_argument(
        "--debezium-mysql-dir", type=Path, default=None, help="the MySQL connector's harness build"
    )
    parser.add_argument(
        "--flavors",
        default="mariadb,mysql",
        help="the servers to run on, in turn (mysql needs --debezium-mysql-dir)",
    )
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
    builds = {"mariadb": args.debezium_dir, "mysql": args.debezium_mysql_dir}
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="peers-bench-") as tmp:
        for flavor in args.flavors.split(","):
            if builds.get(flavor) is None:
                raise SystemExit(f"--flavors {flavor}: give --debezium-{flavor}-dir")
            console.print(f"[bold]{flavor}[/]: Debezium {DEBEZIUM[flavor]}")
            runs[flavor] = run_flavor(args, flavor, builds[flavor], rates, Path(tmp) / flavor)
    report(args, rates, half, runs)


def run_flavor(
    args: argparse.Namespace, flavor: Any, build_dir: Path, rates: list[int], root: Path
) -> dict[str, Any]:
    """Catch-up and lag rounds on servers of `flavor`, with the load averages around them."""
    loads = [say_load()]
    (root / "catch-up").mkdir(parents=True)
    catch = catch_up_rounds(build_dir, root / "catch-up", args.rows, args.rounds, flavor)
    loads.append(say_load())
    lag: dict[str, dict[str, list[dict[str, Any]]]] = {}
    if not args.skip_lag:
        (root / "lag").mkdir()
        rig = LagRig(root / "lag", build_dir, args.trigger_seconds, flavor)
        try:
            lag = lag_rounds(rig, rates, args.rounds, args.duration, args.warmup_seconds)
        finally:
            rig.close()
    loads.append(say_load())
    return {"catch": catch, "lag": lag, "loads": loads}


def print_tables(
    args: argparse.Namespace,
    flavor: str,
    catch_median: dict[str, float | None],
    lag_median: dict[str, dict[str, Any]],
) -> None:
    print_table(
        f"{flavor}: catch-up over a {args.rows:,}-row binlog, rows/s, median of {args.rounds} "
        "rounds",
        ["reader", "rows/s"],
        [[k.removesuffix("_rows_per_s"), v] for k, v in catch_median.items()
         if k.endswith("_rows_per_s") and v is not None],
    )  # fmt: skip
    rows = []
    for rate, figures in lag_median.items():
        for system in ("debezium_default", "debezium_poll10", "job_console", "job_versionstream",
                       "job_memcached", "job_fastlane", "job_tailed"):  # fmt: skip
            f = figures.get(system)
            if f is None:  # a system a run from before it was measured does not hold
                continue
            rows.append([rate, system, f["p50_s"], f["p99_s"], f["max_s"]])
    if rows:
        print_table(
            f"{flavor}: end-to-end lag (s), single-row commits, median of {args.rounds} rounds "
            f"of {args.duration:.0f}s; job trigger {args.trigger_seconds}s",
            ["rows/s", "system", "p50", "p99", "max"],
            rows,
        )


def section(
    args: argparse.Namespace, rates: list[int], half: int | None, flavor: str, run: dict[str, Any]
) -> dict[str, Any]:
    """One flavor's part of peers.json (and its two summary figures)."""
    catch, lag, loads = run["catch"], run["lag"], run["loads"]
    catch_median = medians(catch)
    lag_median = {rate: lag_medians(runs) for rate, runs in lag.items()}
    print_tables(args, flavor, catch_median, lag_median)
    source_ratio = ratio(catch_median["source_rows_per_s"],
                         catch_median["debezium_first_to_last_rows_per_s"])  # fmt: skip
    summary_rate = str(half) if half and str(half) in lag_median else None
    if summary_rate is None and lag_median:
        summary_rate = str(rates[-1])
    at = lag_median[summary_rate] if summary_rate else {}
    figures = {
        "debezium_lag_p99_s": at.get("debezium_default", {}).get("p99_s"),
        "debezium_fast_lag_p99_s": at.get("debezium_poll10", {}).get("p99_s"),
        "invalidation_lag_p50_s": at.get("job_fastlane", {}).get("p50_s"),
        "invalidation_lag_p99_s": at.get("job_fastlane", {}).get("p99_s"),
        "versionstream_lag_p50_s": at.get("job_versionstream", {}).get("p50_s"),
        "versionstream_lag_p99_s": at.get("job_versionstream", {}).get("p99_s"),
    }
    return {
        "load_average_before": loads[0],
        "load_average_between": loads[1],
        "load_average_after": loads[2],
        "debezium": DEBEZIUM[flavor],
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
        **figures,
        "debezium_lag_p99_rate": int(summary_rate) if summary_rate else None,
    }


def report(
    args: argparse.Namespace,
    rates: list[int],
    half: int | None,
    runs: dict[str, dict[str, Any]],
) -> None:
    sections = {flavor: section(args, rates, half, flavor, run) for flavor, run in runs.items()}
    first = sections.get("mariadb") or next(iter(sections.values()))
    result = {"machine": machine(), "rows": args.rows, "rounds": args.rounds, **first}
    if "mysql" in sections and first is not sections["mysql"]:
        result["mysql"] = sections["mysql"]
    write_result("peers", result)
    summary: dict[str, Any] = {}
    for flavor, part in sections.items():
        suffix = "_mysql" if flavor == "mysql" else ""
        summary[f"source_vs_debezium_ratio{suffix}"] = part["source_vs_debezium_ratio"]
        for key in SUMMARY_LAGS:
            if part[key] is not None:
                summary[f"{key}{suffix}"] = part[key]
        if part["debezium_fast_lag_p99_s"] is not None:  # the fast lane's goal: at most twice
            summary[f"debezium_fast_lag_p99_x2{suffix}"] = round(
                2 * part["debezium_fast_lag_p99_s"], 3
            )
    merge_summary(summary)
    console.print(json.dumps(summary))


if __name__ == "__main__":
    main()
