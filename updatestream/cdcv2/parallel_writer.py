"""Write one CDCv2 stream from many writers at once: parts of the keys, and one progress writer.

The rules are those of :mod:`updatestream.cdcv2.writer` (the same statements come out, only
spread over more files); what changes is who applies them. Every update is routed to one of
``parts`` *part writers* by its datum (`route_of`: equal data, equal part), so the updates
that must be consolidated (one ``(data, time)`` pair, one ``diff``) always meet in the same
part. A batch then runs in three steps:

1. The batch is planned: the watermark before and after it, from the *progress writer*'s state
   before the batch and each shard's mark in it, as the single writer computes them
   (`plan_of`). That needs only the shards' largest timestamps, not the rows, and is a function
   of its inputs: the progress writer (one, the driver) can plan it (`ProgressWriter.plan`),
   or every part alike from the same state and marks (`ProgressWriter.agreed_plan` checks).
2. Every part writer takes its updates of the batch with that plan (`PartWriter.write_batch`):
   skips changes it has taken already (by identity), moves a late change to the earlier
   watermark, holds back what is at or beyond the new one, writes the completed updates to
   ``batch-<id>.part-<part>`` and reports how many it wrote at each time. Parts write at the
   same time, each from its own carry-over state (``_state/part-<part>/``).
3. Once every part has reported, the progress writer writes the batch's progress statement with
   the summed counts (`ProgressWriter.finish`), so a progress statement is only ever written
   after the updates it counts.

A change's updates may fall in different parts (an update of a row: ``-1`` of its before image
and ``+1`` of its after image); each part remembers the change's identity for its own updates,
and the change is counted (taken, duplicate, late) in the part of its first update only.

A replayed batch id recomputes every file from the states left by the batch before it, as the
single writer does; a part's updates are taken in a fixed order (by identity, then time), so
the order in which they reach a part does not change what it writes. Of two copies of one
change in a batch the one at the earlier time is taken (the single writer takes the first in
stream order).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatestream.cdcv2.format import (
    BATCH_SUFFIX,
    PARQUET_SUFFIX,
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
from updatestream.cdcv2.writer import KEEP_STATES, STATE_DIR, BatchReport, CDCv2WriteError, Change

MAX_PARTS = 256


def route_of(data_text: str) -> int:
    """A stable non-negative number of a datum's canonical text: the same in every process
    (Python's own `hash` of text is not), so a datum always goes to the same part."""
    return zlib.crc32(data_text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class PartUpdate:
    """One update of one change, as it travels to its part writer."""

    data: str  # canonical JSON text of the datum
    time: int
    diff: int
    identity: str
    first: bool  # the change's first update: the change is counted where this one goes


def part_updates(change: Change) -> list[PartUpdate]:
    """The updates of `change`, each to be routed by its datum."""
    return [
        PartUpdate(canonical(data), change.time, diff, change.identity, index == 0)
        for index, (data, diff) in enumerate(change.updates)
    ]


@dataclass(frozen=True, slots=True)
class PartReport:
    """What one part writer did with its updates of one batch."""

    part: int
    taken: int
    duplicates: int
    late: int
    counts: dict[int, int]  # time -> update statements written at it
    marks: dict[str, int] = field(default_factory=dict)  # the batch's marks the part planned by
    refused: int = 0  # re-read rows counted by this part (the Spark side sends them to part 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "taken": self.taken,
            "duplicates": self.duplicates,
            "late": self.late,
            "counts": sorted(self.counts.items()),
            "marks": self.marks,
            "refused": self.refused,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PartReport:
        counts = {int(t): int(n) for t, n in obj["counts"]}
        marks = {str(s): int(t) for s, t in obj["marks"].items()}
        part, taken, duplicates, late = (
            int(obj[k]) for k in ("part", "taken", "duplicates", "late")
        )
        return cls(part, taken, duplicates, late, counts, marks, int(obj["refused"]))


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The watermark before a batch and after it (see `ProgressWriter.plan`)."""

    batch_id: int
    before: int
    after: int
    marks: dict[str, int]  # each shard's mark after the batch
    late: int  # late changes of the stream before the batch


def _state_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    ids = (batch_id_of(p.with_suffix(BATCH_SUFFIX)) for p in directory.glob("batch-*.json"))
    return sorted(i for i in ids if i is not None)


def _state_path(directory: Path, batch_id: int) -> Path:
    return directory / batch_file_name(batch_id, ".json")


def _latest_before(directory: Path, batch_id: int) -> dict[str, Any] | None:
    earlier = [i for i in _state_ids(directory) if i < batch_id]
    if not earlier:
        return None
    loaded: dict[str, Any] = json.loads(_state_path(directory, earlier[-1]).read_text("utf-8"))
    return loaded


def _save_state(directory: Path, batch_id: int, state: Mapping[str, Any]) -> None:
    write_atomically(_state_path(directory, batch_id), [json.dumps(state, separators=(",", ":"))])
    for old_id in _state_ids(directory)[:-KEEP_STATES]:
        _state_path(directory, old_id).unlink(missing_ok=True)


def _write_file(
    directory: Path,
    name: tuple[int, int | None],
    file_format: str,
    done: list[tuple[int, str, int]],
    progress: Progress | None,
) -> None:
    """The file of `name` (batch id, part or None): `done` as (time, data text, diff), then
    `progress`; a file with nothing to say is removed rather than written (a replay may find
    one)."""
    batch_id, part = name
    if file_format == "parquet":
        path = directory / batch_file_name(batch_id, PARQUET_SUFFIX, part)
        if done or progress is not None:
            write_bytes_atomically(path, encode_parquet(((k, t, d) for t, k, d in done), progress))
        else:
            path.unlink(missing_ok=True)
        return
    path = directory / batch_file_name(batch_id, BATCH_SUFFIX, part)
    lines = [encode_update(k, t, d) for t, k, d in done]
    if progress is not None:
        lines.append(encode(progress))
    if lines:
        write_atomically(path, lines)
    else:
        path.unlink(missing_ok=True)


class PartWriter:
    """Writes the updates of one part of the keys; see the module docstring."""

    def __init__(self, directory: Path, part: int, *, file_format: str = "jsonl") -> None:
        self.directory = directory
        self.part = part
        self.file_format = file_format
        self.state_dir = directory / STATE_DIR / f"part-{part:03d}"

    def write_batch(self, plan: BatchPlan, updates: Iterable[PartUpdate]) -> PartReport:
        """Take this part's `updates` of batch `plan.batch_id` and write what completed."""
        loaded = _latest_before(self.state_dir, plan.batch_id) or {"pending": [], "seen": []}
        pending = {(str(k), int(t)): int(d) for k, t, d in loaded["pending"]}
        seen = {str(i): int(t) for i, t in loaded["seen"]}
        by_change: dict[str, list[PartUpdate]] = {}
        for update in updates:
            by_change.setdefault(update.identity, []).append(update)
        taken = duplicates = late = 0
        for identity in sorted(by_change):
            copies = by_change[identity]
            firsts = sum(1 for u in copies if u.first)  # how often the change came
            if identity in seen:
                duplicates += firsts
                continue
            time = min(u.time for u in copies)
            chosen = {(u.data, u.diff) for u in copies if u.time == time}
            taken, duplicates = taken + min(firsts, 1), duplicates + max(firsts - 1, 0)
            if time < plan.before:
                time = plan.before
                late += min(firsts, 1)
            seen[identity] = time
            for data, diff in sorted(chosen):
                pending[(data, time)] = pending.get((data, time), 0) + diff
        done = sorted((t, k, d) for (k, t), d in pending.items() if t < plan.after and d != 0)
        counts: dict[int, int] = {}
        for t, _, _ in done:
            counts[t] = counts.get(t, 0) + 1
        state = {
            "batch_id": plan.batch_id,
            "pending": sorted([k, t, d] for (k, t), d in pending.items() if t >= plan.after),
            "seen": sorted([i, t] for i, t in seen.items() if t >= plan.after),
        }
        _save_state(self.state_dir, plan.batch_id, state)
        _write_file(self.directory, (plan.batch_id, self.part), self.file_format, done, None)
        return PartReport(self.part, taken, duplicates, late, counts)


@dataclass(frozen=True)
class WriterState:
    """The progress writer's carry-over after a batch: the watermark, each shard's mark, and
    how many changes came late so far."""

    frontier: int = 0
    marks: dict[str, int] = field(default_factory=dict)
    late: int = 0


def plan_of(
    batch_id: int, state: WriterState, marks: Mapping[str, int], lateness: int
) -> BatchPlan:
    """Batch `batch_id`'s watermarks after `state` from `marks`, each shard's largest timestamp
    in the batch (changes and heartbeats; a shard absent from the batch is absent here): a
    function of its arguments, so every part plans a batch as the progress writer does."""
    present = {shard: max(state.marks.get(shard, 0), t) for shard, t in marks.items()}
    after = state.frontier
    if present:
        after = max(state.frontier, min(present.values()) - lateness)
    return BatchPlan(batch_id, state.frontier, after, present or dict(state.marks), state.late)


class ProgressWriter:
    """Plans each batch and writes its progress once every part has written; see the module."""

    def __init__(
        self, directory: Path, *, parts: int, lateness: int = 0, file_format: str = "jsonl"
    ) -> None:
        if not 1 <= parts <= MAX_PARTS:
            raise ValueError(f"parts must be 1 to {MAX_PARTS}, got {parts}")
        if lateness < 0:
            raise ValueError(f"lateness must be >= 0 seconds, got {lateness}")
        self.directory = directory
        self.parts = parts
        self.lateness = lateness
        self.file_format = file_format
        self.state_dir = directory / STATE_DIR

    def load(self, batch_id: int) -> WriterState:
        """The state after the latest batch before `batch_id`; refuses a directory this
        writer cannot continue (a later batch, another mode or number of parts)."""
        files = (
            [batch_id_of(p) for p in self.directory.iterdir()] if self.directory.is_dir() else []
        )
        ids = [i for i in files if i is not None]
        later = [i for i in ids + _state_ids(self.state_dir) if i > batch_id]
        if later:
            raise CDCv2WriteError(
                f"CDCv2 directory {self.directory} already holds batch {max(later)}, after "
                f"batch {batch_id}: the stream was restarted from another checkpoint; give the "
                "restarted stream a new path"
            )
        loaded = _latest_before(self.state_dir, batch_id)
        if loaded is None:
            if any(i < batch_id for i in ids):
                raise CDCv2WriteError(
                    f"CDCv2 directory {self.directory} holds batches before {batch_id} but no "
                    f"writer state (in {STATE_DIR}/); it cannot continue the stream "
                    "truthfully; give the stream a new path"
                )
            return WriterState()
        if loaded.get("parts") != self.parts:
            written = loaded.get("parts")
            by = "one writer" if written is None else f"{written} parallel writers"
            raise CDCv2WriteError(
                f"CDCv2 directory {self.directory} was written by {by}, this stream has "
                f"{self.parts}: what the others hold back is in their state; keep the "
                "stream's writeFrom and writePartitions for this path, or give it a new path"
            )
        marks = {str(s): int(t) for s, t in loaded["marks"].items()}
        return WriterState(int(loaded["frontier"]), marks, int(loaded["late"]))

    def plan(self, batch_id: int, marks: Mapping[str, int]) -> BatchPlan:
        """Batch `batch_id`'s watermarks (`plan_of`) after the state before it."""
        return plan_of(batch_id, self.load(batch_id), marks, self.lateness)

    def agreed_plan(
        self, batch_id: int, state: WriterState, reports: Iterable[PartReport]
    ) -> BatchPlan:
        """The plan every part computed for batch `batch_id` from `state` and the batch's
        marks, which each part received whole; parts that disagree fail the batch."""
        seen = {json.dumps(r.marks, sort_keys=True) for r in reports}
        if len(seen) > 1:
            raise CDCv2WriteError(
                f"CDCv2 batch {batch_id} in {self.directory}: the parts planned it from "
                f"different marks ({sorted(seen)}); the batch is written again"
            )
        marks = json.loads(seen.pop()) if seen else {}
        return plan_of(batch_id, state, marks, self.lateness)

    def finish(self, plan: BatchPlan, reported: Iterable[PartReport]) -> BatchReport:
        """Write batch `plan.batch_id`'s progress from every part's report."""
        reports = list(reported)
        found = sorted(report.part for report in reports)
        if found != list(range(self.parts)):
            raise CDCv2WriteError(
                f"CDCv2 batch {plan.batch_id} in {self.directory}: expected one report from "
                f"each of parts 0..{self.parts - 1}, got {found}; the batch is written again"
            )
        counts: dict[int, int] = {}
        for report in reports:
            for t, n in report.counts.items():
                counts[t] = counts.get(t, 0) + n
        taken = sum(r.taken for r in reports)
        duplicates = sum(r.duplicates for r in reports)
        late = sum(r.late for r in reports)
        progress = None
        if plan.after > plan.before:
            progress = Progress(plan.before, plan.after, tuple(sorted(counts.items())))
        state = {
            "batch_id": plan.batch_id,
            "parts": self.parts,
            "frontier": plan.after,
            "marks": dict(sorted(plan.marks.items())),
            "late": plan.late + late,
        }
        _save_state(self.state_dir, plan.batch_id, state)
        _write_file(self.directory, (plan.batch_id, None), self.file_format, [], progress)
        return BatchReport(taken, duplicates, late, sum(counts.values()), plan.after)


def marks_of(changes: Iterable[Change], heartbeats: Mapping[str, int]) -> dict[str, int]:
    """Each shard's largest timestamp among `changes` and its heartbeat: what `plan` takes."""
    marks = dict(heartbeats)
    for change in changes:
        marks[change.shard] = max(marks.get(change.shard, change.time), change.time)
    return marks


def write_in_parts(
    writer: ProgressWriter, batch_id: int, changes: Iterable[Change], heartbeats: Mapping[str, int]
) -> BatchReport:
    """One batch through the whole protocol in this process, the parts one after another: what
    the parallel writers do together, for a caller that holds the batch (and the tests)."""
    taken = list(changes)
    plan = writer.plan(batch_id, marks_of(taken, heartbeats))
    routed: list[list[PartUpdate]] = [[] for _ in range(writer.parts)]
    for change in taken:
        for update in part_updates(change):
            routed[route_of(update.data) % writer.parts].append(update)
    reports = [
        PartWriter(writer.directory, part, file_format=writer.file_format).write_batch(plan, ups)
        for part, ups in enumerate(routed)
    ]
    return writer.finish(plan, reports)
