"""The shared benchmark summary: one JSON object that every benchmark updates in place.

Its keys are the figures of `bench.figures` (numbers) and `machine`, plus `goals`: for every
goal of `bench.figures.GOALS` whose figures are measured, the goal as the tables show it and
whether it is met. Every merge judges the goals again and records the benchmark's run in
`history.json` beside the summary (`bench.history`), so neither is ever written by hand.

    python -m bench.summary --judge     # judge the goals of the committed summary again
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.figures import GOALS
from bench.history import record_run
from bench.report import write_result

SUMMARY = Path(__file__).resolve().parent / "results" / "summary.json"


def judge(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Goal id -> the figure it holds, the goal as shown, and whether the figure meets it."""
    out = {}
    for goal in GOALS:
        met = goal.met(summary)
        if met is not None:
            out[goal.id] = {"figure": goal.key, "goal": goal.text, "met": met}
    return out


def read_summary(path: Path = SUMMARY) -> dict[str, Any]:
    if not path.exists():
        return {}
    summary: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return summary


def merge_summary(figures: dict[str, Any], path: Path = SUMMARY) -> None:
    """Write `figures` into the summary, keeping the other benchmarks' keys, judge the goals
    again and add the run to the history beside it."""
    summary = read_summary(path)
    summary.update(figures)
    summary["goals"] = judge(summary)
    write_result(path.stem, summary, path.parent)
    record_run(figures, path.with_name("history.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--judge", action="store_true", help="judge the summary's goals again")
    args = parser.parse_args()
    if args.judge:
        summary = read_summary()
        summary["goals"] = judge(summary)
        write_result(SUMMARY.stem, summary, SUMMARY.parent)


if __name__ == "__main__":
    main()
