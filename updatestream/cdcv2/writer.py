"""Write a change stream as CDCv2 statements, one file per batch, with true progress statements.

The writer holds back every update until its time is complete, then writes it consolidated (one
``(data, time)`` with the summed ``diff``) together with a progress statement for the times that
completed. So every statement written is true of the final history, and a reader can recover the
history from the files in any order with any duplication.

**When is a time complete?** Each shard reports its changes in its binlog order; a shard's
*mark* is the largest timestamp seen from it (change or heartbeat; the source sends one heartbeat
per shard per batch carrying the shard's end token, so idle shards advance too). The rule,
conservative on purpose:

* a shard whose mark is ``M`` has delivered every change with time ``< M`` (changes at ``M``
  itself may still come: a second holds many transactions);
* the stream's low watermark is ``min`` over the shards present in the batch of their marks,
  minus ``lateness`` seconds, and never moves back. A shard absent from a batch had nothing new
  when the batch was planned (its last heartbeat is recent), or a hop retired it: either way it
  does not hold the watermark back. The source keeps that true: a shard it still reads but
  holds at an older token (a hop batch keeps the unchanged shards at theirs, which after a
  stopped stream is the time it stopped) gets a heartbeat at that token in the batch;
* times below the watermark are complete: their updates and a progress statement
  ``[previous watermark, watermark)`` with their counts are written.

The first rule assumes a shard's timestamps do not go backwards by more than ``lateness``.
MariaDB stamps a transaction with the start of its statements, so a long transaction committing
after a shorter, later one can break it, and a shard merged from two sources interleaves their
source timestamps. A change whose time is already below the watermark is therefore never dropped:
it is written at the watermark (the earliest time still open) and counted as *late*; raise
``lateness`` if that count grows.

Each event is taken once: identities of events at times not yet complete are remembered, so a
duplicate (a hop overlap, always at or above the restart point and thus above the watermark) is
skipped. A replayed batch id recomputes its file from the state left by the batch before it, so
it rewrites the same file with the same content and leaves the same state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatestream.cdcv2.format import (
    BATCH_SUFFIX,
    PARQUET_SUFFIX,
    CDCv2FormatError,
    Progress,
    batch_file_name,
    batch_id_of,
    canonical,
    encode,
    encode_parquet,
    encode_update,
    write_atomically,
    write_bytes_atomically,
)

STATE_DIR = "_state"
KEEP_STATES = 3


class CDCv2WriteError(CDCv2FormatError):
    """The stream directory is not in a state the writer can continue from."""


@dataclass(frozen=True, slots=True)
class Change:
    """One source change: its identity, shard, time and the updates it makes."""

    identity: str
    shard: str
    time: int
    updates: tuple[tuple[Any, int], ...]  # (data, diff)


@dataclass(frozen=True, slots=True)
class BatchReport:
    taken: int  # changes applied
    duplicates: int  # changes skipped as already taken
    late: int  # changes written at the watermark because their time had completed
    updates: int  # update statements written into this batch's file
    frontier: int  # the watermark after this batch


@dataclass
class _State:
    frontier: int = 0
    marks: dict[str, int] = field(default_factory=dict)
    pending: dict[tuple[str, int], int] = field(default_factory=dict)  # (data text, time) -> diff
    seen: dict[str, int] = field(default_factory=dict)  # identity -> time
    late: int = 0

    def to_json(self, batch_id: int) -> str:
        return json.dumps(
            {
                "batch_id": batch_id,
                "frontier": self.frontier,
                "marks": dict(sorted(self.marks.items())),
                "pending": sorted([k, t, d] for (k, t), d in self.pending.items()),
                "seen": sorted([i, t] for i, t in self.seen.items()),
                "late": self.late,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> _State:
        obj = json.loads(text)
        return cls(
            frontier=int(obj["frontier"]),
            marks={str(s): int(t) for s, t in obj["marks"].items()},
            pending={(str(k), int(t)): int(d) for k, t, d in obj["pending"]},
            seen={str(i): int(t) for i, t in obj["seen"]},
            late=int(obj["late"]),
        )


class StreamWriter:
    """Writes one stream directory; see the module docstring for the rules."""

    def __init__(self, directory: Path, *, lateness: int = 0, file_format: str = "jsonl") -> None:
        if lateness < 0:
            raise ValueError(f"lateness must be >= 0 seconds, got {lateness}")
        if file_format not in ("jsonl", "parquet"):
            raise ValueError(f"file format must be 'jsonl' or 'parquet', got {file_format!r}")
        self.directory = directory
        self.lateness = lateness
        self.file_format = file_format

    @property
    def state_dir(self) -> Path:
        return self.directory / STATE_DIR

    def _state_path(self, batch_id: int) -> Path:
        return self.state_dir / batch_file_name(batch_id).replace(BATCH_SUFFIX, ".json")

    def _state_ids(self) -> list[int]:
        if not self.state_dir.is_dir():
            return []
        ids = (batch_id_of(p.with_suffix(".jsonl")) for p in self.state_dir.glob("batch-*.json"))
        return sorted(i for i in ids if i is not None)

    def _batch_ids(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        ids = (batch_id_of(p) for p in self.directory.iterdir())
        return sorted(i for i in ids if i is not None)

    def _load_state(self, batch_id: int) -> _State:
        """The state after the latest batch before ``batch_id``."""
        later = [i for i in self._batch_ids() + self._state_ids() if i > batch_id]
        if later:
            raise CDCv2WriteError(
                f"CDCv2 directory {self.directory} already holds batch {max(later)}, after "
                f"batch {batch_id}: the stream was restarted from another checkpoint; give the "
                "restarted stream a new path"
            )
        earlier_states = [i for i in self._state_ids() if i < batch_id]
        if earlier_states:
            text = self._state_path(earlier_states[-1]).read_text(encoding="utf-8")
            parts = json.loads(text).get("parts")
            if parts is not None:
                raise CDCv2WriteError(
                    f"CDCv2 directory {self.directory} was written by {parts} parallel "
                    "writers, this stream has one: what they hold back is in their state; "
                    "keep the stream's writeFrom and writePartitions for this path, or give it "
                    "a new path"
                )
            return _State.from_json(text)
        earlier_files = [i for i in self._batch_ids() if i < batch_id]
        if earlier_files:
            raise CDCv2WriteError(
                f"CDCv2 directory {self.directory} holds batch {earlier_files[-1]} but no writer "
                f"state before batch {batch_id} (in {STATE_DIR}/); it cannot continue the "
                "stream truthfully; give the stream a new path"
            )
        return _State()

    def write_batch(
        self, batch_id: int, changes: Iterable[Change], heartbeats: Mapping[str, int]
    ) -> BatchReport:
        """Take one batch: ``changes`` and each shard's heartbeat timestamp in it."""
        state = self._load_state(batch_id)
        present: dict[str, int] = {}
        taken = duplicates = late = 0

        def mark(shard: str, time: int) -> None:
            present[shard] = max(present.get(shard, state.marks.get(shard, 0)), time)

        for change in changes:
            mark(change.shard, change.time)
            if change.identity in state.seen:
                duplicates += 1
                continue
            time = change.time
            if time < state.frontier:
                time = state.frontier
                late += 1
            state.seen[change.identity] = time
            taken += 1
            for data, diff in change.updates:
                key = (canonical(data), time)
                state.pending[key] = state.pending.get(key, 0) + diff
        for shard, time in heartbeats.items():
            mark(shard, time)

        old = state.frontier
        if present:
            state.marks = present
            state.frontier = max(old, min(present.values()) - self.lateness)
        new = state.frontier
        done = sorted((t, k, d) for (k, t), d in state.pending.items() if t < new and d != 0)
        counts: dict[int, int] = {}
        for t, _, _ in done:
            counts[t] = counts.get(t, 0) + 1
        progress = Progress(old, new, tuple(sorted(counts.items()))) if new > old else None
        state.pending = {key: d for key, d in state.pending.items() if key[1] >= new}
        state.seen = {i: t for i, t in state.seen.items() if t >= new}
        state.late += late

        write_atomically(self._state_path(batch_id), [state.to_json(batch_id)])
        if self.file_format == "parquet":
            data = encode_parquet(((k, t, d) for t, k, d in done), progress)
            write_bytes_atomically(self.directory / batch_file_name(batch_id, PARQUET_SUFFIX), data)
        else:
            lines = [encode_update(k, t, d) for t, k, d in done]
            if progress is not None:
                lines.append(encode(progress))
            write_atomically(self.directory / batch_file_name(batch_id), lines)
        for old_id in self._state_ids()[:-KEEP_STATES]:
            self._state_path(old_id).unlink(missing_ok=True)
        return BatchReport(taken, duplicates, late, len(done), new)
