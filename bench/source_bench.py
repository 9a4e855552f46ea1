"""Throughput of the binlog source against a plain python-mysql-replication read and
`mariadb-binlog`, side by side on one binlog.

The bench starts one local MariaDB (and stops it), writes a single-shard binlog of ``--rows``
small rows (100-row transactions), then measures rows per second for:

- ``source``: the `updatestream` data source in Spark local mode, a bounded read of the whole
  range into Spark's no-op sink (one partition: one shard), Spark session start excluded;
- ``source_layer``: the same read path without Spark (the source's `read` as Arrow batches);
- ``plain_reader``: python-mysql-replication iterating the same binlog and its rows;
- ``mariadb_binlog``: `mariadb-binlog --read-from-remote-server -v`, counting row images.

The source splits a shard's range at about every ``maxPartitionBytes`` (1 MiB) of binlog, so
Spark (``local[2]``) decodes pieces of it in parallel; the plain read is one thread. Last, it
reads one 100k-row transaction through Spark and reports the Python worker's peak RSS.

Each figure is the median of ``--rounds`` runs. Figures are printed, written with the load
average to ``bench/results/source.json`` and merged into ``bench/results/summary.json`` (other
keys are kept). Run it with ``make bench-source`` or
``python -m bench.source_bench [--rows N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent
from updatestream_cli import manifests
from updatestream_cli.devcluster.local_server import LocalServer, ServerFlavor
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.mysql_server import MySQLServer
from updatestream_cli.devcluster.sample_schema import READER_GRANTS
from updatestream_jobs.job import spark_session
from updatestream_jobs.source.arrow_rows import record_batches
from updatestream_jobs.source.binlog_ranges import ShardRange, read_shard_rows
from updatestream_jobs.source.options import parse_options

from bench.report import machine, say_load, write_result
from bench.rss import pyspark_worker_peak_rss_mb
from bench.summary import merge_summary
from harness import accounts
from updatestream.core.gtid import parse_position
from updatestream.core.token import EventToken

TX_ROWS = 100

READER_SECRET = "bench-reader"


def prepare(
    root: Path, rows: int, flavor: ServerFlavor = "mariadb"
) -> tuple[LocalServer, dict[str, str], str, str]:
    """Start a server of `flavor` and write the binlog; returns (server, source options, start,
    end)."""
    kind = MySQLServer if flavor == "mysql" else MariaDBServer
    server: LocalServer = kind(base_dir=root / "shard", server_id=1)
    server.start()
    try:
        password = secrets.token_urlsafe(16)
        start, end = fill_shard(server, password, 0, rows)
        options = bounded_options(
            bench_keyspace({"-": server.port}, flavor),
            write_secret(root, password),
            {"-": start},
            {"-": end},
        )
    except BaseException:
        server.stop()
        raise
    return server, options, start, end


def fill_shard(server: LocalServer, password: str, first_id: int, rows: int) -> tuple[str, str]:
    """The reader user, database `bench` and table `items` on `server`, then `rows` rows (ids
    from `first_id + 1`) in transactions of 100; returns the GTID positions before and after."""
    server.create_account("bench", password, [READER_GRANTS[server.flavor]])
    with server.root_connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute(
            "CREATE TABLE bench.items (id BIGINT PRIMARY KEY, qty INT NOT NULL, "
            "sku VARCHAR(16) NOT NULL)"
        )
        start = server.gtid_position()
        for first in range(first_id, first_id + rows, TX_ROWS):
            cur.execute(_insert_sql(server.flavor, first + 1, first + TX_ROWS))
            conn.commit()
        end = server.gtid_position()
    return start, end


def _insert_sql(flavor: str, low: int, high: int) -> str:
    """One INSERT of the ids `low..high` (MariaDB's sequence engine; MySQL has none)."""
    values = "SELECT seq, seq % 100, CONCAT('sku-', seq % 997)"
    if flavor == "mariadb":
        return f"INSERT INTO bench.items {values} FROM bench.seq_{low}_to_{high}"
    return (
        f"INSERT INTO bench.items WITH RECURSIVE ids (seq) AS (SELECT {low} UNION ALL "
        f"SELECT seq + 1 FROM ids WHERE seq < {high}) {values} FROM ids"
    )


def write_secret(root: Path, password: str) -> Path:
    """The reader's Secret as files under `root/secrets`; returns that directory."""
    accounts.write_secret(root / "secrets", READER_SECRET, "bench", password)
    return root / "secrets"


def bench_keyspace(ports: dict[str, int], flavor: str = "mariadb") -> dict[str, Any]:
    """Keyspace `bench`: the given shards (name -> port on 127.0.0.1, of `flavor`), `items`
    hashed on id."""
    shards = [
        manifests.shard(name, "127.0.0.1", port, READER_SECRET, flavor)
        for name, port in ports.items()
    ]
    vschema = {
        "sharded": True,
        "vindexes": {"hash": {"type": "hash"}},
        "tables": {"items": {"column_vindexes": [{"column": "id", "name": "hash"}]}},
    }
    return manifests.keyspace(shards, vschema, name="bench")


def bounded_options(
    keyspace: dict[str, Any], secrets_dir: Path, start: dict[str, str], end: dict[str, str]
) -> dict[str, str]:
    """Source options for a bounded read of every shard from `start` to `end`."""
    return {
        "keyspace": json.dumps(keyspace),
        "secretsDir": str(secrets_dir),
        "start": json.dumps(start),
        "end": json.dumps(end),
    }


def timed(count: Callable[[], int], expected: int, rounds: int, label: str) -> float:
    rates = []
    for _ in range(rounds):
        began = time.perf_counter()
        rows = count()
        elapsed = time.perf_counter() - began
        if rows != expected:
            raise SystemExit(f"{label}: counted {rows} rows, expected {expected}")
        rates.append(rows / elapsed)
        print(f"  {label}: {rows} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s")
    return statistics.median(rates)


def plain_reader(server: LocalServer, password: str) -> int:
    """python-mysql-replication over the whole binlog (file-positioned: its MariaDB GTID
    request is malformed and gets reset, see the source's session module)."""
    first = server.binlog_files()[0][0]
    stream = BinLogStreamReader(
        connection_settings={
            "host": "127.0.0.1",
            "port": server.port,
            "user": "bench",
            "password": password,
        },
        server_id=4_000_000_001,
        log_file=first,
        log_pos=4,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent],
        only_schemas=["bench"],
        enable_logging=False,
    )
    rows = 0
    try:
        for event in stream:
            rows += len(event.rows)
    finally:
        stream.close()
    return rows


