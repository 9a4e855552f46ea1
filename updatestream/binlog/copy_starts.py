"""Where a destination's binlog begins to hold every transaction of a source, as real Vitess
leaves it.

A Reshard's target copies its source's rows table by table (rows written without one source
transaction each), then its vplayer applies every later source transaction, one marked copy
each. The position where that running phase starts is the first position from which the
target's binlog holds each of the source's transactions: a stream whose source was retired
can read its changes after that position from the target, and nothing before it.

Real Vitess records that position nowhere a query can reach after the workflow ends: its
`_vt.vreplication` row has no start column, and `Reshard complete` deletes the row. The
target's binlog still holds it: the `_vt.vreplication` update that first sets a workflow's
state to `Running` (from `Copying`, or for a reverse workflow from `Stopped`) carries the `pos`
the running phase starts at. `scan_copy_starts` reads the binlog from its first file for these
updates; a binlog whose first file was purged answers nothing (the start may be gone with it).

It also keeps where in the target's own binlog each running phase began, and how far the target
had copied each source by then (`CopyStart`): everything before is copy-phase rows, which carry
no marker. A stream that already delivered what they hold starts reading the target there
(`floor`), instead of taking those rows for changes it cannot place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent
from pymysqlreplication.row_event import UpdateRowsEvent

from updatestream.binlog.session import (
    ShardSession,
    advance,
    connection_settings,
    gtid_of,
    server_id,
)
from updatestream.binlog.vreplication import (
    VREPLICATION_TABLE,
    VT_SCHEMA,
    column_text,
    decode_position,
    source_fields,
)
from updatestream.core.gtid import GTIDPosition, position_contains
from updatestream.core.keyrange import KeyRange

RUNNING = "Running"


@dataclass(frozen=True)
class CopyStart:
    """One source's running phase on a target: from `source` on (a source position) the
    target's binlog holds every transaction of it; `target` is the target's own position just
    after the phase began, when the target had copied each source up to `reached`."""

    source: GTIDPosition
    target: GTIDPosition
    reached: Mapping[str, GTIDPosition]


def floor(
    starts: Mapping[str, CopyStart], delivered: Mapping[str, GTIDPosition]
) -> GTIDPosition | None:
    """Where a stream that delivered each source up to `delivered` can start reading the
    target without missing a copy it needs: after the last of those sources' running phases
    began, when every source it had copied by then was delivered that far; else None."""
    wanted = [starts[name] for name in delivered if name in starts]
    if not wanted:
        return None
    last = wanted[0]
    for start in wanted[1:]:
        if position_contains(start.target, last.target):
            last = start
    for name, position in delivered.items():
        reached = last.reached.get(name)
        if reached is not None and not position_contains(position, reached):
            return None
    return last.target


def scan_copy_starts(session: ShardSession) -> dict[str, CopyStart]:
    """Source shard -> its `CopyStart` on this shard (the first `Running` state of each
    workflow copying from it; a later workflow from the same source wins). Empty when the
    binlog's first file was purged or nothing copied here."""
    files = session.binlog_files()
    if not files:
        return {}
    first = session.file_start(files[0][0])
    if not first.is_empty():
        return {}
    stream = BinLogStreamReader(
        connection_settings=connection_settings(session.endpoint, session.config),
        server_id=server_id(),
        log_file=files[0][0],
        log_pos=4,
        resume_stream=True,
        blocking=False,
        is_mariadb=False,  # a positioned read from the first file (see start_positions)
        only_events=[GtidEvent, MariadbGtidEvent, UpdateRowsEvent],
        only_schemas=[VT_SCHEMA],
        only_tables=[VREPLICATION_TABLE],
        enable_logging=False,
    )
    try:
        return _starts(stream, first, session)
    finally:
        stream.close()


def _starts(
    events: Iterable[Any], position: GTIDPosition, session: ShardSession
) -> dict[str, CopyStart]:
    """`scan_copy_starts` over `events`, read from the binlog's start at `position`."""
    found: dict[str, CopyStart] = {}
    copied: dict[str, GTIDPosition] = {}  # source -> the last position copied of it
    started: set[tuple[str, str]] = set()  # (source shard, workflow) seen running
    for event in events:
        if isinstance(event, GtidEvent | MariadbGtidEvent):
            position = advance(position, gtid_of(event, session.flavor)[2])
            continue
        for row in event.rows:
            before, after = row["before_values"], row["after_values"]
            if not after.get("pos"):
                continue
            source = KeyRange.parse(source_fields(column_text(after.get("source")))[1]).name
            copied[source] = decode_position(after["pos"], session.flavor)
            running = column_text(after.get("state")) == RUNNING
            if not running or column_text(before.get("state")) == RUNNING:
                continue
            workflow = column_text(after.get("workflow"))
            if (source, workflow) not in started:
                started.add((source, workflow))
                found[source] = CopyStart(copied[source], position, dict(copied))
    return found
