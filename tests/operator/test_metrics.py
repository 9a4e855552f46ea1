"""The operator's Prometheus metrics, from stream status, over a real HTTP endpoint."""

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
                "shards": [
                    {"name": "-40", "lagSeconds": 2.5, "events": {"insert": 3, "delete": 1}},
                    {"name": "40-80", "lagSeconds": 0.5, "events": {"update": 2}},
                ],
                "duplicates": {"hop": 4},
            },
            {
                "keyRange": "80-",
                "shards": [{"name": "80-", "lagSeconds": 7, "events": {"insert": 1}}],
                "duplicates": {"hop": 1, "overlap": 2},
            },
        ],
        "hopCount": 2,
        "hopSecondsTotal": 9.5,
    }
)


def test_metrics_are_served_from_the_status_of_each_stream() -> None:
    book = MetricsBook()
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
    assert value("updatestream_lag_seconds", stream="orders", shard="80-") == 7.0
    assert value("updatestream_events_total", stream="orders", shard="-40", op="delete") == 1
    assert value("updatestream_events_total", stream="orders", shard="40-80", op="update") == 2
    assert value("updatestream_duplicates_total", stream="orders", cause="hop") == 5
    assert value("updatestream_duplicates_total", stream="orders", cause="overlap") == 2
    assert value("updatestream_hops_total", stream="orders") == 2
    assert value("updatestream_hop_duration_seconds_count", stream="orders") == 2
    assert value("updatestream_hop_duration_seconds_sum", stream="orders") == 9.5
    assert value("updatestream_reconcile_errors_total") == 1


def test_a_forgotten_stream_has_no_series() -> None:
    book = MetricsBook()
    book.update(StreamRef("ns", "orders", "uid"), STATUS)
    book.forget("ns", "orders")
    samples = [s for m in book.collect() for s in m.samples]
    assert [s.name for s in samples] == ["updatestream_reconcile_errors_total"]
