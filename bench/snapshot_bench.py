"""The snapshot end to end and its reader beside Spark's own JDBC reader, on the same tables.

The bench brings up a two-shard development cluster (`-80,80-`), loads ``--rows`` rows into
`orders` (each row on the shard its keyspace id belongs to, loaded without binary logging), and
measures in interleaved rounds, each in a fresh process (Spark session start excluded):

- ``updatestream``: the reader alone, a stream with `start: snapshot` over `orders`,
  `availableNow`, into Spark's no-op sink: every chunk planned, read on the workers and handed
  to Spark as change events;
- ``jdbc``: Spark's JDBC reader with MariaDB Connector/J (Maven Central), each shard's table read
  in 2 partitions on `order_id` (`sessionVariables=sql_mode=ANSI_QUOTES`), into the no-op sink:
  the JVM path's ceiling, with no keyspace ids, no JSON and no consistency between partitions;
- ``mirror``: the snapshot end to end (`bench.snapshot_mirror`): the streaming job with
  `start: snapshot` and a mirror sink into a database of its own, the mirror then checked equal
  to the shards (count and checksum) and dropped;
- ``debezium`` (with ``--debezium-dir``, the bench-peers harness, at ``--rows`` only): Debezium's
  initial snapshot (`snapshot.mode=initial`, `snapshot.locking.mode=none`) of `orders`, one
  embedded engine per shard running at the same time, first to last snapshot record (JVM start
  excluded).

Then the same again after loading up to ``--big-rows`` rows in all (10M by default; 0 skips
it). For ours and the mirror, the steady rate after the first micro-batch (which carries the
Python workers' start) is reported apart from the rate from the query's start; the peak RSS of
the Python driver and workers is kept for both sizes (a chunk, not the table, sizes them).

Figures: medians, ratios side by side, the load average after each run; written to
``bench/results/snapshot.json`` and merged into ``bench/results/summary.json``
(`snapshot_rows_per_s` at ``--rows``; `snapshot_vs_jdbc_ratio`, `snapshot_to_mirror_rows_per_s`
and `snapshot_steady_rows_per_s` at the larger size). Run with ``make bench-snapshot``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.mariadb_server import MariaDBServer

from bench.report import load_average, machine, median, print_table, say_load, write_result
from bench.snapshot_mirror import (
    drop,
    reader_steady,
    run_mirror,
    start_mirror_server,
    verify,
)
from bench.summary import merge_summary
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema

JAR_VERSION = "3.5.8"
JAR_DIR = Path.home() / ".cache" / "updatestream" / "jars"
SHARDS = ("-80", "80-")


def connector_jar() -> Path:
    """MariaDB Connector/J from Maven Central, cached outside the repository."""
    jar = JAR_DIR / f"mariadb-java-client-{JAR_VERSION}.jar"
    if not jar.exists():
        JAR_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mvn", "-q", "-B", "dependency:copy",
             f"-Dartifact=org.mariadb.jdbc:mariadb-java-client:{JAR_VERSION}",
             f"-DoutputDirectory={JAR_DIR}"],
            check=True, cwd=tempfile.gettempdir(),
        )  # fmt: skip
    return jar


def load(cluster: DevCluster, first: int, rows: int) -> None:
    """Insert order ids first..first+rows-1, half per shard, each with a user id whose keyspace
    id lies in its shard; without binary logging (the load is not what is measured)."""
    vschema = VSchema.from_dict(cluster.keyspace().spec.vschema, keyspace="commerce")
    users: dict[str, list[int]] = {shard: [] for shard in SHARDS}
    for user in range(1, 20001):
        ksid = vschema.keyspace_id_for("orders", {"order_id": 1, "user_id": user})
        assert ksid is not None
        users["-80" if KeyRange.parse("-80").contains(ksid) else "80-"].append(user)
    half = rows // 2
    for index, shard in enumerate(SHARDS):
        low = first + index * half
        with cluster.connect(shard, "admin", "commerce") as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("CREATE TEMPORARY TABLE bench_users (n INT PRIMARY KEY, uid BIGINT)")
            cur.executemany(
                "INSERT INTO bench_users VALUES (%s, %s)", list(enumerate(users[shard]))
            )
            cur.execute(
                "INSERT INTO orders (order_id, user_id, sku, quantity, price, note, state, "
                "placed_at) SELECT s.seq, u.uid, CONCAT('sku-', s.seq % 97), s.seq % 7 + 1, "
                "(s.seq % 10000) / 100, IF(s.seq % 3 = 0, NULL, 'a short note'), 'paid', "
                f"NOW(6) FROM seq_{low}_to_{low + half - 1} s "
                f"JOIN bench_users u ON u.n = s.seq % {len(users[shard])}"
            )
            cur.execute("ANALYZE TABLE orders")
            cur.fetchall()
            conn.commit()


def _cause(stderr: str) -> str:
    """The lines of a failed child's stderr that name an error, not Spark's stack frames."""
    found = [
        line
        for line in stderr.splitlines()
        if ("Error" in line or "Exception" in line) and not line.lstrip().startswith("at ")
    ]
    return "\n".join(found[:12]) or stderr[-3000:]


def child(kind: str, directory: Path, rows: int, chunk_rows: int, *extra: str) -> dict[str, Any]:
    """Run one measurement in a fresh process; returns its figures."""
    command = [sys.executable, "-m", "bench.snapshot_bench", "--child", kind,
               "--directory", str(directory), "--rows", str(rows),
               "--chunk-rows", str(chunk_rows), *extra]  # fmt: skip
    for attempt in range(2):
        done = subprocess.run(command, capture_output=True, text=True, timeout=7200)
        # on a busy machine a Python worker may not start within Spark's fixed wait: once more
        if done.returncode == 0 or "failed to connect back" not in done.stderr or attempt:
            break
        print(f"{kind}: a Spark Python worker did not start in time; running it again")
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)  # whole: the cause is far above Spark's query dump
        raise RuntimeError(f"{kind} round failed: {_cause(done.stderr)}")
    figures = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    figures["attempts"] = attempt + 1
    return figures


def run_updatestream(cluster: DevCluster, rows: int, chunk_rows: int) -> dict[str, Any]:
    from updatestream_jobs.job import spark_session
    from updatestream_jobs.source.data_source import register

    from bench.rss import pyspark_worker_peak_rss_mb, vm_hwm_mb

    spark = spark_session("local[2]", "bench-snapshot")
    register(spark)
    options = {
        "keyspace": str(cluster.manifest_path), "secretsDir": str(cluster.secrets_dir),
        "start": "snapshot", "tables": "orders", "snapshotChunkRows": str(chunk_rows),
        "snapshotChunksPerBatch": "4",
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as checkpoint:
        frame = spark.readStream.format("updatestream").options(**options).load()
        began = time.monotonic()
        query = (
            frame.writeStream.format("noop").option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
        seconds = time.monotonic() - began
        delivered = sum(p["numInputRows"] for p in query.recentProgress)
        split = reader_steady(query.recentProgress)
    figures = {
        "seconds": seconds,
        "rows": delivered,
        **split,
        "driver_rss_mb": vm_hwm_mb(os.getpid()),
        "worker_rss_mb": pyspark_worker_peak_rss_mb(),
    }
    spark.stop()
    return figures


def run_jdbc(cluster: DevCluster, rows: int) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").appName("bench-snapshot-jdbc")
        .config("spark.jars", str(connector_jar())).config("spark.ui.enabled", "false")
        .getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    account = cluster.credentials("app")
    frames = []
    half = rows // 2
    for index, shard in enumerate(SHARDS):
        port = cluster.server(shard).port
        frames.append(
            spark.read.format("jdbc")
            .option("url", f"jdbc:mariadb://127.0.0.1:{port}/commerce?sessionVariables=sql_mode=ANSI_QUOTES")
            .option("driver", "org.mariadb.jdbc.Driver")
            .option("dbtable", "orders").option("user", account.username)
            .option("password", account.password).option("partitionColumn", "order_id")
            .option("lowerBound", 1 + index * half).option("upperBound", (index + 1) * half + 1)
            .option("numPartitions", 2).option("fetchsize", 10000).load()
        )  # fmt: skip
    union = frames[0].unionByName(frames[1])
    began = time.monotonic()
    union.write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - began
    spark.stop()
    return {"seconds": seconds, "rows": rows}


def run_debezium(cluster: DevCluster, build_dir: Path, rows: int, log: Path) -> dict[str, Any]:
    """Debezium's initial snapshot of `orders`, one engine per shard, side by side."""
    from bench.debezium_peer import debezium_properties, harness_command
    from bench.peertools import parse_lines

    admin = cluster.credentials("admin")
    processes = []
    with log.open("ab") as err:
        for index, shard in enumerate(SHARDS):
            port = int(cluster.server(shard).port or 0)
            props = debezium_properties(
                port, admin.username, admin.password, "commerce", 5600 + index, "initial"
            )
            props["table.include.list"] = "commerce.orders"
            command = harness_command(build_dir, props, rows // len(SHARDS))
            processes.append(
                subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=err, text=True)
            )  # fmt: skip
        outputs = [p.communicate(timeout=1800)[0] for p in processes]
    parsed = [parse_lines(text.splitlines()) for text in outputs]
    for out in parsed:
        if out.errors or out.done is None or out.main_at is None:
            raise RuntimeError(f"the Debezium harness did not finish: {out.errors[:1]}")
    first = min(float(o.done["first"]) for o in parsed if o.done)
    last = max(float(o.done["last"]) for o in parsed if o.done)
    started = min(float(o.main_at) for o in parsed if o.main_at)
    return {
        "seconds": last - first,
        "rows": sum(int(o.done["count"]) for o in parsed if o.done),
        "with_engine_start_s": last - started,
    }


