"""Reading progress reports: the status file the streaming job really writes, and bad ones."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from updatestream_jobs.progress_tracker import ProgressTracker
from updatestream_operator.reconciler.models import ReportedHop
from updatestream_operator.reconciler.progress_reader import (
    ProgressError,
    loads_progress,
    parse_progress,
)

from updatestream.binlog.events import ChangeEvent
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken


def _event(shard: str, op: str, ts: int, seq: int) -> ChangeEvent:
    token = EventToken.from_json({"ts": ts, "shard": shard, "pos": f"0-1-{seq}"})
    return ChangeEvent(
        keyspace="commerce",
        shard=shard,
        op=op,  # type: ignore[arg-type]
        table=None if op == "heartbeat" else "orders",
        pk=None if op == "heartbeat" else '{"id":1}',
        keyspace_id=None,
        before=None,
        after=None,
        token=token.dumps(),
        timestamp=ts,
        gtid=f"0-1-{seq}",
        tx_index=0,
    )


def test_the_jobs_own_status_file_is_read(tmp_path: Path) -> None:
    status_file = tmp_path / "status.json"
    tracker = ProgressTracker("orders", "-", status_file=status_file, clock=lambda: 1_000.0)
    events = [
        _event("-80", "insert", 990, 5),
        _event("-80", "update", 991, 6),
        _event("80-", "insert", 995, 9),
        _event("80-", "heartbeat", 999, 9),
    ]
    list(tracker.observe(events))
    tracker.finish_batch(0)

    progress = loads_progress(status_file.read_text(), launch_id=3, source=str(status_file))
    assert progress.launch_id == 3
    left, right = progress.shards[KeyRange.parse("-80")], progress.shards[KeyRange.parse("80-")]
    assert left.token is not None and str(left.token.position) == "0-1-6"
    assert left.events == {"insert": 1, "update": 1}
    assert right.events == {"insert": 1}  # heartbeats are not changes
    assert left.lag_seconds == 9.0
    assert right.lag_seconds == 0.0
    assert progress.updated_at == 1_000.0


HOP: dict[str, Any] = {
    "fromMap": "-80,80-",
    "toMap": "-40,40-80,80-",
    "from": ["-80"],
    "to": ["-40", "40-80"],
    "servingChangedAt": 1_000,
    "detectedAt": 1_002.5,
    "completedAt": 1_004.0,
    "durationSeconds": 4.0,
    "duplicatesDropped": 7,
}

GOOD: dict[str, Any] = {
    "shards": {"-80": {"token": {"ts": 5, "shard": "-80", "pos": "0-1-1"}, "lagSeconds": 1}},
    "duplicates": {"hop": 3},
}


@pytest.mark.parametrize(
    ("report", "words"),
    [
        ([], "must be a JSON object"),
        ({"shards": 5}, "shards: Input should be a valid dictionary"),
        ({"shards": [{"token": None}]}, "shards: Input should be a valid dictionary"),
        ({"shards": {"-80": 7}}, "shards.-80: Input should be a valid dictionary"),
        ({"shards": {"-80": {"token": {"ts": "x"}}}}, "shards.-80.token: not an Event Token"),
        ({"shards": {"-80": {"token": 12}}}, "shards.-80.token: an Event Token must be"),
        ({"shards": {"-80": {"lagSeconds": "slow"}}}, "shards.-80.lagSeconds"),
        ({"shards": {"-80": {"lagSeconds": -1}}}, "shards.-80.lagSeconds"),
        ({"shards": {"-80": {"byOp": {"insert": -1}}}}, "shards.-80.byOp.insert"),
        ({"duplicates": {"hop": "many"}}, "duplicates.hop"),
        ({"shardMap": 80}, "shardMap: must be a shard map"),
        ({"shardMap": "-80,70-"}, "shardMap: not a shard map"),
        ({"hops": {"toMap": "-"}}, "hops: Input should be a valid list"),
        ({"hops": ["-80"]}, "hops.0: Input should be a valid dictionary"),
        ({"hops": [{"toMap": "-40,40-"}]}, "hops.0.fromMap: Field required"),
        ({"hops": [{**HOP, "to": "-40"}]}, "hops.0.to: Input should be a valid list"),
        (
            {"hops": [{**HOP, "from": ["zz"]}]},
            "hops.0.from.0: key range 'zz' must have",
        ),
        ({"hops": [HOP, {**HOP, "completedAt": "soon"}]}, "hops.1.completedAt"),
        ({"hops": [{**HOP, "detectedAt": float("nan")}]}, "hops.0.detectedAt: must be a finite"),
        ({"hops": [{**HOP, "duplicatesDropped": -2}]}, "hops.0.duplicatesDropped"),
        ({"hops": [{**HOP, "duplicatesDropped": True}]}, "hops.0.duplicatesDropped"),
    ],
)
def test_malformed_reports_are_refused_naming_the_field(report: Any, words: str) -> None:
    with pytest.raises(ProgressError, match=re.escape(words)):
        parse_progress(report, launch_id=1)


def test_text_tokens_and_unknown_fields() -> None:
    token = EventToken.from_json({"ts": 5, "shard": "80-", "pos": "0-2-4"})
    report = {
        "shards": {"80-": {"token": token.dumps(), "lagSeconds": 2, "future": True}},
        "error": "binlog purged",
        "somethingNew": 1,
    }
    progress = parse_progress(report, launch_id=None)
    assert progress.shards[KeyRange.parse("80-")].token == token
    assert progress.shards[KeyRange.parse("80-")].lag_seconds == 2.0
    assert progress.error == "binlog purged"
    assert parse_progress(GOOD, launch_id=1).duplicates == {"hop": 3}


def test_text_that_is_not_json_names_its_source() -> None:
    with pytest.raises(ProgressError, match="ConfigMap ns/x-progress is not JSON"):
        loads_progress("{half", launch_id=1, source="ConfigMap ns/x-progress")
    assert json.loads(json.dumps(GOOD))  # the good report is plain JSON


def test_a_job_that_hops_in_place_reports_its_map_and_hops() -> None:
    in_flight = {
        "from_map": "-40,40-80,80-",
        "to_map": "-40,40-80,80-c0,c0-",
        "from": ["80-"],
        "to": ["80-c0", "c0-"],
        "serving_changed_at": None,
        "detected_at": 1_010,
        "completed_at": None,
        "duration_seconds": None,
        "somethingNew": {"x": 1},
    }
    report = {
        **GOOD,
        "phase": "hopping",
        "shardMap": "-40,40-80,80-",
        "hops": [{**HOP, "from": ["00-80"]}, in_flight],
    }
    progress = parse_progress(report, launch_id=2)
    assert progress.phase == "hopping"
    assert str(progress.shard_map) == "-40,40-80,80-"
    done, flying = progress.hops
    assert done == ReportedHop(
        from_map="-80,80-",
        to_map="-40,40-80,80-",
        from_shards=("-80",),  # canonical spelling
        to_shards=("-40", "40-80"),
        detected_at=1_002.5,
        serving_changed_at=1_000.0,
        completed_at=1_004.0,
        duration_seconds=4.0,
        duplicates_dropped=7,
    )
    assert done.completed and not flying.completed
    assert (tuple(map(str, flying.to_shards)), flying.detected_at, flying.duplicates_dropped) == (
        ("80-c0", "c0-"),
        1_010.0,
        0,
    )


def test_a_report_without_hop_fields_and_a_map_out_of_key_order() -> None:
    plain = parse_progress(GOOD, launch_id=1)
    assert (plain.shard_map, plain.hops, plain.phase) == (None, (), None)
    shuffled = parse_progress({**GOOD, "shardMap": "80-,-80", "hops": []}, launch_id=1)
    assert str(shuffled.shard_map) == "-80,80-"  # key order
