"""The checkpoint file manager side by side: Spark's FileSystem-based one (the job's) and its
FileContext-based default.

Every micro-batch writes an entry of the offset log (`walCommit`) and one of the commit log
(`commitOffsets`) into the job's checkpoint; the manager decides how. The rig is
`bench-reader-options`' (`bench.peers_lag.LagRig`: one shard, the generator's single-row
transactions at ``--rate``, our job with its default source options into a console file, a
durable Version Stream and memcached with its fast lane). After one job that is not recorded,
each round runs the job once per manager (`MANAGERS`, set in the session before the job
starts), the order rotating; per manager, the median over the rounds of each sink's lag and of
Spark's per-batch phases. Writes `bench/results/checkpoint_manager.json`. Run with
``make bench-checkpoint``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.peers_lag import LagRig
from bench.reader_options_bench import SHOWN, medians_of, report
from bench.report import console, machine, say_load, write_result

KEY = "spark.sql.streaming.checkpointFileManagerClass"
_PACKAGE = "org.apache.spark.sql.execution.streaming.checkpointing"
MANAGERS = {
    "FileSystem (the job's)": f"{_PACKAGE}.FileSystemBasedCheckpointFileManager",
    "FileContext (Spark's default)": f"{_PACKAGE}.FileContextBasedCheckpointFileManager",
}


def rounds(rig: LagRig, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """manager -> one job result per round, the order rotating, after one unrecorded job."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in MANAGERS}
    names = list(MANAGERS)
    rig.job(args.rate, args.duration, args.warmup)
    for number in range(args.rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            rig.spark.conf.set(KEY, MANAGERS[name])
            result = rig.job(args.rate, args.duration, args.warmup)
            runs[name].append(result)
            sinks, parts = result["sinks"], result["spark_batch_parts_s"]
            console.print(
                f"round {number + 1}, {name}: "
                + ", ".join(f"{s} {sinks[s]['p50_s']}/{sinks[s]['p99_s']}" for s in SHOWN)
                + f"; walCommit {parts.get('walCommit')}"
                + f", commitOffsets {parts.get('commitOffsets')}"
            )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flavor", choices=("mariadb", "mysql"), default="mariadb")
    parser.add_argument("--rate", type=int, default=300, help="rows/s the generator commits")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--trigger-seconds", type=float, default=0.1)
    args = parser.parse_args()
    load_before = say_load()
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-") as tmp:
        rig = LagRig(Path(tmp), Path(tmp), args.trigger_seconds, args.flavor)
        try:
            runs = rounds(rig, args)
            load_end = say_load()
        finally:
            rig.close()
    medians = {name: medians_of(results) for name, results in runs.items()}
    report(medians)
    path = write_result("checkpoint_manager", {
        "machine": machine(), "flavor": args.flavor, "rate": args.rate, "rounds": args.rounds,
        "duration_s": args.duration, "trigger_s": args.trigger_seconds,
        "load_average": load_before, "load_average_end": load_end,
        "median": medians, "runs": runs,
    })  # fmt: skip
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
