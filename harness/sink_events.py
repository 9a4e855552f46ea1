"""Change events for sink tests, built the way the binlog source builds them.

A `ShardLog` plays one shard's binlog: every transaction advances the shard's MariaDB GTID
position, each row becomes one `ChangeEvent` with the shard's Event Token, and `heartbeat` ends
a batch. `copy_to` replays a source transaction on a destination shard as filtered replication
does: a new local GTID, the source timestamp and the source provenance, so the copy has the
identity of the original (a hop duplicate).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from updatestream.binlog.events import ChangeEvent, encode_row
from updatestream.binlog.row_converter import heartbeat
from updatestream.core.gtid import MariaDBPosition
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken, SourceProvenance
from updatestream.core.vindexes.hash import hash_uint64

KEYSPACE = "commerce"
Row = dict[str, Any]


def keyspace_id(row: Row) -> bytes:
    return hash_uint64(int(row["id"]))


def shard_of(row: Row, shards: Sequence[str]) -> str:
    kid = keyspace_id(row)
    return next(s for s in shards if KeyRange.parse(s).contains(kid))


@dataclass
class ShardLog:
    shard: str
    domain: int
    seq: int = 0
    keyspace: str = KEYSPACE
    pk_columns: dict[str, tuple[str, ...]] = field(default_factory=lambda: {"users": ("id",)})

    @property
    def position(self) -> str:
        return f"{self.domain}-{self.domain}-{self.seq}" if self.seq else ""

    def token(self, timestamp: int, source: SourceProvenance | None = None) -> EventToken:
        return EventToken(
            timestamp, self.shard, MariaDBPosition.parse(self.position), source=source
        )

    def transaction(
        self,
        timestamp: int,
        rows: Iterable[tuple[str, str, Row | None, Row | None]],
        source: SourceProvenance | None = None,
        first_index: int = 0,
    ) -> list[ChangeEvent]:
        """One committed transaction: rows are (op, table, before, after)."""
        self.seq += 1
        token = self.token(timestamp, source)
        events = []
        for index, (op, table, before, after) in enumerate(rows, start=first_index):
            image = after if after is not None else before
            assert image is not None
            pk = {c: image[c] for c in self.pk_columns[table]}
            events.append(
                ChangeEvent(
                    keyspace=self.keyspace,
                    shard=self.shard,
                    op=op,  # type: ignore[arg-type]
                    table=table,
                    pk=json.dumps(pk, separators=(",", ":")),
                    keyspace_id=keyspace_id(image).hex(),
                    before=None if before is None else encode_row(before),
                    after=None if after is None else encode_row(after),
                    token=token.dumps(),
                    timestamp=timestamp,
                    gtid=self.position,
                    tx_index=index,
                    source_shard=None if source is None else source.shard,
                    source_gtid=None if source is None else str(source.position),
                    source_timestamp=None if source is None else source.timestamp,
                )
            )
        return events

    def heartbeat(self, timestamp: int) -> ChangeEvent:
        event = heartbeat(self.keyspace, self.token(timestamp))
        # a shard that has committed nothing has no token yet
        return event if self.seq else dataclasses.replace(event, token="")

    def copy_to(self, events: Sequence[ChangeEvent], destination: ShardLog) -> list[ChangeEvent]:
        """The destination's filtered-replication copy of one transaction of this shard."""
        first = events[0]
        source = SourceProvenance(self.shard, MariaDBPosition.parse(first.gtid), first.timestamp)
        return destination.transaction(first.timestamp, _rows(events), source, first.tx_index)

    def split_copy(
        self, events: Sequence[ChangeEvent], destinations: Sequence[ShardLog]
    ) -> dict[str, list[ChangeEvent]]:
        """The copies of one transaction of this shard on the destinations of a split: each
        destination gets the rows of its key range, numbered from 0 as its own binlog does."""
        first = events[0]
        source = SourceProvenance(self.shard, MariaDBPosition.parse(first.gtid), first.timestamp)
        copies: dict[str, list[ChangeEvent]] = {}
        for destination in destinations:
            key_range = KeyRange.parse(destination.shard)
            mine = (e for e in events if key_range.contains(bytes.fromhex(e.keyspace_id or "")))
            rows = _rows(mine)
            if rows:
                copies[destination.shard] = destination.transaction(first.timestamp, rows, source)
        return copies


@dataclass
class SplitTransaction:
    """One transaction of shard -80 and its copies on the destinations of a split."""

    original: list[ChangeEvent]
    copies: dict[str, list[ChangeEvent]]  # by destination shard
    destinations: dict[str, ShardLog]


def split_transaction(timestamp: int = 1_700_000_100) -> SplitTransaction:
    """Inserts of users 2 and 3 on -80, which map to -40 and 40-80 after a split of -80: each
    destination's copy holds one of the rows, numbered from 0 as its own binlog does."""
    source, low, high = ShardLog("-80", 1), ShardLog("-40", 3), ShardLog("40-80", 4)
    original = source.transaction(
        timestamp,
        [("insert", "users", None, {"id": 2, "name": "b"}), ("insert", "users", None, {"id": 3})],
    )
    copies = source.split_copy(original, [low, high])
    return SplitTransaction(original, copies, {"-40": low, "40-80": high})


