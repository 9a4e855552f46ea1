"""Throughput of the sinks against local servers it starts itself (and stops).

- memcached invalidation: change events through the memcached sink into one local memcached
  (first pass: keys absent, ``add``; second pass: newer tokens, ``cas``), batches of 5000,
  counting both passes; then the same passes from Spark's executors with 1 and 2 cores
  (`bench.memcached_executors`), with the ratio;
- Version Stream appends: change events through the Version Stream sink into one local MariaDB
  with durable commits (one locked multi-row INSERT per batch of 5000), and the single-row
  append (one INSERT with a MAX subquery per version, one transaction each) in the same run
  against the same server, with the ratio;
- partitioned Version Streams (`bench.partitions_bench`): the sink with 4 partitions beside
  one stream, and 8 concurrent writers into 4 partitions beside one stream, with the ratios.

Each figure is the median of ``--rounds`` rounds (default 3; the machine may be shared), and
the ratio the median of the rounds' ratios, each measured side by side in its round. Figures
are printed, written with the load average to ``bench/results/sinks.json`` and merged into
``bench/results/summary.json`` (other keys are kept). Run it with ``make bench-sinks`` or
``python -m bench.sinks_bench [--events N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.sinks.sink import BatchContext
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink

from bench import memcached_executors
from bench.partitions_bench import bench_partitions
from bench.report import load_average, machine, say_load, write_result
from bench.summary import merge_summary
from harness.accounts import account_with_secret
from harness.sink_events import ShardLog
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.versionstream.repository import VersionStreamRepository

BATCH = 5000
# A durable server, as in production (the development servers relax both): each commit is
# flushed to disk, which is what makes a transaction per version slow.
DURABLE = ("--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1")


def change_events(count: int, first_ts: int, rows_per_tx: int = 4) -> list[ChangeEvent]:
    """`count` row updates over two shards, `rows_per_tx` rows per transaction, distinct rows."""
    logs = [ShardLog("-80", 1), ShardLog("80-", 2)]
    events: list[ChangeEvent] = []
    uid = 0
    while len(events) < count:
        log = logs[uid % 2]
        rows = []
        for _ in range(rows_per_tx):
            before = {"id": uid, "name": f"user{uid}", "visits": 0}
            rows.append(("update", "users", before, {**before, "visits": first_ts}))
            uid += 1
        events += log.transaction(first_ts + len(events) // 2000, rows)
    return events[:count]


def batches(events: list[ChangeEvent]) -> list[list[ChangeEvent]]:
    return [events[i : i + BATCH] for i in range(0, len(events), BATCH)]


def bench_memcached(events: int, rounds: int) -> dict[str, Any]:
    """Median of `rounds`: each round invalidates `events` absent keys (`add`), then the same
    keys again with newer tokens (`cas`); the rate counts both passes."""
    server = MemcachedServer(memory_mb=256).start()
    rates: list[float] = []
    try:
        for round_no in range(rounds):
            config = spec.MemcachedSink(type="memcached", servers=[server.address])
            sink = MemcachedSink(config, keyspace=f"bench{round_no}")
            sink.open()
            elapsed = 0.0
            for first_ts in (1_700_000_000, 1_700_100_000):
                work = batches(change_events(events, first_ts))
                started = time.perf_counter()
                written = 0
                for i, batch in enumerate(work):
                    written += sink.write_batch(batch, BatchContext("bench", "-", i)).written
                elapsed += time.perf_counter() - started
                assert written == events, (written, events)
            sink.close()
            rate = 2 * events / elapsed
            rates.append(rate)
            print(f"memcached round {round_no + 1}: {2 * events} invalidations at {rate:.0f}/s")
        passes = [change_events(events, first_ts) for first_ts in (1_700_000_000, 1_700_100_000)]
        tasks = memcached_executors.rates(server.address, passes, rounds)
    finally:
        server.stop()
    one, two = tasks["1"], tasks["2"]
    return {
        "memcached_invalidations_per_s": round(statistics.median(rates)),
        "memcached_executors_invalidations_per_s": round(statistics.median(two)),
        "memcached_executors_1core_invalidations_per_s": round(statistics.median(one)),
        "memcached_executors_scaling": round(
            statistics.median(b / a for a, b in zip(one, two, strict=True)), 2
        ),
        "memcached_rounds_per_s": {"driver": rates, "executors_1": one, "executors_2": two},
    }


def bench_versionstream(events: int, naive: int, rounds: int) -> dict[str, Any]:
    """Median of `rounds` for each: `events` versions through the sink (batches of 5000) into
    stream `round`, and `naive` single-row appends into another stream of the same table."""
    with tempfile.TemporaryDirectory(prefix="sinks-bench-") as tmp:
        server = MariaDBServer(base_dir=Path(tmp) / "mariadb", server_id=4242, extra_args=DURABLE)
        server.start()
        try:
            secrets = Path(tmp) / "secrets"
            account_with_secret(server, secrets, "bench", "bench")
            batched: list[float] = []
            single: list[float] = []
            for round_no in range(rounds):
                config = spec.VersionStreamSink.model_validate(
                    {
                        "type": "versionStream",
                        "mysql": {"host": server.host, "port": server.port},
                        "credentialsSecret": {"name": "bench"},
                        "stream": round_no,
                    }
                )
                sink = VersionStreamSink(config, secrets_dir=secrets)
                sink.open()
                work = batches(change_events(events, 1_700_000_000))
                started = time.perf_counter()
                for i, batch in enumerate(work):
                    sink.write_batch(batch, BatchContext("bench", "-", i))
                rate = events / (time.perf_counter() - started)
                batched.append(rate)
                sink.close()
                print(f"versionstream round {round_no + 1}: {events} versions at {rate:.0f}/s")

                repo = VersionStreamRepository(
                    server.root_connect,
                    table="versionstream",
                    database="updatestream",
                    stream=1000 + round_no,
                )
                started = time.perf_counter()
                for n in range(naive):
                    repo.append_naive(f'users:{{"id":{n}}}', json.dumps({"id": n}))
                rate = naive / (time.perf_counter() - started)
                single.append(rate)
                repo.close()
                print(f"naive round {round_no + 1}: {naive} single-row appends at {rate:.0f}/s")
            partitioned = bench_partitions(
                server, secrets, batches(change_events(events, 1_700_000_000)), rounds
            )
        finally:
            server.stop()
    return {
        "versionstream_appends_per_s": round(statistics.median(batched)),
        "naive_append_per_s": round(statistics.median(single)),
        "versionstream_vs_naive_ratio": round(
            statistics.median(b / s for b, s in zip(batched, single, strict=True)), 1
        ),
        **partitioned,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="events per measurement")
    parser.add_argument("--naive", type=int, default=1_000, help="single-row appends")
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    args = parser.parse_args()
    load = say_load()
    figures = bench_memcached(args.events, args.rounds)
    figures |= bench_versionstream(args.events, args.naive, args.rounds)
    runs = figures.pop("partition_runs")
    memcached_rounds = figures.pop("memcached_rounds_per_s")
    print(json.dumps(figures, indent=2))
    write_result("sinks", {"machine": machine(), "load_average": load, "load_average_end":
                           load_average(), "events": args.events, "naive": args.naive,
                           "rounds": args.rounds, "partition_runs": runs,
                           "memcached_rounds_per_s": memcached_rounds, **figures})  # fmt: skip
    merge_summary(figures)


if __name__ == "__main__":
    main()
