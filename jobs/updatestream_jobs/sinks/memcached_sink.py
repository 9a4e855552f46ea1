"""The cache invalidation sink: each row change invalidates its keys in memcached.

For every row change the sink computes the keys to invalidate (the row's key, and the extra
composite-object keys, from the images before and after the change; see
:mod:`updatestream.cache.key_templates`) and hands each key the change's Event Token, in stream
order, to the invalidator (:mod:`updatestream.cache.invalidator`), which applies seed 000's rules
with CAS. Replaying a batch finds the same or newer tokens and writes nothing; a hop duplicate has a
token that compares EQUAL (same source transaction) or older, and writes nothing either.

``SinkResult`` counts keys for this sink: ``written`` keys were added or replaced, ``skipped``
keys already held the same or a newer token. ``duplicates_delivered`` counts changes a key had
already received from an invalidation (a token-only entry whose token compares EQUAL, or an
earlier change of the batch) in a batch that is not a replay: the stream delivered a change
twice. Two streams invalidating the same keys would count each other's changes.

**The fast lane.** With ``fastLane`` on (the default) the stream's source applies each change's
invalidation as soon as its binlog tail holds the transaction (`updatestream_jobs.source.
fast_lane`), through a sink made with ``ahead=True``: the same keys and rules, entries written
with ``FAST_LANE_FLAG``. The micro-batch applies the same changes afterwards, as the durable
record; finding its own change in a flagged entry is no repeat. A flagged entry counts as had
(a later EQUAL change is a duplicate delivered) once a micro-batch delivered its change: the
sink keeps, per shard, the position its batches' heartbeats reached.

**Writing from the executors** (``writeFrom: executors``). Each Spark task of the batch computes
and applies its own partition's invalidations, with the task's own connections, at the same time
as the others (`write_frame`). Order between tasks does not matter: an entry only ever moves to a
newer token (CAS, seed 000's comparison), so whichever task writes last, a key ends on its newest
change. The driver ships each batch the heartbeat positions its batches reached (for the fast
lane's flagged entries), adds up the tasks' reports, and keeps the newest heartbeat of each shard
they saw. Counts per key can differ from the driver's (a task that meets a newer token first
skips the older change it would have written before it); the effect is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from updatestream import spec
from updatestream.binlog.events import SNAPSHOT_OPS, ChangeEvent
from updatestream.cache.entry import FAST_LANE_FLAG, EntryError
from updatestream.cache.invalidator import (
    CacheConflictError,
    CacheServerError,
    InvalidationReport,
    Invalidator,
)
from updatestream.cache.key_templates import KeyTemplateError, KeyTemplates
from updatestream.cache.transport import CacheAddressError
from updatestream.core.gtid import GTIDPosition, PositionError, position_contains
from updatestream.core.token import EventToken
from updatestream_jobs.sinks.common import loads_object
from updatestream_jobs.sinks.executor_tasks import (
    kept_events,
    run_partitions,
    task_failure,
    worker_sink,
)
from updatestream_jobs.sinks.sink import (
    BatchContext,
    ReplayGuard,
    SinkContext,
    SinkError,
    SinkResult,
)


def _image(text: str | None, event: ChangeEvent) -> dict[str, Any] | None:
    return None if text is None else loads_object(text, "row image", event)


class MemcachedSink:
    @classmethod
    def from_spec(cls, config: spec.MemcachedSink, context: SinkContext) -> MemcachedSink:
        return cls(config, keyspace=context.keyspace)

    def __init__(self, config: spec.MemcachedSink, *, keyspace: str, ahead: bool = False) -> None:
        """`ahead`: the fast lane's sink (one connection per server, flagged entries)."""
        self.name = f"memcached({','.join(config.servers)})"
        try:
            self.templates = KeyTemplates(keyspace, config.key_template, config.extra_keys)
            if ahead:
                self.invalidator = Invalidator(config.servers, connections=1, flags=FAST_LANE_FLAG)
            else:
                self.invalidator = Invalidator(config.servers)
            self._replays = ReplayGuard()
        except (KeyTemplateError, CacheAddressError) as exc:
            raise SinkError(f"{self.name}: {exc}") from None
        self.config = config
        self.keyspace = keyspace
        self._config_text = config.model_dump_json(by_alias=True)  # what a task is made from
        self._delivered: dict[str, GTIDPosition] = {}  # shard -> position its heartbeats reached
        self._heartbeats: dict[str, str] = {}  # shard -> token text of that heartbeat
        self.most_tasks = 0  # the most Spark tasks a batch was written by (writeFrom: executors)

    def open(self) -> None:
        for server, client in self.invalidator.servers.clients.items():
            try:
                client.version()
            except Exception as exc:  # any failure to talk to the server
                raise SinkError(
                    f"{self.name}: memcached {server} does not answer: {type(exc).__name__}: {exc}"
                ) from None

    def changes(
        self, events: Iterable[ChangeEvent], heartbeats: list[ChangeEvent] | None = None
    ) -> dict[str, list[str]]:
        """Key -> token texts of the changes that invalidate it, in stream order; the batch's
        heartbeats go to `heartbeats` when given."""
        changes: dict[str, list[str]] = {}
        for event in events:
            if event.op == "heartbeat" and heartbeats is not None:
                heartbeats.append(event)
            if event.op == "heartbeat" or event.op in SNAPSHOT_OPS or event.table is None:
                continue  # a snapshot row is no change: nothing cached can be stale from it
            pk = loads_object(event.pk, "pk", event)
            images: list[dict[str, Any] | None] = []
            if self.templates.needs_images(event.table):
                images = [_image(event.before, event), _image(event.after, event)]
            elif event.before is not None and event.after is not None:
                images = [loads_object(event.before, "before", event)]  # a key change?
            for key in self.templates.keys_of_change(event.table, pk, images):
                tokens = changes.setdefault(key, [])
                if not tokens or tokens[-1] != event.token:
                    tokens.append(event.token)
        return changes

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        heartbeats: list[ChangeEvent] = []
        report = self._invalidate(self.changes(events, heartbeats), f"batch {ctx.batch_id}")
        for heartbeat in heartbeats:  # after the batch: its own changes are not "had" in it
            self._reached(heartbeat.shard, heartbeat.token)
        return self._result(report.changed, report.unchanged, report.repeats, ctx)

    def _result(self, changed: int, unchanged: int, repeats: int, ctx: BatchContext) -> SinkResult:
        # A change a key already had from an invalidation, in a batch that is no replay: the
        # stream delivered it twice (its token compares EQUAL: dropped, but counted).
        delivered = 0 if self._replays.may_repeat(ctx) else repeats
        self._replays.written(ctx)
        return SinkResult(written=changed, skipped=unchanged, duplicates_delivered=delivered)

    def _reached(self, shard: str, token_text: str) -> None:
        self._delivered[shard] = EventToken.loads(token_text).position
        self._heartbeats[shard] = token_text

    @property
    def writes_from_executors(self) -> bool:
        return self.config.write_from == "executors"

    def write_frame(self, frame: Any, ctx: BatchContext) -> SinkResult:
        """``writeFrom: executors``: every Spark task of the batch `frame` invalidates its own
        partition's keys at the same time as the others; the driver adds up their reports."""
        task = MemcachedTask(self._config_text, self.keyspace, dict(self._heartbeats))
        reports = run_partitions(frame, task)
        self.most_tasks = max(self.most_tasks, len(reports))
        seen: dict[str, list[str]] = {}
        for report in reports:
            for shard, text in report["heartbeats"].items():
                seen.setdefault(shard, []).append(text)
        for shard, texts in seen.items():  # after the batch, as in `write_batch`
            self._reached(shard, _newest(texts))
        return self._result(
            sum(r["changed"] for r in reports),
            sum(r["unchanged"] for r in reports),
            sum(r["repeats"] for r in reports),
            ctx,
        )

    def invalidate_partition(
        self, events: Iterable[ChangeEvent], heartbeats: dict[str, str]
    ) -> dict[str, Any]:
        """One task's write (see `MemcachedTask`): the heartbeats the driver's batches reached
        before this batch decide the fast lane's entries; reports what it wrote and the last
        heartbeat of each shard in its partition. A failure is raised in a task's form."""
        self._delivered, self._heartbeats = {}, {}
        for shard, text in heartbeats.items():
            self._reached(shard, text)
        held: list[ChangeEvent] = []
        try:
            report = self._invalidate(self.changes(events, held), "a partition of the batch")
        except SinkError as exc:
            raise task_failure(exc) from None
        return {
            "changed": report.changed,
            "unchanged": report.unchanged,
            "repeats": report.repeats,
            "heartbeats": {event.shard: event.token for event in held},
        }

    def invalidate_ahead(self, events: Iterable[ChangeEvent]) -> InvalidationReport:
        """The fast lane's write: the changes' invalidations, nothing counted."""
        return self._invalidate(self.changes(events), "fast lane")

    def _invalidate(self, changes: dict[str, list[str]], what: str) -> InvalidationReport:
        try:
            return self.invalidator.invalidate(changes, self._was_delivered)
        except CacheServerError as exc:
            raise SinkError(
                f"{self.name}: cannot invalidate {what}; nothing acknowledged: {exc}"
            ) from None
        except (CacheConflictError, KeyTemplateError, ValueError) as exc:
            raise SinkError(f"{self.name}: {what}: {exc}") from None

    def _was_delivered(self, token_text: str) -> bool:
        """Did a batch of this sink deliver the change of a fast-lane entry's token?"""
        try:
            token = self.invalidator.tokens.get(token_text)
            reached = self._delivered.get(token.shard)
            return reached is not None and position_contains(reached, token.position)
        except (EntryError, PositionError):
            return False

    def close(self) -> None:
        self.invalidator.close()


def _newest(texts: list[str]) -> str:
    """The heartbeat token, of several of one shard's, whose position holds the others'."""
    newest = texts[0]
    for text in texts[1:]:
        if position_contains(EventToken.loads(text).position, EventToken.loads(newest).position):
            newest = text
    return newest


class MemcachedTask:
    """What one Spark task runs for its partition of a batch: the sink made from its spec (once
    per Python worker, with the worker's own connections) invalidates the partition's keys.
    Holds only text, so Spark ships it to the executors."""

    def __init__(self, config: str, keyspace: str, heartbeats: dict[str, str]) -> None:
        self.config, self.keyspace, self.heartbeats = config, keyspace, heartbeats

    def sink(self) -> MemcachedSink:
        return worker_sink((self.config, self.keyspace), self._make)

    def _make(self) -> MemcachedSink:
        config = spec.MemcachedSink.model_validate_json(self.config)
        return MemcachedSink(config, keyspace=self.keyspace)

    def __call__(self, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        try:
            sink = self.sink()
        except SinkError as exc:  # a key template or an address the driver took: not expected
            raise task_failure(exc) from None
        yield sink.invalidate_partition(kept_events(rows), self.heartbeats)
