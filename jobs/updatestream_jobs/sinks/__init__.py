"""Sinks: cache invalidation, Version Stream change log, CDCv2 files, console.

`build_sinks` turns an UpdateStream's sink specs into sink objects (see `base.Sink`). Each
sink takes the events of one micro-batch with its batch id and is idempotent per batch id and
per event; a sink that cannot take a batch raises `SinkError` naming itself and its address,
never credentials, and the batch is not acknowledged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from updatestream import spec
from updatestream_jobs.sinks.base import BatchContext, Sink, SinkError, SinkResult

__all__ = ["BatchContext", "Sink", "SinkError", "SinkResult", "build_sinks"]

AnySinkSpec = spec.MemcachedSink | spec.VersionStreamSink | spec.CDCv2Sink | spec.ConsoleSink


def build_sinks(specs: Sequence[AnySinkSpec], *, keyspace: str, secrets_dir: Path) -> list[Sink]:
    """One sink per spec, in order. Credentials come only from Secret files under
    ``secrets_dir``; they are read when a sink opens its connection."""
    sinks: list[Sink] = []
    for config in specs:
        if isinstance(config, spec.MemcachedSink):
            from updatestream_jobs.sinks.memcached import MemcachedSink

            sinks.append(MemcachedSink(config, keyspace=keyspace))
        elif isinstance(config, spec.VersionStreamSink):
            from updatestream_jobs.sinks.versionstream import VersionStreamSink

            sinks.append(VersionStreamSink(config, keyspace=keyspace, secrets_dir=secrets_dir))
        elif isinstance(config, spec.CDCv2Sink):
            from updatestream_jobs.sinks.cdcv2 import CDCv2Sink

            sinks.append(CDCv2Sink(config, keyspace=keyspace))
        elif isinstance(config, spec.ConsoleSink):
            from updatestream_jobs.sinks.console import ConsoleSink

            sinks.append(ConsoleSink(config))
        else:
            raise SinkError(f"unknown sink spec {type(config).__name__}: {config!r}")
    return sinks
