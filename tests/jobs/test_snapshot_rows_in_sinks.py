"""What each sink does with rows a snapshot read: the starting snapshot's `snapshot` rows and a
snapshot on demand's `reread` rows are the key's state at their token, after every change of
that transaction and before every later one; CDCv2 takes the first as `+1` updates and refuses
the second, saying so, since it cannot know what its collection holds. A row read again at the
position a sink holds it from (a second re-read of a quiet table) is no duplicate delivered."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink, stream_directory
from updatestream_jobs.sinks.sink import BatchContext
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink, records_of

from harness.sink_events import Row, ShardLog
from tests.conftest import MariaDBFixture
from updatestream import spec
from updatestream.binlog.events import ChangeEvent, encode_row
from updatestream.cdcv2 import Collection, read_directory
from updatestream.mirror.changes import collapse
from updatestream.mirror.order import Verdict, classify, order_of

T0 = 1_700_000_000


def existing(log: ShardLog, op: str, timestamp: int, row: Row) -> ChangeEvent:
    """A row read by a snapshot at the shard's current position: `snapshot` or `reread`."""
    (event,) = log.transaction(timestamp, [("insert", "users", None, row)])
    log.seq -= 1  # a read commits nothing: the position stays where it was
    return dataclasses.replace(
        event, op=op, token=log.token(timestamp).dumps(), gtid=log.position, tx_index=0
    )  # type: ignore[arg-type]


def ctx(batch_id: int) -> BatchContext:
    return BatchContext("s", "-", batch_id)


def cdcv2_sink(path: Path) -> CDCv2Sink:
    config = spec.CDCv2Sink.model_validate({"type": "cdcv2", "path": str(path)})
    sink = CDCv2Sink(config)
    sink.open()
    return sink


def collection(path: Path) -> dict[str, dict[str, Row]]:
    found = Collection()
    for completed in read_directory(stream_directory(path, ctx(0))):
        found.apply(completed)
    return found.tables()


def test_cdcv2_writes_the_starting_snapshot_and_refuses_a_re_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = ShardLog("-80", 1)
    log.transaction(T0, [("insert", "users", None, {"id": 1, "visits": 0})])
    rows = [{"id": 1, "visits": 0}, {"id": 2, "visits": 5}]
    sink = cdcv2_sink(tmp_path)
    start = [existing(log, "snapshot", T0, row) for row in rows] + [log.heartbeat(T0)]
    assert sink.write_batch(start, ctx(0)).written == 2
    # a change during the re-read, then the re-read of both rows (one as it was, one changed)
    update = log.transaction(
        T0 + 1, [("update", "users", {"id": 2, "visits": 5}, {"id": 2, "visits": 6})]
    )
    reread = [existing(log, "reread", T0 + 1, {"id": 1, "visits": 0}),
              existing(log, "reread", T0 + 1, {"id": 2, "visits": 6})]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="updatestream_jobs.sinks.cdcv2_sink"):
        first = sink.write_batch([*update, *reread, log.heartbeat(T0 + 1)], ctx(1))
        again = sink.write_batch([*reread, log.heartbeat(T0 + 2)], ctx(2))
        sink.write_batch([log.heartbeat(T0 + 3)], ctx(3))
        sink.write_batch([*reread, log.heartbeat(T0 + 9)], ctx(4))
    assert (first.written, first.skipped, again.written, again.skipped) == (1, 2, 0, 2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # one per re-read: batches 1-2, then batch 4
    assert "refuses the rows a snapshot on demand re-reads (2 in batch 1" in warnings[0]
    assert "start a stream with a snapshot into a new path" in warnings[0]
    assert collection(tmp_path) == {
        "users": {'{"id":1}': {"id": 1, "visits": 0}, '{"id":2}': {"id": 2, "visits": 6}}
    }  # every row once: what the shard holds


def test_a_re_read_row_orders_like_a_snapshot_row_in_the_mirror_and_the_version_stream() -> None:
    log = ShardLog("-80", 1)
    (change,) = log.transaction(T0, [("insert", "users", None, {"id": 1, "visits": 0})])
    reread = existing(log, "reread", T0 + 5, {"id": 1, "visits": 0})
    (later,) = log.transaction(T0 + 5, [("delete", "users", {"id": 1, "visits": 0}, None)])
    assert classify(order_of(reread), order_of(change)) is Verdict.NEWER  # same position
    assert classify(order_of(later), order_of(reread)) is Verdict.NEWER
    assert classify(order_of(reread), order_of(later)) is Verdict.OLDER  # never resurrects
    (record,) = records_of(reread)
    assert record.origin.snapshot and record.data == encode_row({"id": 1, "visits": 0})
    assert records_of(reread)[0].origin != records_of(change)[0].origin


def test_a_row_read_again_at_the_same_position_is_unchanged_not_a_duplicate_in_the_mirror() -> None:
    log = ShardLog("-80", 1)
    (change,) = log.transaction(T0, [("insert", "users", None, {"id": 1, "visits": 0})])
    first = existing(log, "snapshot", T0, {"id": 1, "visits": 0})
    second = existing(log, "reread", T0 + 9, {"id": 1, "visits": 0})  # nothing written since
    assert collapse([change, first, second]).ignored == {"superseded": 1, "unchanged": 1}
    assert collapse([change, change]).ignored == {"equal": 1}  # a change twice: a duplicate


def test_a_row_read_again_at_the_same_position_is_unchanged_not_a_duplicate_in_the_version_stream(
    mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    secret = tmp_path / "vs"
    secret.mkdir()
    (secret / "username").write_text(mariadb_server.admin.username)
    (secret / "password").write_text(mariadb_server.admin.password)
    config = spec.VersionStreamSink.model_validate(
        {
            "type": "versionStream",
            "mysql": {"host": mariadb_server.host, "port": mariadb_server.port},
            "database": "us_snapshot_rows",
            "credentialsSecret": {"name": "vs"},
        }
    )
    sink = VersionStreamSink(config, secrets_dir=tmp_path)
    sink.open()
    log = ShardLog("-80", 1)
    change = log.transaction(T0, [("insert", "users", None, {"id": 1, "visits": 0})])
    read = [existing(log, op, T0 + 1, {"id": 1, "visits": 0}) for op in ("snapshot", "reread")]
    try:
        taken = sink.write_batch([*change, read[0]], ctx(0))
        again = sink.write_batch([read[1]], ctx(1))  # a re-read of the quiet table
        twice = sink.write_batch([*change, read[1]], ctx(2))  # the change again: a duplicate
    finally:
        sink.close()
    assert (taken.written, taken.skipped, taken.duplicates_delivered) == (2, 0, 0)
    assert (again.written, again.skipped, again.duplicates_delivered) == (0, 1, 0)
    assert (twice.written, twice.skipped, twice.duplicates_delivered) == (0, 2, 1)
