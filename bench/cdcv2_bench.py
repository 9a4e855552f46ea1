"""CDCv2 sink throughput: one writer in the driver beside parallel writers on the executors.

The workload is `mirror_bench.workload` (``--events`` / 2 inserts of distinct rows, then as many
updates of the same rows, two shards, four rows a transaction; an update is two statements,
``-1`` and ``+1``), in batches of 10,000 events, each batch ending with a heartbeat per shard. A
round writes it three ways into fresh directories of one temporary filesystem path:

- ``driver``: `CDCv2Sink.write_batch` with the events held in memory (the driver's write
  alone, without reading the batch from Spark: the best case of one writer);
- ``executors_1`` / ``executors_2``: `CDCv2Sink.write_frame` with ``writeFrom: executors`` and
  ``--parts`` parts, Spark in this process with 1 and 2 cores; each batch a cached DataFrame of
  two partitions, one per shard, as the job's source makes them (`bench.mirror_executors`), so
  a rate is the Spark job (the tasks' routing, the shuffle, the parts' writes) and the driver's
  progress write.

Every run's directory is read back (`updatestream.cdcv2.read_directory`) and must hold the same
final table as the driver's. Figures are medians over ``--rounds`` rounds (default 3), written
with the load averages to ``bench/results/cdcv2.json`` and merged into the summary as
``cdcv2_rows_per_s``, ``cdcv2_executors_rows_per_s`` (2 cores),
``cdcv2_executors_1core_rows_per_s`` and ``cdcv2_executors_scaling`` (2 over 1, the median of
the rounds' ratios). Run it with ``make bench-cdcv2``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink, stream_directory
from updatestream_jobs.sinks.sink import BatchContext

from bench.mirror_bench import workload as mirror_workload
from bench.mirror_executors import CORES, frames, session
from bench.report import load_average, machine, say_load, write_result
from bench.summary import merge_summary
from harness.sink_events import ShardLog
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.cdcv2 import Collection, read_directory

BATCH = 10_000


def workload(events: int) -> list[list[ChangeEvent]]:
    """The batches: `events` changes cut in `BATCH`es, each closed by both shards' heartbeats
    at its last second, and a last batch of heartbeats well after, so every time completes."""
    changes = mirror_workload(events // 2)
    beats = {"-80": ShardLog("-80", 1, seq=1), "80-": ShardLog("80-", 2, seq=1)}
    out = []
    for start in range(0, len(changes), BATCH):
        batch = changes[start : start + BATCH]
        last = max(e.timestamp for e in batch)
        out.append(batch + [log.heartbeat(last) for log in beats.values()])
    far = max(e.timestamp for e in changes) + 60
    return [*out, [log.heartbeat(far) for log in beats.values()]]


def make_sink(root: Path, **extra: Any) -> CDCv2Sink:
    sink = CDCv2Sink(spec.CDCv2Sink.model_validate({"type": "cdcv2", "path": str(root), **extra}))
    sink.open()
    return sink


def read_back(root: Path) -> dict[str, Any]:
    collection = Collection()
    for completed in read_directory(stream_directory(root, BatchContext("b", "-", 0))):
        collection.apply(completed)
    return collection.tables()


def driver_rate(root: Path, batches: list[list[ChangeEvent]]) -> float:
    sink = make_sink(root)
    started = time.perf_counter()
    written = sum(
        sink.write_batch(b, BatchContext("b", "-", i)).written for i, b in enumerate(batches)
    )
    elapsed = time.perf_counter() - started
    assert written == sum(len(b) for b in batches) - 2 * len(batches), written
    return written / elapsed


def executors_rate(spark: Any, root: Path, batches: list[list[ChangeEvent]], parts: int) -> float:
    cached = [frames(spark, batch, len(batch))[0] for batch in batches]
    sink = make_sink(root, writeFrom="executors", writePartitions=parts)
    started = time.perf_counter()
    written = sum(
        sink.write_frame(f, BatchContext("b", "-", i)).written for i, f in enumerate(cached)
    )
    elapsed = time.perf_counter() - started
    for frame in cached:
        frame.unpersist()
    assert written == sum(len(b) for b in batches) - 2 * len(batches), written
    return written / elapsed


def rounds(events: int, parts: int, count: int, scratch: Path) -> dict[str, list[float]]:
    """Rows per second per writer (`driver`, `executors_1`, `executors_2`), per round."""
    batches = workload(events)
    found: dict[str, list[float]] = {"driver": []}
    expected: dict[str, Any] | None = None
    for round_no in range(1, count + 1):
        root = scratch / f"driver-{round_no}"
        found["driver"].append(driver_rate(root, batches))
        expected = read_back(root)
        print(f"round {round_no}: driver {found['driver'][-1]:,.0f} rows/s")
    for cores in CORES:
        spark = session(cores)
        name = f"executors_{cores}"
        found[name] = []
        try:
            for round_no in range(1, count + 1):
                root = scratch / f"{name}-{round_no}"
                found[name].append(executors_rate(spark, root, batches, parts))
                assert read_back(root) == expected, f"{name} round {round_no} read back differs"
                print(f"round {round_no}: {cores} executor core(s) {found[name][-1]:,.0f} rows/s")
        finally:
            spark.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="row changes per round")
    parser.add_argument("--parts", type=int, default=4, help="writePartitions of the executors")
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    args = parser.parse_args()
    load = say_load()
    with tempfile.TemporaryDirectory(prefix="cdcv2-bench-") as scratch:
        runs = rounds(args.events, args.parts, args.rounds, Path(scratch))
    one, two = runs["executors_1"], runs["executors_2"]
    figures = {
        "cdcv2_rows_per_s": round(statistics.median(runs["driver"])),
        "cdcv2_executors_rows_per_s": round(statistics.median(two)),
        "cdcv2_executors_1core_rows_per_s": round(statistics.median(one)),
        "cdcv2_executors_scaling": round(
            statistics.median(b / a for a, b in zip(one, two, strict=True)), 2
        ),
    }
    print(json.dumps(figures, indent=2))
    result = {"machine": machine(), "load_average": load, "load_average_end": load_average()}
    result |= {"events": args.events, "parts": args.parts, "rounds": args.rounds}
    write_result("cdcv2", {**result, "rounds_rows_per_s": runs, **figures})
    merge_summary(figures)


if __name__ == "__main__":
    main()