def mariadb_binlog(server: LocalServer, password: str) -> int:
    files = [name for name, _ in server.binlog_files()]
    command = [
        "mariadb-binlog", "--read-from-remote-server", "--host=127.0.0.1",
        f"--port={server.port}", "--user=bench", "-v", *files,
    ]  # fmt: skip
    env = {**os.environ, "MYSQL_PWD": password}
    out = subprocess.run(command, check=True, capture_output=True, env=env).stdout
    return out.count(b"### INSERT INTO `bench`.`items`")


def source_layer(options: dict[str, str], start: str, end: str) -> int:
    config = parse_options(options)
    part = ShardRange(
        "-",
        EventToken(0, "-", parse_position(start)).dumps(),
        EventToken(0, "-", parse_position(end)).dumps(),
        False,
    )
    return sum(b.num_rows for b in record_batches(read_shard_rows(config, part), 2048))


def spark_count(spark: Any, options: dict[str, str]) -> int:
    frame = spark.read.format("updatestream").options(**options).load()
    return int(frame.where("op = 'insert'").count())


def noop_write(spark: Any, options: dict[str, str], rows: int) -> int:
    """The source into Spark's no-op sink (every row converted, nothing kept)."""
    frame = spark.read.format("updatestream").options(**options).load()
    frame.write.format("noop").mode("overwrite").save()
    return rows  # the warm-up counted them


