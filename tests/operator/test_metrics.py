"""The operator's Prometheus metrics, from stream status, over a real HTTP endpoint; a lag that
grows with the age of the last report, and the key ranges' phases."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from updatestream_operator.metrics_book import MetricsBook, serve
from updatestream_operator.reconciler.models import StreamRef, StreamStatus

from harness.kube import free_port

STATUS = StreamStatus.parse(
    {
        "keyRanges": [
            {
                "keyRange": "-80",
                "phase": "Running",
                "reportedAt": "2024-05-01T12:00:00Z",
                "duplicatesDelivered": {"memcached(mc:11211)": 0},
                "shards": [
                    {"name": "-40", "lagSeconds": 2.5, "events": {"insert": 3, "delete": 1}},
                    {"name": "40-80", "lagSeconds": 0.5, "events": {"update": 2}},
                ],
                "duplicates": {"hop": 4},
            },
            {
                "keyRange": "80-",
                "phase": "Degraded",
                "launchedAt": "2024-05-01T11:58:00Z",
                "reportedAt": "2024-05-01T11:59:00Z",
                "shards": [{"name": "80-", "lagSeconds": 7, "events": {"insert": 1}}],
                "duplicates": {"hop": 1, "overlap": 2},
            },
        ],
        "hopCount": 2,
        "hopSecondsTotal": 9.5,
    }
)


NOW = 1_714_564_805.0  # 2024-05-01T12:00:05Z


def test_metrics_are_served_from_the_status_of_each_stream() -> None:
    book = MetricsBook(clock=lambda: NOW)
    book.update(StreamRef("ns", "orders", "uid"), STATUS)
    book.count_error()
    port = free_port()
    stop = serve(book, port, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        stop()
    samples = {
        (
            sample.name,
            tuple(sorted((k, v) for k, v in sample.labels.items() if k != "namespace")),
        ): (sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("namespace", "ns") == "ns"
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("updatestream_lag_seconds", stream="orders", shard="-40") == 2.5
    # 80-'s report is 65 s old: 35 s beyond the usual delay count as lag
    assert value("updatestream_lag_seconds", stream="orders", shard="80-") == 7.0 + 35.0
    assert value("updatestream_report_age_seconds", stream="orders", key_range="-80") == 5.0
    assert value("updatestream_report_age_seconds", stream="orders", key_range="80-") == 65.0
    phase = {"stream": "orders", "key_range": "80-"}
    assert value("updatestream_job_phase", **phase, phase="Degraded") == 1
    assert value("updatestream_job_phase", **phase, phase="Running") == 0
    assert value("updatestream_job_phase", **{**phase, "key_range": "-80"}, phase="Running") == 1
    assert (
        value(
            "updatestream_duplicates_delivered_total", stream="orders", sink="memcached(mc:11211)"
        )
        == 0
    )
    assert value("updatestream_events_total", stream="orders", shard="-40", op="delete") == 1
    assert value("updatestream_events_total", stream="orders", shard="40-80", op="update") == 2
    assert value("updatestream_duplicates_total", stream="orders", cause="hop") == 5
    assert value("updatestream_duplicates_total", stream="orders", cause="overlap") == 2
    assert value("updatestream_hops_total", stream="orders") == 2
    assert value("updatestream_hop_duration_seconds_count", stream="orders") == 2
    assert value("updatestream_hop_duration_seconds_sum", stream="orders") == 9.5
    assert value("updatestream_reconcile_errors_total") == 1


def test_the_lag_of_a_job_that_never_reports_grows_from_its_launch() -> None:
    status = StreamStatus.parse(
        {
            "keyRanges": [
                {
                    "keyRange": "-",
                    "phase": "Degraded",
                    "launchedAt": "2024-05-01T12:00:00Z",
                    "shards": [{"name": "-80", "startTimestamp": 1}, {"name": "80-"}],
                }
            ]
        }
    )
    now = [NOW]
    book = MetricsBook(clock=lambda: now[0])
    book.update(StreamRef("ns", "orders", "uid"), status)

    def lags() -> dict[str, float]:
        return {
            s.labels["shard"]: s.value
            for m in book.collect()
            for s in m.samples
            if s.name == "updatestream_lag_seconds"
        }

    assert lags() == {"-80": 0.0, "80-": 0.0}  # 5 s after the launch: within the usual delay
    now[0] += 100
    assert lags() == {"-80": 75.0, "80-": 75.0}
    suspended = status.model_copy(deep=True)
    suspended.key_ranges[0].phase = "Suspended"
    book.update(StreamRef("ns", "orders", "uid"), suspended)
    assert lags() == {"-80": 0.0, "80-": 0.0}  # a suspended stream does not alert on lag


def test_a_forgotten_stream_has_no_series() -> None:
    book = MetricsBook()
    book.update(StreamRef("ns", "orders", "uid"), STATUS)
    book.forget("ns", "orders")
    samples = [s for m in book.collect() for s in m.samples]
    assert [s.name for s in samples] == ["updatestream_reconcile_errors_total"]
