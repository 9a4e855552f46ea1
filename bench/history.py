"""Every benchmark run's headline figures, oldest first: `bench/results/history.json`.

Each entry is one run of one benchmark: its date, the commit its figures were committed in
(empty for a run not yet committed), its figures as merged into the summary, the machine and
the one-minute load averages its result file recorded (start to end). `bench.summary` adds an
entry on every merge; the runs before the history existed were read back from the
repository's history of `bench/results/` once:

    python -m bench.history --from-git     # rebuild history.json from git log
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path
from typing import Any

from bench.figures import BENCHMARKS, FIGURE, own_figures
from bench.report import write_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
HISTORY = RESULTS / "history.json"


def loads_of(result: dict[str, Any]) -> list[float]:
    """The one-minute load averages a result file recorded, in the order they were taken."""
    seen: list[Any] = []
    for key in ("load_average_before", "load_before", "load_average", "load_average_between"):
        seen.append(result.get(key))
    seen += result.get("load_averages") or []
    seen += [result.get("load_average_after"), result.get("load_after")]
    return [round(float(load[0]), 2) for load in seen if isinstance(load, list) and load]


def entries_of(
    figures: dict[str, Any], results: Path, date: str, commit: str = ""
) -> list[dict[str, Any]]:
    """One entry per benchmark whose figures `figures` holds."""
    out = []
    for benchmark in BENCHMARKS:
        own = own_figures(benchmark, figures)
        if not own:
            continue
        result_file = results / f"{benchmark}.json"
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
        out.append({
            "date": date, "commit": commit, "benchmark": benchmark, "figures": own,
            "machine": figures.get("machine") or result.get("machine", ""),
            "load": loads_of(result),
        })  # fmt: skip
    return out


def read_history(path: Path = HISTORY) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def record_run(figures: dict[str, Any], path: Path = HISTORY) -> None:
    """Add the run that merged `figures` (its result files are in `path`'s folder)."""
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    write_result(
        path.stem, read_history(path) + entries_of(figures, path.parent, today), path.parent
    )


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True)
    return done.stdout


def _show(commit: str, path: str) -> dict[str, Any]:
    done = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return json.loads(done.stdout) if done.returncode == 0 else {}


def from_git(summary_path: str = "bench/results/summary.json") -> list[dict[str, Any]]:
    """The runs recorded in the repository: at each commit that changed the summary, the
    figures of every benchmark whose figures or result file it changed."""
    log = _git("log", "--no-merges", "--reverse", "--format=%h %cs", "--", summary_path)
    entries: list[dict[str, Any]] = []
    last: dict[str, dict[str, Any]] = {}
    for line in log.splitlines():
        commit, date = line.split()
        after, before = _show(commit, summary_path), _show(f"{commit}^", summary_path)
        changed = {key for key in after if key in FIGURE and after[key] != before.get(key)}
        listed = _git("show", "--name-only", "--format=", commit, "--", "bench/results")
        files = {Path(name).stem for name in listed.split()}
        ran = {FIGURE[key].benchmark for key in changed} | (files & set(BENCHMARKS))
        for benchmark in (b for b in BENCHMARKS if b in ran):
            own = {
                k: v for k, v in after.items() if k in FIGURE and FIGURE[k].benchmark == benchmark
            }
            if not own or own == last.get(benchmark):
                continue
            last[benchmark] = own
            result = _show(commit, f"bench/results/{benchmark}.json") if benchmark in files else {}
            entries.append({
                "date": date, "commit": commit, "benchmark": benchmark, "figures": own,
                "machine": after.get("machine", ""), "load": loads_of(result),
            })  # fmt: skip
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--from-git", action="store_true", help="rebuild history.json from git")
    args = parser.parse_args()
    if args.from_git:
        write_result(HISTORY.stem, from_git(), HISTORY.parent)


if __name__ == "__main__":
    main()
