"""Every benchmark updates one shared summary file without dropping the others' figures; the
goals are judged from it by code, every run is kept in a history, and the figures of the README
and docs/benchmarks.md are rendered from those files and checked against them."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import readme_figures
from bench.figures import BENCHMARKS, FIGURE, FIGURES, GOALS, shown
from bench.history import entries_of, from_git, loads_of
from bench.report import fmt, write_result
from bench.show_summary import rows
from bench.summary import judge, merge_summary

ROOT = Path(__file__).resolve().parent.parent


def test_merge_keeps_other_benchmarks_keys_and_overwrites_its_own(tmp_path: Path) -> None:
    path = tmp_path / "results" / "summary.json"
    merge_summary({"source_rows_per_s": 1000, "machine": "2 cores"}, path)
    merge_summary({"source_rows_per_s": 2000, "memcached_invalidations_per_s": 30000}, path)
    assert json.loads(path.read_text()) == {
        "machine": "2 cores",
        "memcached_invalidations_per_s": 30000,
        "source_rows_per_s": 2000,
        "goals": {
            "memcached_invalidations_per_s": {
                "figure": "memcached_invalidations_per_s",
                "goal": "≥ 20,000/s",
                "met": True,
            }
        },
    }
    assert not path.with_suffix(".json.tmp").exists()


def test_every_merge_adds_the_run_to_the_history_beside_the_summary(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    write_result("hop", {"load_average": [3.4, 2.7, 2.2]}, tmp_path)
    merge_summary({"hop_median_s": 1.3, "hop_lost": 0, "machine": "2 cores"}, path)
    merge_summary({"source_rows_per_s": 60000}, path)
    history = json.loads((tmp_path / "history.json").read_text())
    assert [(e["benchmark"], e["figures"], e["load"]) for e in history] == [
        ("hop", {"hop_median_s": 1.3, "hop_lost": 0}, [3.4]),
        ("source", {"source_rows_per_s": 60000}, []),
    ]
    assert history[0]["machine"] == "2 cores" and history[0]["commit"] == ""


def test_goals_are_judged_against_numbers_and_against_other_figures() -> None:
    summary = {"lag_p50_s": 0.3, "lag_p99_s": 0.3, "hop_lost": 0}
    judged = judge(summary)
    assert judged["lag_p50_s"] == {"figure": "lag_p50_s", "goal": "< 0.2 s", "met": False}
    assert judged["lag_p99_s"]["met"] is True
    assert judged["hop_lost"] == {"figure": "hop_lost", "goal": "= 0", "met": True}
    assert "lag_p99_below_debezium" not in judged  # Debezium's p99 not measured
    summary["debezium_lag_p99_s"] = 0.5
    assert judge(summary)["lag_p99_below_debezium"]["met"] is True
    summary["debezium_lag_p99_s"] = 0.25
    assert judge(summary)["lag_p99_below_debezium"] == {
        "figure": "lag_p99_s",
        "goal": "< Debezium's p99",
        "met": False,
    }


def test_every_goal_holds_a_declared_figure_and_has_its_own_id() -> None:
    assert all(goal.key in FIGURE for goal in GOALS)
    assert len({goal.id for goal in GOALS}) == len(GOALS)
    assert len({figure.key for figure in FIGURES}) == len(FIGURES)
    assert {figure.benchmark for figure in FIGURES} == set(BENCHMARKS)


def test_the_committed_summary_holds_the_goals_its_figures_give() -> None:
    summary = json.loads((ROOT / "bench" / "results" / "summary.json").read_text())
    assert summary["goals"] == judge(summary)


def test_a_result_file_is_replaced_whole(tmp_path: Path) -> None:
    write_result("lag", {"p50_s": 1.5, "old": True}, tmp_path)
    path = write_result("lag", {"p50_s": 0.9}, tmp_path)
    assert path == tmp_path / "lag.json"
    assert json.loads(path.read_text()) == {"p50_s": 0.9}
    assert not path.with_suffix(".json.tmp").exists()


def test_figures_print_as_the_readme_shows_them() -> None:
    assert [fmt(41623), fmt(0.6834), fmt(18.24), fmt(1523.6), fmt(None)] == [
        "41,623",
        "0.683",
        "18.24",
        "1,524",
        "—",
    ]
    assert [shown(1275289), shown(18.7), shown(0.262), shown(723.0), shown(0), shown(None)] == [
        "1,275,289",
        "18.7",
        "0.262",
        "723",
        "0",
        "—",
    ]


def test_the_summary_table_names_figures_and_says_which_goals_are_met() -> None:
    summary = {"lag_p50_s": 1.2, "memcached_invalidations_per_s": 25000, "machine": "2 CPUs"}
    summary["new_figure"] = 7
    summary["goals"] = judge(summary)
    assert rows(summary) == [
        ["memcached invalidations (/s)", 25000, "≥ 20,000/s", "met"],
        ["lag p50 at half that rate, Version Stream (s)", 1.2, "< 0.2 s", "missed"],
        ["new_figure", 7, "—", ""],
    ]


def test_the_goals_line_names_the_machine_each_benchmark_ran_on(tmp_path: Path) -> None:
    summary = {"lag_p50_s": 1.2, "memcached_invalidations_per_s": 25000, "machine": "m2"}
    (tmp_path / "lag.json").write_text(json.dumps({"machine": "m2"}), encoding="utf-8")
    (tmp_path / "sinks.json").write_text(json.dumps({"machine": "m1"}), encoding="utf-8")
    line = readme_figures.machines_line(summary, tmp_path)
    assert line == "Machines: m1 (`bench-sinks`); m2 (`bench-lag`)."
    (tmp_path / "sinks.json").write_text(json.dumps({"machine": "m2"}), encoding="utf-8")
    assert readme_figures.machines_line(summary, tmp_path) == "Machine: m2."


def test_load_averages_are_read_from_every_form_a_result_file_has_used() -> None:
    assert loads_of({"load_average": [0.5, 0.4, 0.9]}) == [0.5]
    assert loads_of({"load_before": [0.27, 1, 1], "load_after": [3.52, 2, 2]}) == [0.27, 3.52]
    assert loads_of({"load_averages": [[1.0, 0, 0], [1.5, 0, 0]]}) == [1.0, 1.5]
    assert loads_of({"load_average_before": [2.6, 0, 0], "load_average_between": [2.2, 0, 0],
                     "load_average_after": [2.6, 0, 0]}) == [2.6, 2.2, 2.6]  # fmt: skip
    assert entries_of({"machine": "m"}, Path("/nonexistent"), "2026-01-01") == []


def test_the_history_read_from_git_names_each_run_by_its_benchmark_and_commit() -> None:
    entries = from_git()
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert entries or shallow == "true", "the repository's history of bench/results/summary.json"
    for entry in entries:
        assert entry["benchmark"] in BENCHMARKS and len(entry["date"]) == 10 and entry["commit"]
        assert all(FIGURE[key].benchmark == entry["benchmark"] for key in entry["figures"])


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    """README.md, docs/benchmarks.md and bench/results as they are committed, in `tmp_path`."""
    shutil.copytree(ROOT / "bench" / "results", tmp_path / "bench" / "results")
    (tmp_path / "docs").mkdir()
    for name in readme_figures.DOCUMENTS:
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_committed_figures_match_the_results(docs_copy: Path) -> None:
    assert readme_figures.main(["--check", "--root", str(docs_copy)]) == 0


def test_a_hand_edited_figure_fails_the_check_and_write_restores_it(
    docs_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = docs_copy / "README.md"
    committed = readme.read_text()
    figure = shown(json.loads((ROOT / "bench/results/summary.json").read_text())["hop_median_s"])
    assert f"| {figure} s |" in committed
    readme.write_text(committed.replace(f"| {figure} s |", "| 0.5 s |"))
    assert readme_figures.main(["--check", "--root", str(docs_copy)]) == 1
    assert "README.md: figures block(s) readme differ" in capsys.readouterr().err
    assert readme_figures.main(["--write", "--root", str(docs_copy)]) == 0
    assert readme.read_text() == committed


def test_a_new_result_makes_the_committed_figures_stale(docs_copy: Path) -> None:
    summary_path = docs_copy / "bench" / "results" / "summary.json"
    merge_summary({"hop_median_s": 7.5}, summary_path)
    assert readme_figures.main(["--check", "--root", str(docs_copy)]) == 1
    assert readme_figures.main(["--write", "--root", str(docs_copy)]) == 0
    text = (docs_copy / "README.md").read_text()
    assert "| hop time, median of 5 splits and 5 merges | 7.5 s | < 5 s | missed |" in text


def test_text_outside_the_markers_is_kept_and_an_unknown_block_is_refused() -> None:
    text = "before\n<!-- figures:readme -->\nstale\n<!-- /figures -->\nafter\n"
    fresh = readme_figures.rewrite(text)
    assert fresh.startswith("before\n<!-- figures:readme -->\n| figure |")
    assert fresh.endswith("<!-- /figures -->\nafter\n")
    with pytest.raises(SystemExit, match="unknown figures block 'nonsense'"):
        readme_figures.rewrite("<!-- figures:nonsense -->\n<!-- /figures -->\n")


def test_the_fast_lane_is_held_to_50_ms_and_to_twice_debezium_at_10_ms() -> None:
    summary = {"invalidation_lag_p99_s": 0.03, "debezium_fast_lag_p99_x2": 0.024}
    judged = judge(summary)
    assert judged["invalidation_lag_p99_s"]["met"] is True
    assert judged["invalidation_p99_within_twice_debezium_fast"] == {
        "figure": "invalidation_lag_p99_s",
        "goal": "≤ twice Debezium's p99 at poll.interval.ms=10",
        "met": False,
    }
    summary["debezium_fast_lag_p99_x2"] = 0.03
    assert judge(summary)["invalidation_p99_within_twice_debezium_fast"]["met"] is True
