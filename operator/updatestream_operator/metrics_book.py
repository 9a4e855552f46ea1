"""Prometheus metrics of the streams, computed from the progress the operator folds into status.

The counters mirror what the jobs count (events, duplicates) and what the status records
(hops, their total duration), so they survive an operator restart; a job relaunch restarts
its own counts, which Prometheus' `rate()` treats as a counter reset.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from updatestream_operator.reconciler.models import StreamRef, StreamStatus


class MetricsBook(Collector):
    """The last status of every stream, exposed as metrics on each scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[tuple[str, str], StreamStatus] = {}
        self._errors = 0

    def update(self, ref: StreamRef, status: StreamStatus) -> None:
        with self._lock:
            self._streams[(ref.namespace, ref.name)] = status

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._streams.pop((namespace, name), None)

    def count_error(self) -> None:
        with self._lock:
            self._errors += 1

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            streams = dict(self._streams)
            errors = self._errors
        labels = ["namespace", "stream"]
        lag = GaugeMetricFamily(
            "updatestream_lag_seconds",
            "Seconds between now and the last delivered event, per shard",
            labels=[*labels, "shard"],
        )
        events = CounterMetricFamily(
            "updatestream_events",
            "Change events delivered, per shard and operation (since the job's launch)",
            labels=[*labels, "shard", "op"],
        )
        duplicates = CounterMetricFamily(
            "updatestream_duplicates",
            "Duplicate events dropped before the sinks, by cause",
            labels=[*labels, "cause"],
        )
        hops = CounterMetricFamily(
            "updatestream_hops", "Hops completed (serving shard map changes)", labels=labels
        )
        durations = SummaryMetricFamily(
            "updatestream_hop_duration_seconds",
            "Time from noticing a serving shard map change to the relaunched job",
            labels=labels,
        )
        for (namespace, name), status in sorted(streams.items()):
            key = [namespace, name]
            shard_lag: dict[str, float] = {}
            shard_events: dict[tuple[str, str], int] = {}
            causes: dict[str, int] = {}
            for entry in status.key_ranges:
                for position in entry.shards:
                    shard = position.name.name
                    if position.lag_seconds is not None:
                        shard_lag[shard] = max(shard_lag.get(shard, 0.0), position.lag_seconds)
                    for op, count in position.events.items():
                        k = (shard, op)
                        shard_events[k] = shard_events.get(k, 0) + count
                for cause, count in entry.duplicates.items():
                    causes[cause] = causes.get(cause, 0) + count
            for shard, value in sorted(shard_lag.items()):
                lag.add_metric([*key, shard], value)
            for (shard, op), count in sorted(shard_events.items()):
                events.add_metric([*key, shard, op], count)
            for cause, count in sorted(causes.items()):
                duplicates.add_metric([*key, cause], count)
            hops.add_metric(key, status.hop_count)
            durations.add_metric(key, status.hop_count, status.hop_seconds_total)
        failures = CounterMetricFamily(
            "updatestream_reconcile_errors", "Reconciliations that ended in an error"
        )
        failures.add_metric([], errors)
        yield from (lag, events, duplicates, hops, durations, failures)


def serve(book: MetricsBook, port: int, address: str = "0.0.0.0") -> Callable[[], None]:
    """Expose `book` on http://address:port/metrics; returns what stops the server."""
    registry = CollectorRegistry()
    registry.register(book)
    server, thread = start_http_server(port, addr=address, registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