def child_main(args: argparse.Namespace) -> None:
    cluster = DevCluster(args.directory)
    if args.child == "updatestream":
        figures = run_updatestream(cluster, args.rows, args.chunk_rows)
    elif args.child == "mirror":
        figures = run_mirror(cluster, args.mirror_port, args.database, args.chunk_rows)
    else:
        figures = run_jdbc(cluster, args.rows)
    print(json.dumps(figures))


def measure_size(
    cluster: DevCluster, mirror: MariaDBServer, rows: int, args: argparse.Namespace, tmp: Path
) -> dict[str, list[dict[str, Any]]]:
    """`args.rounds` rounds of each reader over `rows` rows of `orders`, side by side."""
    kinds = ["updatestream", "jdbc", "mirror"]
    if args.debezium_dir and rows == args.rows:
        kinds.append("debezium")
    rounds: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for number in range(args.rounds):
        for kind in kinds:
            if kind == "debezium":
                figures = run_debezium(cluster, args.debezium_dir, rows, tmp / "debezium.log")
            elif kind == "mirror":
                database = f"mirror_{rows}_{number}"
                extra = ("--mirror-port", str(mirror.port), "--database", database)
                figures = child(kind, cluster.dir, rows, args.chunk_rows, *extra)
                figures["verified"] = verify(cluster, mirror, database)
                drop(mirror, database)
                assert figures["verified"]["equal"], figures
            else:
                figures = child(kind, cluster.dir, rows, args.chunk_rows)
            assert figures["rows"] == rows, (kind, figures)
            figures["rows_per_s"] = rows / figures["seconds"]
            figures["load_average"] = load_average()
            rounds[kind].append(figures)
            rate, load_now = figures["rows_per_s"], figures["load_average"][0]
            print(f"{rows:,} rows, round {number + 1} {kind}: {rate:,.0f} rows/s (load {load_now})")
    return rounds


