"""Mirror sink throughput: rows applied per second into one MariaDB it starts itself (and stops).

One MariaDB with durable commits (``innodb_flush_log_at_trx_commit=1``, ``sync_binlog=1``)
holds the source table (its columns only: the sink reads their types from there) and the
mirror database. A round applies ``--rows`` inserts of distinct rows, then ``--rows`` updates
of the same rows with newer tokens, through the mirror sink in batches of 1,000 and of 10,000
(a fresh mirror database each), and the same guarded upsert one statement per row, each its own
transaction (how a row-at-a-time consumer applies a change stream) for ``--naive`` inserts and
as many updates, all against the same server in the same run. Each figure is the median of
``--rounds`` rounds (default 3). Figures are printed, written with the load average to
``bench/results/mirror.json`` and merged into ``bench/results/summary.json`` as
``mirror_rows_per_s`` (batches of 10,000), ``mirror_rows_per_s_batch_1k``,
``mirror_naive_rows_per_s`` and ``mirror_vs_naive_ratio``. The same workload is then applied from
Spark's executors with 1 and 2 cores (`bench.mirror_executors`): ``mirror_executors_rows_per_s``
(2 cores), ``mirror_executors_1core_rows_per_s`` and ``mirror_executors_scaling`` (2 over 1).
Run it with ``make bench-mirror``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_jobs.sinks.mirror_sink import MirrorSink
from updatestream_jobs.sinks.sink import BatchContext

from bench import mirror_executors
from bench.report import machine, median, print_table, say_load, write_result
from bench.summary import merge_summary
from harness.accounts import account_with_secret
from harness.sink_events import ShardLog
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.mirror.changes import changes_of
from updatestream.mirror.mirror_tables import TOKEN_DDL
from updatestream.mirror.mirror_writer import PROVENANCE, TOKEN_COLUMNS, token_values
from updatestream.mirror.order import update_assignments

DURABLE = ("--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1")
SOURCE_DB = "bench_source"
USERS = (
    "CREATE TABLE IF NOT EXISTS bench_source.users (id BIGINT NOT NULL, name VARCHAR(100) "
    "NOT NULL, email VARCHAR(190) NULL, visits INT NOT NULL, PRIMARY KEY (id))"
)


def workload(rows: int, first_ts: int = 1_700_000_000) -> list[ChangeEvent]:
    """`rows` inserts, then `rows` updates of the same rows; 4 rows per transaction, 2 shards."""
    logs = [ShardLog("-80", 1), ShardLog("80-", 2)]
    events: list[ChangeEvent] = []
    for step, (op, offset) in enumerate((("insert", 0), ("update", 1))):
        for start in range(0, rows, 4):
            tx = []
            for uid in range(start, min(start + 4, rows)):
                row = {"id": uid, "name": f"user{uid}", "email": f"u{uid}@example.org"}
                before = {**row, "visits": 0}
                after = {**row, "visits": offset}
                tx.append((op, "users", before if step else None, after))
            log = logs[(start // 4) % 2]
            events += log.transaction(first_ts + step * 1000 + start // 5000, tx)
    return events


def keyspace(server: MariaDBServer) -> spec.Keyspace:
    shard = {"name": "-", "mysql": {"host": server.host, "port": server.port}}
    return spec.Keyspace.model_validate(
        {
            "metadata": {"name": "bench"},
            "spec": {
                "shards": [{**shard, "credentialsSecret": {"name": "bench"}}],
                "vschema": {"sharded": False},
                "servingShards": ["-"],
            },
        }
    )


def run_sink(server: MariaDBServer, secrets: Path, events: list[ChangeEvent], batch: int) -> float:
    """Rows applied per second through the sink, into a fresh mirror database."""
    database = f"mirror_{batch}_{time.monotonic_ns()}"
    config = mirror_executors.mirror_config(server, database, SOURCE_DB)
    sink = MirrorSink(config, secrets_dir=secrets, keyspace=keyspace(server))
    sink.open()
    taken = 0
    started = time.perf_counter()
    for i in range(0, len(events), batch):
        result = sink.write_batch(events[i : i + batch], BatchContext("b", "-", i))
        taken += result.written + result.skipped
    elapsed = time.perf_counter() - started
    sink.close()
    assert taken == len(events), (taken, len(events))
    return len(events) / elapsed


def run_naive(server: MariaDBServer, events: list[ChangeEvent]) -> float:
    """The same guarded upsert, one statement and one transaction per row."""
    database = f"naive_{time.monotonic_ns()}"
    conn = pymysql.connect(
        host=server.host, port=server.port, user="bench", password="bench-pw", autocommit=True
    )
    columns = ["id", "name", "email", "visits"]
    names = [*columns, *TOKEN_COLUMNS]
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"CREATE TABLE {database}.users LIKE {SOURCE_DB}.users")
        cur.execute(f"ALTER TABLE {database}.users " + ", ".join(f"ADD {c}" for c in TOKEN_DDL))
    sql = (
        f"INSERT INTO {database}.users ({', '.join(f'`{n}`' for n in names)}) VALUES "
        f"({', '.join(['%s'] * len(names))}) ON DUPLICATE KEY UPDATE "
        f"{update_assignments([*columns, *PROVENANCE])}"
    )
    started = time.perf_counter()
    with conn.cursor() as cur:
        for event in events:
            for change in changes_of(event):
                row = change.row or {}
                cur.execute(sql, [row.get(c) for c in columns] + list(token_values(change)))
    elapsed = time.perf_counter() - started
    conn.close()
    return len(events) / elapsed


def bench(rows: int, naive: int, rounds: int) -> dict[str, Any]:
    events = workload(rows)
    naive_events = workload(naive)
    rates: dict[str, list[float]] = {"1k": [], "10k": [], "naive": []}
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as tmp:
        server = MariaDBServer(base_dir=Path(tmp) / "mariadb", server_id=4343, extra_args=DURABLE)
        server.start()
        try:
            secrets = Path(tmp) / "secrets"
            account_with_secret(server, secrets, "bench", "bench", "bench-pw")
            server.query(f"CREATE DATABASE IF NOT EXISTS {SOURCE_DB}")
            server.query(USERS)
            for round_no in range(1, rounds + 1):
                for label, size in (("1k", 1000), ("10k", 10_000)):
                    rate = run_sink(server, secrets, events, size)
                    rates[label].append(rate)
                    print(f"round {round_no}: batches of {label}: {rate:,.0f} rows/s")
                rate = run_naive(server, naive_events)
                rates["naive"].append(rate)
                print(f"round {round_no}: one statement per row: {rate:,.0f} rows/s")
            tasks = mirror_executors.rates(
                server, secrets, keyspace(server), SOURCE_DB, events, rounds
            )
            rates.update({f"executors_{cores}": found for cores, found in tasks.items()})
        finally:
            server.stop()
    best = median(rates["10k"])
    naive_rate = median(rates["naive"])
    print_table(
        "mirror sink, rows applied per second (median)",
        ["writer", "rows/s"],
        [
            ("batches of 1,000", round(median(rates["1k"]))),
            ("batches of 10,000", round(best)),
            ("one statement per row", round(naive_rate)),
            ("from the executors, 1 core", round(median(rates["executors_1"]))),
            ("from the executors, 2 cores", round(median(rates["executors_2"]))),
        ],
    )
    one, two = median(rates["executors_1"]), median(rates["executors_2"])
    return {
        "mirror_rows_per_s": round(best),
        "mirror_rows_per_s_batch_1k": round(median(rates["1k"])),
        "mirror_naive_rows_per_s": round(naive_rate),
        "mirror_vs_naive_ratio": round(best / naive_rate, 1),
        "mirror_executors_rows_per_s": round(two),
        "mirror_executors_1core_rows_per_s": round(one),
        "mirror_executors_scaling": round(two / one, 2),
        "rounds_rows_per_s": {k: [round(v) for v in vs] for k, vs in rates.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="rows inserted, then updated")
    parser.add_argument("--naive", type=int, default=1_000, help="rows for the naive writer")
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    args = parser.parse_args()
    load = say_load()
    figures = bench(args.rows, args.naive, args.rounds)
    per_round = figures.pop("rounds_rows_per_s")
    print(json.dumps(figures, indent=2))
    write_result("mirror", {"machine": machine(), "load_average": load, "rows": args.rows,
                            "naive": args.naive, "rounds": args.rounds,
                            "rounds_rows_per_s": per_round, **figures})  # fmt: skip
    merge_summary(figures)


if __name__ == "__main__":
    main()
