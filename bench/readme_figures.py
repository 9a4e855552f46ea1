"""The figures of README.md and docs/benchmarks.md, rendered from `bench/results/`.

Each generated block sits between ``<!-- figures:NAME -->`` and ``<!-- /figures -->``:
``readme`` (the README's short table, from `summary.json`), ``summary`` (every figure and
goal), one block per benchmark from its result file (``lag``, ``hop``, ...) and
``history:<benchmark>`` (its runs, from `history.json`), and ``vitess_peers:line`` in
docs/vitess.md (one line of `vitess_peers.json`). Text outside the markers is not touched.

    python -m bench.readme_figures --write    # render every block again
    python -m bench.readme_figures --check    # exit 1 if a block differs (make lint runs it)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.doc_tables import RENDERERS, history, read, table
from bench.figures import BENCHMARKS, FIGURES, goals_of, shown, with_unit
from bench.lag_tables import lag
from bench.partition_tables import partitions

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCUMENTS = ("README.md", "docs/benchmarks.md", "docs/vitess.md")
BLOCK = re.compile(r"(<!-- figures:(?P<name>[\w:-]+) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.S)
WRITE = "python -m bench.readme_figures --write"
# the blocks of `bench.doc_tables`, and those rendered by modules of their own
BLOCKS = {**RENDERERS, "lag": lag, "sinks:partitions": partitions}


def goal_cells(summary: dict[str, Any], key: str) -> tuple[str, str]:
    judged = summary.get("goals", {})
    goals = [judged[goal.id] for goal in goals_of(key) if goal.id in judged]
    return (
        "; ".join(goal["goal"] for goal in goals) or "—",
        "; ".join("**met**" if goal["met"] else "missed" for goal in goals),
    )


def figures_table(summary: dict[str, Any], readme: bool) -> str:
    rows = []
    for figure in FIGURES:
        if figure.key not in summary or (readme and not (figure.readme or figure.goals)):
            continue
        value = with_unit(shown(summary[figure.key]), figure.unit)
        rows.append(
            [figure.what, value, *goal_cells(summary, figure.key), f"`bench-{figure.benchmark}`"]
        )
    return table(["figure", "value", "goal", "", "`make`"], rows)


def goals_line(summary: dict[str, Any], results: Path = RESULTS) -> str:
    judged = list(summary.get("goals", {}).values())
    met = sum(1 for goal in judged if goal["met"])
    return f"{met} of the {len(judged)} goals are met. {machines_line(summary, results)}"


def machines_line(summary: dict[str, Any], results: Path = RESULTS) -> str:
    """The machine each shown figure's benchmark last ran on, from its result file: the
    benchmarks run on different days, not always on the same kind of machine."""
    ran_on: dict[str, list[str]] = {}
    for benchmark in dict.fromkeys(f.benchmark for f in FIGURES if f.key in summary):
        found = (results / f"{benchmark}.json").exists()
        machine = read(benchmark, results).get("machine") if found else None
        ran_on.setdefault(machine or summary.get("machine", "—"), []).append(benchmark)
    if len(ran_on) <= 1:
        return f"Machine: {next(iter(ran_on), summary.get('machine', '—'))}."
    return (
        "Machines: "
        + "; ".join(
            f"{machine} ({', '.join(f'`bench-{b}`' for b in benchmarks)})"
            for machine, benchmarks in ran_on.items()
        )
        + "."
    )


def render(name: str, results: Path = RESULTS) -> str:
    """The Markdown of block `name`."""
    summary = json.loads((results / "summary.json").read_text(encoding="utf-8"))
    if name == "readme":
        return figures_table(summary, readme=True) + "\n\n" + goals_line(summary, results)
    if name == "summary":
        return figures_table(summary, readme=False) + "\n\n" + goals_line(summary, results)
    if name.startswith("history:") and name.split(":", 1)[1] in BENCHMARKS:
        entries = json.loads((results / "history.json").read_text(encoding="utf-8"))
        return history(name.split(":", 1)[1], entries)
    if name in BLOCKS:
        source = name.split(":", 1)[0]  # `vitess_peers:line` renders vitess_peers.json
        if not (results / f"{source}.json").exists():
            return f"Not measured yet: `bench/results/{source}.json` is written by its benchmark."
        return BLOCKS[name](read(source, results))
    raise SystemExit(f"unknown figures block {name!r}: known are readme, summary, "
                     f"history:<benchmark> and {', '.join(BLOCKS)}")  # fmt: skip


def rewrite(text: str, results: Path = RESULTS) -> str:
    """`text` with every generated block rendered again."""
    return BLOCK.sub(lambda m: m[1] + render(m["name"], results) + "\n" + m[4], text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="render the blocks in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    stale = []
    for name in DOCUMENTS:
        path = args.root / name
        text = path.read_text(encoding="utf-8")
        fresh = rewrite(text, args.root / "bench" / "results")
        if name == "README.md" and "<!-- figures:readme -->" not in text:
            stale.append(f"{name}: no <!-- figures:readme --> block; add one and run {WRITE}")
        elif fresh != text and args.write:
            path.write_text(fresh, encoding="utf-8")
        elif fresh != text:
            pairs = zip(BLOCK.finditer(text), BLOCK.finditer(fresh), strict=True)
            changed = [old["name"] for old, new in pairs if old["body"] != new["body"]]
            stale.append(f"{name}: figures block(s) {', '.join(changed)} differ from bench/results "
                         f"(edited by hand, or the results changed); run {WRITE}")  # fmt: skip
    for line in stale:
        print(line, file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
