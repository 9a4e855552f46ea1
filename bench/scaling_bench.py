"""Source throughput with 1, 2 and 4 shards: the same total rows, prepared binlogs.

For each shard count the bench starts that many local MariaDB servers (one per shard of
`-`, `-80,80-` or `-40,40-80,80-c0,c0-`), writes ``--rows / N`` small rows into each
(transactions of 100, the `make bench-source` table), then reads every shard's whole range
with the project's source in Spark local mode (`local[2]`: this machine's two cores) into
Spark's no-op sink, ``--rounds`` times after a warm-up read that checks the row count. Rows are
not routed by their vindex: the read cost does not depend on which shard holds a row.

Per shard count it reports the median rows/s in total and per shard, and the CPU time per 100k
rows, read from /proc around each read: Spark (the driver's Python, the JVM and the Python
workers, children included) and the `mariadbd` servers (binlog dump). The CPU time is the
per-shard cost that a cluster pays once per shard; the wall-clock rate here is bounded by the
two cores that every shard shares.

Writes `bench/results/scaling.json`, prints a table and merges `scaling_rows_per_s_<N>_shards`
and `scaling_spark_cpu_s_per_100k_rows` (the median over shard counts) into
`bench/results/summary.json`. Run with ``make bench-scaling`` or
``python -m bench.scaling_bench [--rows N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_jobs.job import spark_session

from bench.report import console, machine, median, print_table, say_load, write_result
from bench.rss import cpu_seconds, spark_processes
from bench.source_bench import (
    bench_keyspace,
    bounded_options,
    fill_shard,
    noop_write,
    spark_count,
    write_secret,
)
from bench.summary import merge_summary

LAYOUTS = {
    1: ["-"],
    2: ["-80", "80-"],
    4: ["-40", "40-80", "80-c0", "c0-"],
}


def spark_tree() -> list[psutil.Process]:
    groups = spark_processes(psutil.Process())
    return [p for group in groups.values() for p in group]


def measure(spark: Any, root: Path, shards: list[str], rows: int, rounds: int) -> dict[str, Any]:
    per_shard = rows // len(shards)
    password = secrets.token_urlsafe(16)
    with contextlib.ExitStack() as stack:
        servers: dict[str, MariaDBServer] = {}
        starts, ends = {}, {}
        for number, shard in enumerate(shards, start=1):
            server = MariaDBServer(base_dir=root / f"shard-{number}", server_id=number)
            stack.callback(server.stop)
            server.start()
            servers[shard] = server
            starts[shard], ends[shard] = fill_shard(
                server, password, (number - 1) * per_shard, per_shard
            )
        options = bounded_options(
            bench_keyspace({name: s.port for name, s in servers.items() if s.port}),
            write_secret(root, password),
            starts,
            ends,
        )
        total = per_shard * len(shards)
        counted = spark_count(spark, options)  # warm-up, and checks the row count
        if counted != total:
            raise SystemExit(f"{len(shards)} shards: counted {counted} rows, expected {total}")
        databases = [psutil.Process(s.pid) for s in servers.values() if s.pid]
        runs = []
        for _ in range(rounds):
            spark_before, db_before = cpu_seconds(spark_tree()), cpu_seconds(databases)
            began = time.perf_counter()
            noop_write(spark, options, total)
            elapsed = time.perf_counter() - began
            spark_cpu = cpu_seconds(spark_tree()) - spark_before
            db_cpu = cpu_seconds(databases) - db_before
            runs.append(
                {
                    "rows_per_s": total / elapsed,
                    "spark_cpu_s_per_100k": spark_cpu / total * 100_000,
                    "mariadbd_cpu_s_per_100k": db_cpu / total * 100_000,
                }
            )
            console.print(
                f"  {len(shards)} shard(s): {total} rows in {elapsed:.2f}s = "
                f"{total / elapsed:,.0f} rows/s; CPU Spark {spark_cpu:.1f}s, mariadbd "
                f"{db_cpu:.1f}s"
            )
    rate = median(r["rows_per_s"] for r in runs)
    return {
        "shards": shards,
        "rows": total,
        "rows_per_s": round(rate),
        "rows_per_s_per_shard": round(rate / len(shards)),
        "spark_cpu_s_per_100k_rows": round(median(r["spark_cpu_s_per_100k"] for r in runs), 2),
        "mariadbd_cpu_s_per_100k_rows": round(
            median(r["mariadbd_cpu_s_per_100k"] for r in runs), 2
        ),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="total rows over the shards")
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    args = parser.parse_args()
    loads = [say_load()]
    results = {}
    spark = spark_session("local[2]", "scaling-bench")
    try:
        for count, shards in LAYOUTS.items():
            with tempfile.TemporaryDirectory(prefix="scaling-bench-") as tmp:
                results[count] = measure(spark, Path(tmp), shards, args.rows, args.rounds)
            loads.append(say_load())
    finally:
        spark.stop()
    print_table(
        f"Source throughput by shard count, {args.rows:,} rows, Spark local[2], "
        f"median of {args.rounds}",
        ["shards", "rows/s", "rows/s per shard", "Spark CPU s / 100k rows",
         "mariadbd CPU s / 100k rows"],
        [
            [count, r["rows_per_s"], r["rows_per_s_per_shard"],
             r["spark_cpu_s_per_100k_rows"], r["mariadbd_cpu_s_per_100k_rows"]]
            for count, r in results.items()
        ],
    )  # fmt: skip
    write_result(
        "scaling",
        {
            "machine": machine(),
            "load_averages": loads,
            "rows": args.rows,
            "rounds": args.rounds,
            "spark_master": "local[2]",
            "by_shards": {str(count): r for count, r in results.items()},
        },
    )
    figures: dict[str, Any] = {"machine": machine()}
    for count, r in results.items():
        figures[f"scaling_rows_per_s_{count}_shards"] = r["rows_per_s"]
    figures["scaling_spark_cpu_s_per_100k_rows"] = round(
        median(r["spark_cpu_s_per_100k_rows"] for r in results.values()), 2
    )
    merge_summary(figures)


if __name__ == "__main__":
    main()
