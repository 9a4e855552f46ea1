"""Print `bench/results/summary.json` as one table, with the goals and whether each is met.

Run by ``make bench`` after every benchmark; ``python -m bench.show_summary`` prints it alone.
The figures are described in `bench.figures`; a key it does not describe is printed under its
own name.
"""

from __future__ import annotations

from typing import Any

from bench.figures import FIGURE, FIGURES, goals_of
from bench.report import console, print_table
from bench.summary import read_summary

NOT_FIGURES = ("machine", "goals")


def goal_cells(summary: dict[str, Any], key: str) -> tuple[str, str]:
    """The goals of figure `key` as shown, and whether each is met ("met", "missed")."""
    judged = summary.get("goals", {})
    goals = [judged[goal.id] for goal in goals_of(key) if goal.id in judged]
    if not goals:
        return "—", ""
    shown = "; ".join(goal["goal"] for goal in goals)
    return shown, "; ".join("met" if goal["met"] else "missed" for goal in goals)


def rows(summary: dict[str, Any]) -> list[list[Any]]:
    known = [figure.key for figure in FIGURES if figure.key in summary]
    others = sorted(key for key in summary if key not in FIGURE and key not in NOT_FIGURES)
    out = []
    for key in known + others:
        what = FIGURE[key].what if key in FIGURE else key
        unit = FIGURE[key].unit if key in FIGURE else ""
        out.append([f"{what} ({unit})" if unit else what, summary[key], *goal_cells(summary, key)])
    return out


def main() -> None:
    summary = read_summary()
    if not summary:
        raise SystemExit("no bench/results/summary.json yet; run a benchmark first")
    print_table(
        f"Benchmark summary ({summary.get('machine', 'machine not recorded')})",
        ["figure", "value", "goal", ""],
        rows(summary),
    )
    console.print("per-benchmark details: bench/results/<name>.json, docs/benchmarks.md")


if __name__ == "__main__":
    main()
