"""The stream reader's latency options side by side: `prefetchHeld` and `switchIntervalMs`.

`prefetchHeld` hands a batch the tails hold to Spark with its plan instead of having a Python worker
task read it (the durable sinks wait for the batch's cycle); `switchIntervalMs` lowers the GIL
switch interval of the stream reader's process, where the tails and the fast lane wait for the
thread planning a batch. `bench-peers`' lag rig (`bench.peers_lag.LagRig`): a one-shard development
cluster, the traffic generator in its own process committing single-row transactions at ``--rate``
for ``--duration`` seconds, and our job (Spark local mode, trigger ``--trigger-seconds``) writing a
console file, a durable Version Stream and memcached with its fast lane. After one job that is not
recorded (a Spark session's first jobs run slower), each round runs the job once per variant
(`VARIANTS`: neither, each, both; "neither" is `prefetchHeld=false` with `switchIntervalMs=5`,
Python's own interval), the order rotating from round to round so that each variant leads one round
in four. A change's lag is when the sink's write returned (the fast lane: when it applied the
invalidation) minus its commit in the generator's ledger. Per variant, the median over ``--rounds``
rounds of each sink's p50 / p99 / max, of Spark's per-batch phases (`durationMs`: `queryPlanning`
holds the hand-over, `addBatch` the batch function) and of the driver's (`read_s`: the batch read
back from Spark). Writes `bench/results/reader_options.json` (with `_<flavor>` for a flavor other
than MariaDB) with every round and the load averages. Run with ``make bench-reader-options``.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.peers_lag import FAST_LANE, LagRig, lag_medians
from bench.report import console, machine, print_table, say_load, write_result

PREFETCH = {"prefetchHeld": "true"}
NO_PREFETCH = {"prefetchHeld": "false"}
SWITCH_5MS = {"switchIntervalMs": "5"}  # Python's own default
SWITCH_1MS = {"switchIntervalMs": "1"}
VARIANTS: dict[str, dict[str, str]] = {
    "neither": {**NO_PREFETCH, **SWITCH_5MS},
    "prefetchHeld": {**PREFETCH, **SWITCH_5MS},
    "switchIntervalMs=1": {**NO_PREFETCH, **SWITCH_1MS},
    "both": {**PREFETCH, **SWITCH_1MS},
}
SHOWN = ("console", "versionstream", FAST_LANE)
PHASES = ("triggerExecution", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def rounds(
    rig: LagRig,
    args: argparse.Namespace,
    variants: Mapping[str, dict[str, str]] = VARIANTS,
    prepare: Callable[[str], None] = lambda name: None,
) -> dict[str, list[dict[str, Any]]]:
    """variant -> one job result per round (the variants' order rotating), after one job that
    is not recorded: the first jobs of a Spark session run slower (its JIT warms up). A job runs
    with its variant's source options, after `prepare(variant)`."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    names = list(variants)
    rig.job(args.rate, args.duration, args.warmup)
    for number in range(args.rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            prepare(name)
            result = rig.job(args.rate, args.duration, args.warmup, variants[name])
            runs[name].append(result)
            sinks, parts = result["sinks"], result["spark_batch_parts_s"]
            console.print(
                f"round {number + 1}, {name}: "
                + ", ".join(f"{s} {sinks[s]['p50_s']}/{sinks[s]['p99_s']}" for s in SHOWN)
                + "; " + ", ".join(f"{p} {parts.get(p)}" for p in PHASES[2:])
            )  # fmt: skip
    return runs


def medians_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """`lag_medians`' figures of the job alone (it is given no Debezium rounds)."""
    out = lag_medians({"job": runs, "debezium_default": [], "debezium_poll10": []})
    return {key: value for key, value in out.items() if key.startswith("job_")}


def report(medians: dict[str, dict[str, Any]]) -> None:
    print_table(
        "lag p50 / p99 (s), medians of the rounds",
        ["variant", *SHOWN],
        [
            [name] + [f"{m[f'job_{s}']['p50_s']} / {m[f'job_{s}']['p99_s']}" for s in SHOWN]
            for name, m in medians.items()
        ],
    )
    print_table(
        "per-batch phases (s), medians",
        ["variant", *PHASES, "driver read_s"],
        [
            [name]
            + [m["job_spark_batch_parts_s"].get(p) for p in PHASES]
            + [m["job_driver_phases_s"].get("read_s")]
            for name, m in medians.items()
        ],
    )


def lag_rig_parser(description: str, rounds: int, rounds_help: str) -> argparse.ArgumentParser:
    """The arguments of a side-by-side run in the lag rig."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--flavor", choices=("mariadb", "mysql"), default="mariadb")
    parser.add_argument(
        "--rate", type=int, default=300, help="rows/s the generator commits (the default is "
        "below what a two-core machine sustains beside the generator and the servers)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--trigger-seconds", type=float, default=0.1)
    return parser


def run_side_by_side(
    args: argparse.Namespace,
    name: str,
    variants: Mapping[str, dict[str, str]],
    prepare_in: Callable[[LagRig], Callable[[str], None]] = lambda rig: lambda name: None,
) -> None:
    """`rounds` in a lag rig of its own, the medians reported and written as `name`."""
    load_before = say_load()
    with tempfile.TemporaryDirectory(prefix=f"{name}-bench-") as tmp:
        rig = LagRig(Path(tmp), Path(tmp), args.trigger_seconds, args.flavor)
        try:
            runs = rounds(rig, args, variants, prepare_in(rig))
            load_end = say_load()  # written before the rig stops: Spark's stop may take long
            path = write(args, name, runs, [load_before, load_end])
        finally:
            rig.close()
    console.print(f"wrote {path}")


def setting_side_by_side(
    doc: str | None,
    name: str,
    names: list[str],
    prepare_in: Callable[[LagRig], Callable[[str], None]],
) -> None:
    """`run_side_by_side` of variants that differ only in what `prepare_in`'s step sets before
    each job (the job's default source options all along), 4 rounds unless told."""
    every = "each variant leads every other round"
    args = lag_rig_parser((doc or name).splitlines()[0], 4, every).parse_args()
    run_side_by_side(args, name, {variant: {} for variant in names}, prepare_in)


def main() -> None:
    description = __doc__.splitlines()[0]
    every = f"each variant leads one round in every {len(VARIANTS)}"
    args = lag_rig_parser(description, len(VARIANTS), every).parse_args()
    name = "reader_options" if args.flavor == "mariadb" else f"reader_options_{args.flavor}"
    run_side_by_side(args, name, VARIANTS)


def write(
    args: argparse.Namespace, name: str, runs: dict[str, Any], loads: list[list[float]]
) -> Path:
    medians = {variant: medians_of(results) for variant, results in runs.items()}
    report(medians)
    payload = {
        "machine": machine(),
        "flavor": args.flavor,
        "rate": args.rate,
        "rounds": args.rounds,
        "duration_s": args.duration,
        "trigger_s": args.trigger_seconds,
        "load_average": loads[0],
        "load_average_end": loads[1],
        "median": medians,
        "runs": runs,
    }
    return write_result(name, payload)


if __name__ == "__main__":
    main()