def commit_large_transaction(server: LocalServer) -> tuple[str, str]:
    """One 100k-row transaction into a new table `bench.big`; the GTID positions around it."""
    with server.root_connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE bench.big (id BIGINT PRIMARY KEY, note VARCHAR(120))")
        cur.execute("SELECT @@gtid_binlog_pos")
        start = str(cur.fetchone()[0])
        cur.execute("INSERT INTO bench.big SELECT seq, REPEAT('x', 100) FROM bench.seq_1_to_100000")
        cur.execute("SELECT @@gtid_binlog_pos")
        end = str(cur.fetchone()[0])
    return start, end


def with_big_table(keyspace_json: str) -> str:
    """The Keyspace JSON with `big` in its VSchema (hash on `id`)."""
    keyspace = json.loads(keyspace_json)
    keyspace["spec"]["vschema"]["tables"]["big"] = {
        "column_vindexes": [{"column": "id", "name": "hash"}]
    }
    return json.dumps(keyspace)


def large_transaction(server: LocalServer, spark: Any, options: dict[str, str]) -> float:
    """Peak RSS of the Spark Python worker reading one 100k-row transaction (polled)."""
    start, end = commit_large_transaction(server)
    big = {
        **options,
        "keyspace": with_big_table(options["keyspace"]),
        "start": json.dumps({"-": start}),
        "end": json.dumps({"-": end}),
    }
    before = pyspark_worker_peak_rss_mb()
    peak = [before]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], pyspark_worker_peak_rss_mb())
            time.sleep(0.05)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        frame = spark.read.format("updatestream").options(**big).load()
        frame.write.format("noop").mode("overwrite").save()
    finally:
        done.set()
        thread.join()
    print(f"  100k-row transaction: worker peak RSS {peak[0]:.0f} MB (before: {before:.0f} MB)")
    return peak[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the binlog")
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    args = parser.parse_args()
    load = say_load()
    with tempfile.TemporaryDirectory(prefix="source-bench-") as tmp:
        server, options, start, end = prepare(Path(tmp), args.rows)
        password = (Path(tmp) / "secrets" / READER_SECRET / "password").read_text()
        try:
            print(f"binlog: {args.rows} rows in {args.rows // TX_ROWS} transactions")
            plain = timed(lambda: plain_reader(server, password), args.rows, args.rounds, "plain")
            tool = timed(lambda: mariadb_binlog(server, password), args.rows, args.rounds, "tool")
            layer = timed(lambda: source_layer(options, start, end), args.rows, args.rounds,
                          "source layer")  # fmt: skip
            spark = spark_session("local[2]", "source-bench")
            try:
                counted = spark_count(spark, options)  # warm up; checks the row count
                if counted != args.rows:
                    raise SystemExit(f"source (Spark): counted {counted}, expected {args.rows}")
                source = timed(lambda: noop_write(spark, options, args.rows), args.rows,
                               args.rounds, "source (Spark)")  # fmt: skip
                rss = large_transaction(server, spark, options)
            finally:
                spark.stop()
        finally:
            server.stop()
    figures = {
        "source_rows_per_s": round(source),
        "source_layer_rows_per_s": round(layer),
        "plain_reader_rows_per_s": round(plain),
        "mariadb_binlog_rows_per_s": round(tool),
        "source_vs_plain_ratio": round(source / plain, 2),
        "source_large_tx_worker_peak_rss_mb": round(rss),
    }
    print(json.dumps(figures, indent=2))
    write_result("source", {"machine": machine(), "load_average": load, "rows": args.rows,
                            "rounds": args.rounds, **figures})  # fmt: skip
    merge_summary(figures)


if __name__ == "__main__":
    main()
