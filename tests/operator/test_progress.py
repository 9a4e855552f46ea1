"""Reading progress reports: the status file the streaming job really writes, and bad ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from updatestream_jobs.events import ChangeEvent
from updatestream_jobs.progress import ProgressTracker
from updatestream_operator.progress import ProgressError, loads_progress, parse_progress

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
    left, right = progress.shards["-80"], progress.shards["80-"]
    assert left.token is not None and str(left.token.position) == "0-1-6"
    assert left.events == {"insert": 1, "update": 1}
    assert right.events == {"insert": 1}  # heartbeats are not changes
    assert left.lag_seconds == 9.0
    assert right.lag_seconds == 0.0
    assert progress.updated_at == 1_000.0


GOOD: dict[str, Any] = {
    "shards": {"-80": {"token": {"ts": 5, "shard": "-80", "pos": "0-1-1"}, "lagSeconds": 1}},
    "duplicates": {"hop": 3},
}


@pytest.mark.parametrize(
    ("report", "words"),
    [
        ([], "must be a JSON object"),
        ({"shards": 5}, "shards must be an object or a list"),
        ({"shards": [{"token": None}]}, "needs a shard name"),
        ({"shards": {"-80": 7}}, "shard -80: progress must be an object"),
        ({"shards": {"-80": {"token": {"ts": "x"}}}}, "shard -80: last token is invalid"),
        ({"shards": {"-80": {"token": 12}}}, "last token must be JSON text or an object"),
        ({"shards": {"-80": {"lagSeconds": "slow"}}}, "lag must be a number"),
        ({"shards": {"-80": {"byOp": {"insert": -1}}}}, "shards.-80.byOp.insert"),
        ({"duplicates": {"hop": "many"}}, "duplicates.hop"),
    ],
)
def test_malformed_reports_are_refused_naming_the_field(report: Any, words: str) -> None:
    with pytest.raises(ProgressError, match=words.replace(".", r"\.")):
        parse_progress(report, launch_id=1)


def test_reports_as_lists_with_text_tokens_and_unknown_fields() -> None:
    token = EventToken.from_json({"ts": 5, "shard": "80-", "pos": "0-2-4"})
    report = {
        "shards": [{"shard": "80-", "token": token.dumps(), "lag": 2, "future": True}],
        "error": "binlog purged",
        "somethingNew": 1,
    }
    progress = parse_progress(report, launch_id=None)
    assert progress.shards["80-"].token == token
    assert progress.shards["80-"].lag_seconds == 2.0
    assert progress.error == "binlog purged"
    assert parse_progress(GOOD, launch_id=1).duplicates == {"hop": 3}


def test_text_that_is_not_json_names_its_source() -> None:
    with pytest.raises(ProgressError, match="ConfigMap ns/x-progress is not JSON"):
        loads_progress("{half", launch_id=1, source="ConfigMap ns/x-progress")
    assert json.loads(json.dumps(GOOD))  # the good report is plain JSON
