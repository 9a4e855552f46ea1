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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from updatestream import spec
from updatestream.binlog.events import SNAPSHOT_OPS, ChangeEvent
from updatestream.cache.invalidator import CacheConflictError, CacheServerError, Invalidator
from updatestream.cache.key_templates import KeyTemplateError, KeyTemplates
from updatestream.cache.transport import CacheAddressError
from updatestream_jobs.sinks.common import loads_object
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

    def __init__(self, config: spec.MemcachedSink, *, keyspace: str) -> None:
        self.name = f"memcached({','.join(config.servers)})"
        try:
            self.templates = KeyTemplates(keyspace, config.key_template, config.extra_keys)
            self.invalidator = Invalidator(config.servers)
            self._replays = ReplayGuard()
        except (KeyTemplateError, CacheAddressError) as exc:
            raise SinkError(f"{self.name}: {exc}") from None

    def open(self) -> None:
        for server, client in self.invalidator.servers.clients.items():
            try:
                client.version()
            except Exception as exc:  # any failure to talk to the server
                raise SinkError(
                    f"{self.name}: memcached {server} does not answer: {type(exc).__name__}: {exc}"
                ) from None

    def changes(self, events: Iterable[ChangeEvent]) -> dict[str, list[str]]:
        """Key -> token texts of the changes that invalidate it, in stream order."""
        changes: dict[str, list[str]] = {}
        for event in events:
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
        try:
            report = self.invalidator.invalidate(self.changes(events))
        except CacheServerError as exc:
            raise SinkError(
                f"{self.name}: cannot invalidate batch {ctx.batch_id}; nothing acknowledged: {exc}"
            ) from None
        except (CacheConflictError, KeyTemplateError, ValueError) as exc:
            raise SinkError(f"{self.name}: batch {ctx.batch_id}: {exc}") from None
        # A change a key already had from an invalidation, in a batch that is no replay: the
        # stream delivered it twice (its token compares EQUAL: dropped, but counted).
        delivered = 0 if self._replays.may_repeat(ctx) else report.repeats
        self._replays.written(ctx)
        return SinkResult(
            written=report.changed, skipped=report.unchanged, duplicates_delivered=delivered
        )

    def close(self) -> None:
        self.invalidator.close()
