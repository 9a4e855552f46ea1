"""Sinks: cache invalidation, Version Stream change log, mirror database, CDCv2 files, console.

`build_sinks` turns an UpdateStream's sink specs into sink objects (see `base.Sink`) through
`SINKS`, the registry of sink types: the spec's `type` -> the module and class that implement
it, imported only when a stream uses that type. Each sink takes the events of one micro-batch
with its batch id and is idempotent per batch id and per event; a sink that cannot take a
batch raises `SinkError` naming itself and its address, never credentials, and the batch is not
acknowledged.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from updatestream_jobs.sinks.sink import BatchContext, Sink, SinkContext, SinkError, SinkResult

__all__ = [
    "SINKS",
    "BatchContext",
    "Sink",
    "SinkContext",
    "SinkError",
    "SinkResult",
    "build_sinks",
]

# sink type (`spec.sinks[].type`) -> "module:class"; each class has `from_spec(config, context)`
SINKS: dict[str, str] = {
    "memcached": "updatestream_jobs.sinks.memcached_sink:MemcachedSink",
    "versionStream": "updatestream_jobs.sinks.versionstream_sink:VersionStreamSink",
    "mirror": "updatestream_jobs.sinks.mirror_sink:MirrorSink",
    "cdcv2": "updatestream_jobs.sinks.cdcv2_sink:CDCv2Sink",
    "console": "updatestream_jobs.sinks.console_sink:ConsoleSink",
}


def build_sinks(specs: Sequence[object], context: SinkContext) -> list[Sink]:
    """One sink per spec, in order. Credentials come only from Secret files under
    ``context.secrets_dir``; they are read when a sink opens its connection."""
    sinks: list[Sink] = []
    for config in specs:
        kind = getattr(config, "type", None)
        target = SINKS.get(kind) if isinstance(kind, str) else None
        if target is None:
            raise SinkError(
                f"unknown sink type {kind!r} in {config!r}; known types: {', '.join(SINKS)}"
            )
        module_name, _, class_name = target.partition(":")
        sink_class = getattr(importlib.import_module(module_name), class_name)
        sinks.append(sink_class.from_spec(config, context))
    return sinks
