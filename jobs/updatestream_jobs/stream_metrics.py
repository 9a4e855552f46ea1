"""The job's Prometheus metrics, served from the driver.

Each job owns a `CollectorRegistry` (several jobs, or tests, can live in one process):

* `updatestream_lag_seconds{stream,shard}`: how far the stream is behind the shard (see
  `progress`); 0 when the last batch reached the shard's latest position.
* `updatestream_events_total{stream,shard,op}`: change events delivered (heartbeats included,
  as op="heartbeat").
* `updatestream_duplicates_total{stream,cause}`: events the dedup rule classified after a hop:
  cause="hop" dropped copies, cause="unknown" undecidable events that were delivered.
* `updatestream_hops_total{stream}` and `updatestream_hop_duration_seconds{stream}`: hops this
  job started from, and the time from the hop's start to this job's first delivered batch.
* `updatestream_duplicates_delivered_total{stream,sink}`: changes that reached a sink which
  already had them, outside a replay (`SinkResult.duplicates_delivered`): the stream delivered a
  duplicate, which the sink recognised and kept out.
* `updatestream_snapshot_rows_total{stream}` and `updatestream_snapshot_chunks_remaining{stream}`:
  existing rows the snapshot delivered, and its chunks still to read (estimated until the last
  chunk of a range is planned; 0 when finished or when the stream does not snapshot).
* `updatestream_job_phase{stream,key_range,phase}`: 1 for the job's current phase (starting,
  running, hopping, waiting: a sink's server does not answer, stopped, failed), 0 for the others.

Every series of the stream (duplicates by cause, hops, the hop duration histogram, each sink's
delivered duplicates, each phase) exists from the start at 0, so `increase()` sees the first
increment.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# by the dedup rule's verdict: dropped ("hop", "reverse") or delivered and counted ("unknown",
# "straddle"; see updatestream.core.dedup)
DUPLICATE_CAUSES = ("hop", "unknown", "reverse", "straddle")
PHASES = ("starting", "running", "hopping", "waiting", "stopped", "failed")


class StreamMetrics:
    def __init__(self, stream: str, registry: CollectorRegistry | None = None) -> None:
        self.stream = stream
        self.registry = registry or CollectorRegistry()
        self._delivery_metrics()
        self._hop_metrics()
        self._state_metrics()
        self._snapshot_metrics()
        self._server: Any = None

    def _delivery_metrics(self) -> None:
        """What reaches the sinks: events, lag, duplicates dropped and delivered."""
        registry, stream = self.registry, self.stream
        self.lag = Gauge(
            "updatestream_lag_seconds",
            "Seconds the stream is behind each shard (0 when caught up)",
            ["stream", "shard"],
            registry=registry,
        )
        self.events = Counter(
            "updatestream_events_total",
            "Change events delivered to the sinks",
            ["stream", "shard", "op"],
            registry=registry,
        )
        self.duplicates = Counter(
            "updatestream_duplicates_total",
            "Events classified by the hop dedup rule (hop: dropped, unknown: delivered)",
            ["stream", "cause"],
            registry=registry,
        )
        self.duplicates_delivered = Counter(
            "updatestream_duplicates_delivered_total",
            "Duplicates a sink reported it delivered (0 unless a sink says so)",
            ["stream", "sink"],
            registry=registry,
        )
        for cause in DUPLICATE_CAUSES:
            self.duplicates.labels(stream, cause)

    def _hop_metrics(self) -> None:
        self.hops = Counter(
            "updatestream_hops_total",
            "Hops from source shards to destination shards",
            ["stream"],
            registry=self.registry,
        )
        self.hop_duration = Histogram(
            "updatestream_hop_duration_seconds",
            "Seconds from a hop's start to the first batch delivered after it",
            ["stream"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
            registry=self.registry,
        )
        self.hops.labels(self.stream)
        self.hop_duration.labels(self.stream)

    def _state_metrics(self) -> None:
        self.phase = Gauge(
            "updatestream_job_phase",
            "1 for the job's current phase (starting, running, hopping, waiting, stopped, failed)",
            ["stream", "key_range", "phase"],
            registry=self.registry,
        )

    def _snapshot_metrics(self) -> None:
        self.snapshot_rows = Counter(
            "updatestream_snapshot_rows_total",
            "Existing rows the snapshot delivered",
            ["stream"],
            registry=self.registry,
        )
        self.snapshot_remaining = Gauge(
            "updatestream_snapshot_chunks_remaining",
            "Snapshot chunks still to read (an estimate until a range's last chunk is planned)",
            ["stream"],
            registry=self.registry,
        )
        self.snapshot_rows.labels(self.stream)
        self.snapshot_remaining.labels(self.stream)

    def add_sinks(self, names: list[str]) -> None:
        """Create each sink's delivered-duplicates series at 0."""
        for name in names:
            self.duplicates_delivered.labels(self.stream, name)

    def set_phase(self, key_range: str, phase: str) -> None:
        for name in PHASES:
            self.phase.labels(self.stream, key_range, name).set(1 if name == phase else 0)

    def serve(self, port: int, address: str = "127.0.0.1") -> int:
        """Serve /metrics on `address:port` (0 picks a free port); returns the port."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        self._server = server
        return int(server.server_address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
