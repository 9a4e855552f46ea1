"""docs' blocks of `bench-vitess-peers`, rendered from a result of the shape the bench writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.doc_tables import vitess_peers, vitess_peers_line
from bench.readme_figures import render
from bench.vitess_lag import FAST_LANE, lag_goal


def reader(starts: list[str], lost: int, duplicates: int) -> dict[str, Any]:
    return {"starts": starts, "committed": 100, "lost": lost, "duplicates": duplicates,
            "unmatched": 0}  # fmt: skip


def result() -> dict[str, Any]:
    readers = {"updatestream": {"p50_s": 0.4, "p99_s": 0.9}, "vstream": {"p50_s": 0.01,
               "p99_s": 0.05}, FAST_LANE: {"p50_s": 0.02, "p99_s": 0.08}}  # fmt: skip
    goal = lag_goal(readers, {"triggerExecution": 0.3})
    lag = {name: {"events": 10, "missing": 0, "max_s": 1.0, **f} for name, f in readers.items()}
    failed = "failed: shard provided in VGTID, -80, not found | retried"
    return {
        "rate_rows_per_s": 120.0,
        "load_average_before": [1.0, 1, 1], "load_average_between": [2.0, 1, 1],
        "load_average_after": [3.0, 1, 1],
        "readers": {"debezium": "3.5.0.Final"},
        "cases": {"c": {"what": "stopped ...", "readers": {
            "updatestream": reader(["resumed", "resumed"], 0, 0),
            "vstream": reader([failed, failed], 60, 0),
        }}},
        "lag": {"rate_rows_per_s": 100.0, "committed_rows_per_s": 98, "seconds": 60.0,
                "trigger_seconds": 0.1, "readers": lag, "goal": goal},
    }  # fmt: skip


def test_the_goal_is_our_p99_within_the_vstream_p99_plus_the_cycle() -> None:
    goal = lag_goal({"updatestream": {"p99_s": 0.9}, "vstream": {"p99_s": 0.05}},
                    {"triggerExecution": 0.3})  # fmt: skip
    assert (goal["bound_s"], goal["met"]) == (0.35, False)
    assert lag_goal({"updatestream": {"p99_s": 0.3}, "vstream": {"p99_s": 0.05}},
                    {"triggerExecution": 0.3})["met"]  # fmt: skip
    assert lag_goal({"updatestream": {"p99_s": 0.3}}, {})["met"] is None
    both = lag_goal({"updatestream": {"p99_s": 0.9}, FAST_LANE: {"p99_s": 0.08},
                     "vstream": {"p99_s": 0.05}}, {"triggerExecution": 0.3})  # fmt: skip
    assert (both["met"], both["fastlane_met"], both["fastlane_p99_s"]) == (False, True, 0.08)
    assert goal["fastlane_met"] is None  # not measured


def test_the_table_and_the_line_name_every_reader_and_escape_pipes() -> None:
    text = vitess_peers(result())
    assert "| c | vstream | failed: shard provided in VGTID, -80, not found \\| retried" in text
    assert (
        "(0.35 s): the console sink (durable) 0.9 s, missed; the memcached fast lane's "
        "invalidations 0.08 s, **met**" in text
    )
    assert f"| {FAST_LANE} | 10 | 0 | 0.02 | 0.08 |" in text
    line = vitess_peers_line(result())
    assert line.startswith("Stopped until `Reshard complete`, then started: updatestream resumed")
    assert "vstream 0.05 s" in line


def test_a_block_whose_results_are_missing_says_so(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{}")
    assert render("vitess_peers:line", tmp_path).startswith("Not measured yet")
