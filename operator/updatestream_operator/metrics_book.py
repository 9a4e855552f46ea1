"""Prometheus metrics of the streams, from the status the operator keeps of them.

The operator exports each stream's series from its status, so they survive a job's death, an
operator restart and a relaunch, and they cover a job that cannot run or never reported:

* `updatestream_lag_seconds{namespace,stream,shard}`: the lag of the job's last report, plus
  the report's age beyond `STALE_AFTER` seconds (the report's usual delay: the sidecar's copy
  and the operator's fold). A dead, stuck or never-started job's lag therefore keeps growing
  instead of freezing at its last value, and `UpdateStreamLagHigh` fires for it.
* `updatestream_report_age_seconds{namespace,stream,key_range}`: seconds since the key range's
  job last reported (since its first launch when none ever did, however often it relaunched).
* `updatestream_job_phase{namespace,stream,key_range,phase}`: 1 for the key range's phase in
  status (`Degraded` when its job failed or cannot run), 0 for the other phases.
* `updatestream_events_total`, `updatestream_duplicates_total`,
  `updatestream_duplicates_delivered_total`: what the current launch's job reported (a relaunch
  starts them again, which `rate()` takes as a counter reset).
* `updatestream_hops_total`, `updatestream_hop_duration_seconds`: hops recorded in status.
* `updatestream_reconcile_errors_total`: reconciliations that ended in an error.

A job's driver serves its own metrics too (`updatestream_jobs.stream_metrics`); the chart's
PodMonitor keeps only those of its series that no name above counts (`DRIVER_ONLY`), so a sum
over the operator's and the drivers' series counts everything once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from updatestream_operator.reconciler import conditions as cond
from updatestream_operator.reconciler.models import KeyRangeStatus, StreamRef, StreamStatus

STALE_AFTER = 30.0  # seconds a report may be old before the lag counts its age
PHASES = ("Pending", "Launching", "Running", "Hopping", "Restarting", "Stopping", "Suspended")
DEGRADED = "Degraded"
# the drivers' own series that the operator does not export: the chart's job PodMonitor keeps
# these and drops the rest of a driver's endpoint
DRIVER_ONLY = ("updatestream_snapshot_rows_total", "updatestream_snapshot_chunks_remaining")
_LABELS = ["namespace", "stream"]


class MetricsBook(Collector):
    """The last status of every stream, exposed as metrics on each scrape."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._streams: dict[tuple[str, str], StreamStatus] = {}
        self._errors = 0
        self._clock = clock

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
        families = _Families()
        now = self._clock()
        for (namespace, name), status in sorted(streams.items()):
            families.add_stream([namespace, name], status, now)
        failures = CounterMetricFamily(
            "updatestream_reconcile_errors", "Reconciliations that ended in an error"
        )
        failures.add_metric([], errors)
        yield from (*families.all(), failures)


class _Families:
    """The families of one scrape, filled stream by stream."""

    def __init__(self) -> None:
        self.lag = GaugeMetricFamily(
            "updatestream_lag_seconds",
            "Seconds behind each shard: the last report's lag plus its age beyond "
            f"{STALE_AFTER:.0f}s, so it grows while no report comes",
            labels=[*_LABELS, "shard"],
        )
        self.age = GaugeMetricFamily(
            "updatestream_report_age_seconds",
            "Seconds since the key range's job last reported (since its launch if never)",
            labels=[*_LABELS, "key_range"],
        )
        self.phase = GaugeMetricFamily(
            "updatestream_job_phase",
            "1 for the key range's phase in the stream's status (Degraded: its job failed or "
            "cannot run)",
            labels=[*_LABELS, "key_range", "phase"],
        )
        self.events = CounterMetricFamily(
            "updatestream_events",
            "Change events delivered, per shard and operation (since the job's launch)",
            labels=[*_LABELS, "shard", "op"],
        )
        self.duplicates = CounterMetricFamily(
            "updatestream_duplicates",
            "Events the hop dedup rule classified (hop: dropped, unknown: delivered)",
            labels=[*_LABELS, "cause"],
        )
        self.delivered = CounterMetricFamily(
            "updatestream_duplicates_delivered",
            "Changes a sink already had, delivered again outside a replay (must stay 0)",
            labels=[*_LABELS, "sink"],
        )
        self.hops = CounterMetricFamily(
            "updatestream_hops", "Hops completed (serving shard map changes)", labels=_LABELS
        )
        self.durations = SummaryMetricFamily(
            "updatestream_hop_duration_seconds",
            "Time from noticing a serving shard map change to reading the new shards",
            labels=_LABELS,
        )

    def all(self) -> tuple[Metric, ...]:
        return (
            self.lag,
            self.age,
            self.phase,
            self.events,
            self.duplicates,
            self.delivered,
            self.hops,
            self.durations,
        )

    def add_stream(self, key: list[str], status: StreamStatus, now: float) -> None:
        shard_lag: dict[str, float] = {}
        shard_events: dict[tuple[str, str], int] = {}
        causes: dict[str, int] = {}
        sinks: dict[str, int] = {}
        for entry in status.key_ranges:
            age = _report_age(entry, now)
            if age is not None:
                self.age.add_metric([*key, entry.key_range.name], age)
            stale = 0.0 if age is None or entry.phase == "Suspended" else age - STALE_AFTER
            for position in entry.shards:
                shard = position.name.name
                lag = (position.lag_seconds or 0.0) + max(0.0, stale)
                shard_lag[shard] = max(shard_lag.get(shard, 0.0), lag)
                for op, count in position.events.items():
                    shard_events[(shard, op)] = shard_events.get((shard, op), 0) + count
            for cause, count in entry.duplicates.items():
                causes[cause] = causes.get(cause, 0) + count
            for sink, count in entry.duplicates_delivered.items():
                sinks[sink] = sinks.get(sink, 0) + count
            for phase in (*PHASES, DEGRADED):
                value = 1.0 if entry.phase == phase else 0.0
                self.phase.add_metric([*key, entry.key_range.name, phase], value)
        for shard, value in sorted(shard_lag.items()):
            self.lag.add_metric([*key, shard], round(value, 3))
        for (shard, op), count in sorted(shard_events.items()):
            self.events.add_metric([*key, shard, op], count)
        for cause, count in sorted(causes.items()):
            self.duplicates.add_metric([*key, cause], count)
        for sink, count in sorted(sinks.items()):
            self.delivered.add_metric([*key, sink], count)
        self.hops.add_metric(key, status.hop_count)
        self.durations.add_metric(key, status.hop_count, status.hop_seconds_total)


def _report_age(entry: KeyRangeStatus, now: float) -> float | None:
    """Seconds since the key range's job last reported, or since its launch."""
    since = entry.reported_at or entry.launched_at
    if since is None:
        return None
    return max(0.0, round(now - cond.parse_rfc3339(since).timestamp(), 3))


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