def size_figures(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians and side-by-side ratios of one size's rounds."""

    def rate(kind: str, key: str = "rows_per_s") -> float:
        return round(median(r[key] for r in rounds[kind]))

    def ratio(kind: str, other: str) -> float:
        pairs = zip(rounds[kind], rounds[other], strict=False)
        return round(median(a["rows_per_s"] / b["rows_per_s"] for a, b in pairs), 3)

    figures: dict[str, Any] = {
        "snapshot_rows_per_s": rate("updatestream"),
        "snapshot_steady_rows_per_s": rate("updatestream", "steady_rows_per_s"),
        "jdbc_rows_per_s": rate("jdbc"),
        "snapshot_vs_jdbc_ratio": ratio("updatestream", "jdbc"),
        "snapshot_to_mirror_rows_per_s": rate("mirror"),
        "snapshot_to_mirror_steady_rows_per_s": rate("mirror", "steady_rows_per_s"),
    }
    if "debezium" in rounds:
        figures["debezium_rows_per_s"] = rate("debezium")
        figures["snapshot_vs_debezium_ratio"] = ratio("updatestream", "debezium")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--big-rows", type=int, default=10_000_000, help="0: one size only")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--child", choices=("updatestream", "jdbc", "mirror"))
    parser.add_argument("--directory", type=Path)
    parser.add_argument("--mirror-port", type=int)
    parser.add_argument("--database")
    parser.add_argument("--debezium-dir", type=Path, help="the bench-peers harness build")
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    connector_jar()
    result: dict[str, Any] = {"machine": machine(), "load_before": say_load(),
                              "chunk_rows": args.chunk_rows, "sizes": {}}  # fmt: skip
    sizes = [args.rows] + ([args.big_rows] if args.big_rows > args.rows else [])
    with (
        tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp,
        DevCluster(Path(tmp) / "cluster").running(",".join(SHARDS)) as cluster,
    ):
        mirror = start_mirror_server(Path(tmp), cluster)
        try:
            loaded = 0
            for rows in sizes:
                began = time.monotonic()
                load(cluster, loaded + 1, rows - loaded)
                loaded = rows
                print(f"loaded {rows:,} rows in {time.monotonic() - began:.0f}s")
                rounds = measure_size(cluster, mirror, rows, args, Path(tmp))
                result["sizes"][str(rows)] = {"rounds": rounds, **size_figures(rounds)}
        finally:
            mirror.stop()
    result["load_after"] = say_load()
    report(result, sizes)


