"""Every benchmark updates one shared summary file without dropping the others' figures."""

import json
from pathlib import Path

from bench.report import fmt, write_result
from bench.show_summary import rows
from bench.summary import merge_summary


def test_merge_keeps_other_benchmarks_keys_and_overwrites_its_own(tmp_path: Path) -> None:
    path = tmp_path / "results" / "summary.json"
    merge_summary({"source_rows_per_s": 1000, "machine": "2 cores"}, path)
    merge_summary({"source_rows_per_s": 2000, "memcached_invalidations_per_s": 30000}, path)
    assert json.loads(path.read_text()) == {
        "machine": "2 cores",
        "memcached_invalidations_per_s": 30000,
        "source_rows_per_s": 2000,
    }
    assert not path.with_suffix(".json.tmp").exists()


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


def test_the_summary_table_names_figures_and_says_which_goals_are_met() -> None:
    summary = {"lag_p50_s": 1.2, "memcached_invalidations_per_s": 25000, "machine": "2 CPUs"}
    summary["new_figure"] = 7
    assert rows(summary) == [
        ["memcached invalidations/s", 25000, "≥ 20,000", "met"],
        ["lag p50 at 50% load, Version Stream (s)", 1.2, "< 1", "missed"],
        ["new_figure", 7, "—", ""],
    ]