def _rows(events: Iterable[ChangeEvent]) -> list[tuple[str, str, Row | None, Row | None]]:
    """(op, table, before, after) of each event, as `ShardLog.transaction` takes them."""
    return [
        (
            e.op,
            e.table or "",
            None if e.before is None else json.loads(e.before),
            None if e.after is None else json.loads(e.after),
        )
        for e in events
    ]


def final_rows(events: Iterable[ChangeEvent]) -> dict[str, dict[str, Row]]:
    """Table -> canonical pk JSON -> row, after applying the events in order (no duplicates)."""
    tables: dict[str, dict[str, Row]] = {}
    for event in events:
        if event.op == "heartbeat":
            continue
        assert event.table is not None and event.pk is not None
        rows = tables.setdefault(event.table, {})
        pk = json.loads(event.pk)
        if event.before is not None:
            before = json.loads(event.before)
            rows.pop(canonical({c: before[c] for c in pk}), None)
        if event.after is not None:
            after = json.loads(event.after)
            rows[canonical({c: after[c] for c in pk})] = after
    return tables


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Workload:
    """Batches of events from two shards plus the events a sink should end up reflecting."""

    batches: list[list[ChangeEvent]]
    unique: list[ChangeEvent]  # every distinct event once, in a valid per-key order
    duplicates: int  # events in `batches` that repeat another's identity


class _Builder:
    """Users rows on shards -80 and 80-, the clock, and every distinct event written so far."""

    def __init__(self, start: int) -> None:
        self.logs = {"-80": ShardLog("-80", 1), "80-": ShardLog("80-", 2)}
        self.ts = start
        self.state: dict[int, Row] = {}
        self.unique: list[ChangeEvent] = []

    def tx(self, rows: list[tuple[str, Row | None, Row | None]]) -> list[ChangeEvent]:
        """One transaction on the shard of its first row: (op, before, after) per row."""
        image = rows[0][2] if rows[0][2] is not None else rows[0][1]
        assert image is not None
        log = self.logs[shard_of(image, list(self.logs))]
        events = log.transaction(self.ts, [(op, "users", b, a) for op, b, a in rows])
        self.unique.extend(events)
        return events

    def change(self, uid: int, **values: Any) -> tuple[str, Row | None, Row | None]:
        """An update of one user: `visits` is added to, other columns are set."""
        before = dict(self.state[uid])
        for column, value in values.items():
            self.state[uid][column] = before[column] + value if column == "visits" else value
        return ("update", before, dict(self.state[uid]))

    def heartbeats(self) -> list[ChangeEvent]:
        return [log.heartbeat(self.ts) for log in self.logs.values()]

    def inserts(self, users: int) -> list[ChangeEvent]:
        """Batch 0: inserts, several per second and per transaction."""
        batch: list[ChangeEvent] = []
        for uid in range(1, users + 1):
            self.state[uid] = {"id": uid, "name": f"user{uid}", "visits": 0}
            batch += self.tx([("insert", None, dict(self.state[uid]))])
            self.ts += uid % 2
        return batch + self.heartbeats()

    def updates(self, users: int) -> list[ChangeEvent]:
        """Batch 1: updates, the same row twice within one second."""
        batch: list[ChangeEvent] = []
        for uid in range(1, users + 1, 2):
            batch += self.tx([self.change(uid, visits=1)])
            batch += self.tx([self.change(uid, visits=1)])
        self.ts += 1
        return batch + self.heartbeats()


def two_shard_workload(start: int = 1_700_000_000, users: int = 12) -> Workload:
    """Inserts, updates, deletes and a re-insert over shards -80 and 80-, in four batches; the
    last transaction of -80 is copied to a destination shard -40 and delivered again from there
    (a hop duplicate with provenance) in the last batch."""
    build = _Builder(start)
    batches = [build.inserts(users), build.updates(users)]
    # batch 2: deletes, a delete then re-insert of one row within one second, and last a
    # transaction of -80 updating two rows in the second of the batch's heartbeats
    build.ts += 1
    batch: list[ChangeEvent] = []
    for uid in (4, 3):
        batch += build.tx([("delete", dict(build.state.pop(uid)), None)])
    build.state[3] = {"id": 3, "name": "user3-again", "visits": 0}
    batch += build.tx([("insert", None, dict(build.state[3]))])
    build.ts += 1
    same = [u for u in sorted(build.state) if shard_of({"id": u}, ["-40", "40-"]) == "-40"][:2]
    copied = build.tx([build.change(uid, name=build.state[uid]["name"] + "!") for uid in same])
    batches.append(batch + copied + build.heartbeats())
    # batch 3: the stream hopped from -80 to -40 and restarted at -80's last timestamp, so the
    # copy of the last -80 transaction arrives again from -40 with provenance (a duplicate),
    # then new changes on -40
    dest = ShardLog("-40", 3)
    batch = build.logs["-80"].copy_to(copied, dest)
    build.ts += 1
    _, before, after = build.change(same[0], visits=10)
    new = dest.transaction(build.ts, [("update", "users", before, after)])
    build.unique.extend(new)
    batch += [*new, dest.heartbeat(build.ts + 1), build.logs["80-"].heartbeat(build.ts + 1)]
    batches.append(batch)
    return Workload(batches=batches, unique=build.unique, duplicates=len(copied))
