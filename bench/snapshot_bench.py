"""The snapshot's rows/s beside Spark's own JDBC reader, on the same tables in one run.

The bench brings up a two-shard development cluster (`-80,80-`), loads ``--rows`` rows into
`orders` (each row on the shard its keyspace id belongs to, loaded without binary logging), and
measures in interleaved rounds, each in a fresh process (Spark session start excluded):

- ``updatestream``: a stream with `start: snapshot` over `orders`, `availableNow`, into Spark's
  no-op sink: every chunk planned, read on the workers and handed to Spark as change events;
- ``jdbc``: Spark's JDBC reader with MariaDB Connector/J (Maven Central), each shard's table read
  in 2 partitions on `order_id` (`sessionVariables=sql_mode=ANSI_QUOTES`), into the no-op sink:
  the JVM path's ceiling, with no keyspace ids, no JSON and no consistency between partitions;
- ``debezium`` (with ``--debezium-dir``, the bench-peers harness): Debezium's initial snapshot
  (`snapshot.mode=initial`, `snapshot.locking.mode=none`) of `orders`, one embedded engine per
  shard running at the same time, first to last snapshot record (JVM start excluded).

Then, for the memory bound, one more snapshot after loading ``--rss-rows`` rows in all, with the
peak RSS of the Python driver and of the Python workers for both sizes: a chunk, not the table,
sizes them.

Figures: medians, ratios side by side, the load average; written to
``bench/results/snapshot.json`` and merged into ``bench/results/summary.json``
(`snapshot_rows_per_s`, `snapshot_vs_jdbc_ratio`). Run with ``make bench-snapshot``.
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

from bench.report import machine, median, print_table, say_load, write_result
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


def child(kind: str, directory: Path, rows: int, chunk_rows: int) -> dict[str, Any]:
    """Run one measurement in a fresh process; returns its figures."""
    command = [sys.executable, "-m", "bench.snapshot_bench", "--child", kind,
               "--directory", str(directory), "--rows", str(rows),
               "--chunk-rows", str(chunk_rows)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} round failed: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


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
    figures = {
        "seconds": seconds,
        "rows": delivered,
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
    else:
        figures = run_jdbc(cluster, args.rows)
    print(json.dumps(figures))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rss-rows", type=int, default=3_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--child", choices=("updatestream", "jdbc"))
    parser.add_argument("--directory", type=Path)
    parser.add_argument("--debezium-dir", type=Path, help="the bench-peers harness build")
    return parser.parse_args()


Rounds = dict[str, list[dict[str, Any]]]  # reader -> one figure set per round


def measure(args: argparse.Namespace) -> tuple[Rounds, dict[str, Any], dict[str, Any]]:
    """The readers' rounds over `--rows`, then our snapshot's figures at `--rows` (its last
    round) and at `--rss-rows`."""
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp:
        directory = Path(tmp) / "cluster"
        with DevCluster(directory).running(",".join(SHARDS)) as cluster:
            load(cluster, 1, args.rows)
            kinds = ["updatestream", "jdbc"] + (["debezium"] if args.debezium_dir else [])
            rounds: Rounds = {kind: [] for kind in kinds}
            for number in range(args.rounds):
                for kind in kinds:
                    if kind == "debezium":
                        log = Path(tmp) / "debezium.log"
                        figures = run_debezium(cluster, args.debezium_dir, args.rows, log)
                    else:
                        figures = child(kind, directory, args.rows, args.chunk_rows)
                    assert figures["rows"] == args.rows, (kind, figures)
                    figures["rows_per_s"] = args.rows / figures["seconds"]
                    rounds[kind].append(figures)
                    print(f"round {number + 1} {kind}: {figures['rows_per_s']:,.0f} rows/s")
            small = rounds["updatestream"][-1]
            load(cluster, args.rows + 1, args.rss_rows - args.rows)
            big = child("updatestream", directory, args.rss_rows, args.chunk_rows)
            assert big["rows"] == args.rss_rows, big
    return rounds, small, big


def rates(rounds: Rounds, kind: str) -> list[float]:
    return [r["rows_per_s"] for r in rounds.get(kind, [])]


def ratios(rounds: Rounds, kind: str) -> list[float]:
    """Our snapshot over `kind`, round by round (the readers ran side by side in each)."""
    ours = rates(rounds, "updatestream")
    return [mine / theirs for mine, theirs in zip(ours, rates(rounds, kind), strict=False)]


def figures_of(
    args: argparse.Namespace, rounds: Rounds, small: dict[str, Any], big: dict[str, Any]
) -> dict[str, Any]:
    debezium = median(rates(rounds, "debezium")) if "debezium" in rounds else None
    versus = ratios(rounds, "debezium")
    return {
        "rows": args.rows, "chunk_rows": args.chunk_rows, "rounds": rounds,
        "snapshot_rows_per_s": round(median(rates(rounds, "updatestream"))),
        "jdbc_rows_per_s": round(median(rates(rounds, "jdbc"))),
        "snapshot_vs_jdbc_ratio": round(median(ratios(rounds, "jdbc")), 3),
        "debezium_rows_per_s": None if debezium is None else round(debezium),
        "snapshot_vs_debezium_ratio": round(median(versus), 3) if versus else None,
        "rss": {
            "rows": [args.rows, args.rss_rows],
            "driver_rss_mb": [small["driver_rss_mb"], big["driver_rss_mb"]],
            "worker_rss_mb": [small["worker_rss_mb"], big["worker_rss_mb"]],
        },
    }  # fmt: skip


def print_result(args: argparse.Namespace, result: dict[str, Any]) -> None:
    rounds = result["rounds"]

    def row(label: str, value: str, values: list[float], form: str) -> list[str]:
        return [label, value, ", ".join(format(v, form) for v in values)]

    table = [
        row("updatestream snapshot", f"{result['snapshot_rows_per_s']:,}",
            rates(rounds, "updatestream"), ",.0f"),
        row("Spark JDBC reader", f"{result['jdbc_rows_per_s']:,}", rates(rounds, "jdbc"), ",.0f"),
        row("ratio", f"{result['snapshot_vs_jdbc_ratio']:.2f}", ratios(rounds, "jdbc"), ".2f"),
    ]  # fmt: skip
    if result["debezium_rows_per_s"] is not None:
        table += [
            row("Debezium initial snapshot", f"{result['debezium_rows_per_s']:,}",
                rates(rounds, "debezium"), ",.0f"),
            row("ratio to Debezium", f"{result['snapshot_vs_debezium_ratio']:.2f}",
                ratios(rounds, "debezium"), ".2f"),
        ]  # fmt: skip
    print_table("snapshot of orders, 2 shards", ["reader", "rows/s (median)", "per round"], table)
    rss = result["rss"]
    print(f"peak RSS at {args.rows:,} / {args.rss_rows:,} rows: driver {rss['driver_rss_mb']} MB, "
          f"workers {rss['worker_rss_mb']} MB")  # fmt: skip


def main() -> None:
    args = parse_args()
    if args.child:
        child_main(args)
        return
    connector_jar()
    before = say_load()
    rounds, small, big = measure(args)
    after = say_load()
    result = {"machine": machine(), "load_before": before, "load_after": after,
              **figures_of(args, rounds, small, big)}  # fmt: skip
    write_result("snapshot", result)
    summary = {key: result[key] for key in
               ("snapshot_rows_per_s", "snapshot_vs_jdbc_ratio", "snapshot_vs_debezium_ratio")
               if result[key] is not None}  # fmt: skip
    merge_summary(summary)
    print_result(args, result)


if __name__ == "__main__":
    main()
