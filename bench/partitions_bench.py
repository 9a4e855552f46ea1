"""Appends/s of a Version Stream with 4 partitions beside one stream, side by side in each round
(part of ``make bench-sinks``; `bench.sinks_bench` calls `bench_partitions`).

Two ways of appending, each into one local MariaDB with durable commits:

- ``sink``: the job's Version Stream sink (`partitions: 1` and `partitions: 4`), the same
  change events in batches of 5,000 from one writer: the partitioned sink appends a batch's four
  shares in four threads at once, then recombines the stream-of-streams;
- ``writers``: seed 002's situation, many writers appending small batches at once (8
  processes, each with its own connection, each append one new version of one of its entities),
  into one stream (they queue on its gap lock) or into 4 partitions
  (`PartitionedStream.append(recombine=False)` and a `Recombiner` every 0.1 s).

Besides the rates, each measurement keeps the CPU seconds of the clients (this process, every
thread; or the writer processes) and of `mariadbd`, and the wall time: on two cores they say
what bounds it.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pymysql
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_jobs.sinks.sink import BatchContext
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink

from bench.report import median
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.versionstream import (
    PartitionedStream,
    Recombiner,
    Record,
    VersionStreamRepository,
)

PARTITIONS = 4
WRITERS = 8
WRITER_BATCH = 1  # an application's append: one entity's new version (seed 002)
WRITER_APPENDS = 150
RETRIES = 1000  # one stream under 8 writers loses many deadlocks: count them, never give up


def timed(server: MariaDBServer, work: Callable[[], int]) -> dict[str, float]:
    """Run `work` (returns versions appended); its rate, wall time and CPU split (the client:
    this process, every thread)."""
    mariadbd = psutil.Process(server.pid)
    server_cpu = sum(mariadbd.cpu_times()[:2])
    client_cpu = time.process_time()
    began = time.perf_counter()
    appended = work()
    wall = time.perf_counter() - began
    return {
        "appends_per_s": round(appended / wall),
        "versions": appended,
        "wall_s": round(wall, 3),
        "client_cpu_s": round(time.process_time() - client_cpu, 3),
        "server_cpu_s": round(sum(mariadbd.cpu_times()[:2]) - server_cpu, 3),
    }


def sink_run(
    server: MariaDBServer, secrets: Path, work: list[list[ChangeEvent]], stream: int, parts: int
) -> dict[str, float]:
    config = spec.VersionStreamSink.model_validate(
        {
            "type": "versionStream",
            "mysql": {"host": server.host, "port": server.port},
            "credentialsSecret": {"name": "bench"},
            "table": "partitioned",
            "stream": stream,
            "partitions": parts,
        }
    )
    sink = VersionStreamSink(config, secrets_dir=secrets)
    sink.open()

    def append_all() -> int:
        return sum(
            sink.write_batch(batch, BatchContext("bench", "-", i)).written
            for i, batch in enumerate(work)
        )

    try:
        return timed(server, append_all)
    finally:
        sink.close()


def _connect_to(socket_path: str) -> Callable[[], Any]:
    return lambda: pymysql.connect(unix_socket=socket_path, user="root", password="")


def one_writer(socket_path: str, stream: int, parts: int, number: int, batches: int,
               ready: Any, go: Any, cpu: Any) -> None:  # fmt: skip
    """One writer process: `batches` appends of WRITER_BATCH versions of its own entities; puts
    the CPU seconds of its appends and the lock conflicts it lost on `cpu`."""
    connect = _connect_to(socket_path)
    if parts == 1:
        target: Any = VersionStreamRepository(
            connect, table="concurrent", database="bench", stream=stream, retries=RETRIES
        )
        append = target.append
        repositories = [target]
    else:
        target = PartitionedStream(
            connect, table="concurrent", database="bench", stream=stream, partitions=parts,
            retries=RETRIES,
        )  # fmt: skip
        append = lambda records: target.append(records, recombine=False)  # noqa: E731
        repositories = target.repositories
    ready.wait()
    go.wait()
    began = time.process_time()
    for batch in range(batches):
        append(
            [
                Record(f"w{number}:{(batch * WRITER_BATCH + i) % 50}", json.dumps(batch))
                for i in range(WRITER_BATCH)
            ]
        )
    cpu.put((time.process_time() - began, sum(r.conflicts for r in repositories)))
    target.close()


def writers_run(server: MariaDBServer, stream: int, parts: int, batches: int) -> dict[str, float]:
    """WRITERS processes (applications, each with its own connection) appending at once; with
    partitions, a Recombiner in this process every 0.1 s."""
    context = multiprocessing.get_context("spawn")
    ready, go, cpu = context.Barrier(WRITERS + 1), context.Event(), context.Queue()
    socket_path = str(server.socket_path)
    partitioned = PartitionedStream(
        _connect_to(socket_path), table="concurrent", database="bench", stream=stream,
        partitions=parts,
    )  # fmt: skip
    partitioned.create_table()
    recombiner = Recombiner(partitioned.sos, interval=0.1)
    processes = [
        context.Process(
            target=one_writer, args=(socket_path, stream, parts, n, batches, ready, go, cpu)
        )
        for n in range(WRITERS)
    ]
    for process in processes:
        process.start()
    ready.wait()  # every writer imported and connected: only the appends are timed

    def run_all() -> int:
        if parts > 1:
            recombiner.start()
        go.set()
        for process in processes:
            process.join()
            if process.exitcode != 0:
                raise RuntimeError(f"a writer process failed (exit status {process.exitcode})")
        if parts > 1:
            recombiner.stop()
        return WRITERS * batches * WRITER_BATCH

    try:
        figures = timed(server, run_all)  # this process: the recombiner
    finally:
        partitioned.close()
    figures["recombiner_cpu_s"] = figures.pop("client_cpu_s")
    reports = [cpu.get() for _ in processes]
    figures["client_cpu_s"] = round(sum(seconds for seconds, _ in reports), 3)
    figures["lock_conflicts"] = sum(conflicts for _, conflicts in reports)
    return figures


def bench_partitions(
    server: MariaDBServer, secrets: Path, work: list[list[ChangeEvent]], rounds: int
) -> dict[str, Any]:
    """Per round, side by side: the sink with 1 and 4 partitions, then the concurrent writers
    into 1 stream and 4 partitions. Figures: medians, and the median of the rounds' ratios."""
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in ("sink_1", "sink_4", "w_1", "w_4")}
    for number in range(rounds):
        base = 1000 * (number + 1)
        runs["sink_1"].append(sink_run(server, secrets, work, base, 1))
        runs["sink_4"].append(sink_run(server, secrets, work, base + 100, PARTITIONS))
        runs["w_1"].append(writers_run(server, base, 1, WRITER_APPENDS))
        runs["w_4"].append(writers_run(server, base + 100, PARTITIONS, WRITER_APPENDS))
        print(
            f"partitions round {number + 1}: sink "
            f"{runs['sink_1'][-1]['appends_per_s']} -> {runs['sink_4'][-1]['appends_per_s']}/s, "
            f"{WRITERS} writers {runs['w_1'][-1]['appends_per_s']} -> "
            f"{runs['w_4'][-1]['appends_per_s']}/s"
        )

    def ratio(fast: str, slow: str) -> float:
        pairs = zip(runs[fast], runs[slow], strict=True)
        return round(median(f["appends_per_s"] / s["appends_per_s"] for f, s in pairs), 2)

    def rate(key: str) -> int:
        return round(median(r["appends_per_s"] for r in runs[key]))

    return {
        "versionstream_partitioned_speedup": ratio("sink_4", "sink_1"),
        "versionstream_partitioned_appends_per_s": rate("sink_4"),
        "versionstream_one_stream_appends_per_s": rate("sink_1"),
        "versionstream_writers_partitioned_speedup": ratio("w_4", "w_1"),
        "versionstream_writers_partitioned_appends_per_s": rate("w_4"),
        "versionstream_writers_one_stream_appends_per_s": rate("w_1"),
        "partition_runs": runs,
    }