def report(result: dict[str, Any], sizes: list[int]) -> None:
    small, big = result["sizes"][str(sizes[0])], result["sizes"][str(sizes[-1])]
    result["rss"] = {
        "rows": sizes,
        "driver_rss_mb": [result["sizes"][str(n)]["rounds"]["updatestream"][-1]["driver_rss_mb"]
                          for n in sizes],
        "worker_rss_mb": [result["sizes"][str(n)]["rounds"]["updatestream"][-1]["worker_rss_mb"]
                          for n in sizes],
    }  # fmt: skip
    write_result("snapshot", result)
    summary = {
        "snapshot_rows_per_s": small["snapshot_rows_per_s"],
        "snapshot_vs_jdbc_ratio": big["snapshot_vs_jdbc_ratio"],
        "snapshot_to_mirror_rows_per_s": big["snapshot_to_mirror_rows_per_s"],
        "snapshot_steady_rows_per_s": big["snapshot_steady_rows_per_s"],
        "snapshot_rows_for_ratios": sizes[-1],
    }
    if "snapshot_vs_debezium_ratio" in small:
        summary["snapshot_vs_debezium_ratio"] = small["snapshot_vs_debezium_ratio"]
    merge_summary(summary)
    rows = []
    for size in sizes:
        figures = result["sizes"][str(size)]
        for kind, data in figures["rounds"].items():
            per_round = ", ".join(f"{r['rows_per_s']:,.0f}" for r in data)
            steady = [r.get("steady_rows_per_s") for r in data if r.get("steady_rows_per_s")]
            shown = f"{median(steady):,.0f}" if steady else "—"
            rows.append([f"{size:,}", kind, f"{median(r['rows_per_s'] for r in data):,.0f}",
                         shown, per_round])  # fmt: skip
        rows.append([f"{size:,}", "ours / JDBC", f"{figures['snapshot_vs_jdbc_ratio']:.2f}", "—",
                     ""])  # fmt: skip
    print_table(
        "snapshot of orders, 2 shards (rows/s; steady: after the first micro-batch)",
        ["rows", "reader", "rows/s (median)", "steady", "per round"],
        rows,
    )
    rss = result["rss"]
    print(f"peak RSS at {' / '.join(f'{n:,}' for n in sizes)} rows: driver "
          f"{rss['driver_rss_mb']} MB, workers {rss['worker_rss_mb']} MB")  # fmt: skip


if __name__ == "__main__":
    main()
