"""The Grafana dashboard: valid JSON, PromQL that parses, only the project's metric names, and
queries that return data from a real Prometheus scraping the project's own metrics endpoint."""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server
from updatestream_jobs.progress_tracker import ProgressTracker
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink
from updatestream_jobs.sinks.sink import BatchContext
from updatestream_operator.metrics_book import MetricsBook
from updatestream_operator.reconciler.models import (
    KeyRangeStatus,
    ShardPosition,
    StreamRef,
    StreamStatus,
)
from updatestream_operator.reconciler.progress_reader import job_progress
from updatestream_operator.reconciler.shard_positions import fold_progress

from harness.kube import free_port
from harness.sink_events import ShardLog
from tests.charts.conftest import CHART, Helm
from tests.charts.prometheus import Prometheus, monitor_scrape_config, running_prometheus
from updatestream import spec

DASHBOARD = CHART / "dashboards" / "updatestream.json"
METRICS = frozenset(
    {
        "updatestream_lag_seconds",
        "updatestream_events_total",
        "updatestream_duplicates_total",
        "updatestream_duplicates_delivered_total",
        "updatestream_hops_total",
        "updatestream_hop_duration_seconds",
        "updatestream_reconcile_errors_total",
        "updatestream_job_phase",
    }
)
HISTOGRAMS = frozenset({"updatestream_hop_duration_seconds"})
ALLOWED = METRICS | {f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
# Grafana's variables, replaced by what they stand for when every value is selected.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$namespace": ".*",
    "$stream": ".*",
}

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_OFFSET = re.compile(r"\boffset\s+-?\w+")
_NUMBERS = re.compile(r"(?<![\w:])\d[\d.]*(?:[eE][+-]?\d+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "inf", "nan"})
_LABEL_VALUES = re.compile(r"^label_values\((?P<expr>.*),\s*(?P<label>\w+)\)$")


def load() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that shows data (rows are containers, also when collapsed)."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title/refId, PromQL) of every panel target."""
    return [
        (f"{panel['title']}/{target['refId']}", target["expr"])
        for panel in panels(dashboard)
        for target in panel["targets"]
    ]


def concrete(expr: str) -> str:
    """The expression with Grafana's variables replaced, as Grafana would send it."""
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (identifiers that are not functions, label
    names, keywords, durations or numbers)."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    text = _NUMBERS.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function call
        if match.group().lower() not in _KEYWORDS:
            names.add(match.group())
    return names


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(variable, the PromQL inside its label_values(...)) of every query variable."""
    found = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = _LABEL_VALUES.match(text.strip())
        assert match, f"variable {variable['name']}: expected label_values(...), got {text!r}"
        found.append((variable["name"], match.group("expr")))
    return found


# -- static checks ---------------------------------------------------------------------------


def test_the_dashboard_is_valid_json_with_panels_that_all_have_promql() -> None:
    dashboard = load()
    assert dashboard["uid"] == "updatestream" and dashboard["title"] == "UpdateStream"
    shown = list(panels(dashboard))
    assert len(shown) >= 10
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(set(ids)) == len(ids), "panel ids are unique"
    titles = [p["title"] for p in shown]
    assert len(set(titles)) == len(titles), "panel titles are unique"
    for panel in shown:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"panel {panel['title']!r} has an empty query"


def test_every_expression_parses(tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule) with Prometheus' own parser."""
    exprs = [concrete(e) for _, e in queries(load())]
    exprs += [concrete(e) for _, e in variable_queries(load())]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_the_metric_name_extraction_finds_names_and_ignores_the_rest() -> None:
    expr = (
        'sum by (stream, le) (rate(updatestream_events_total{op="insert", x=~"a|b"}[5m]))'
        " / on (stream) group_left (shard) updatestream_lag_seconds offset 5m > 1e3"
        ' or vector(0) and bogus_metric{le="0.5"}'
    )
    assert metric_names(expr) == {
        "updatestream_events_total",
        "updatestream_lag_seconds",
        "bogus_metric",
    }


def test_queries_use_only_the_projects_metrics_and_cover_all_of_them() -> None:
    used: set[str] = set()
    for where, expr in queries(load()) + variable_queries(load()):
        names = metric_names(concrete(expr))
        assert names, f"{where}: selects no metric: {expr}"
        assert names <= ALLOWED, f"{where}: unknown metrics {sorted(names - ALLOWED)}"
        used |= names
    families = {next((h for h in HISTOGRAMS if n.startswith(h)), n) for n in used}
    assert families == METRICS


def test_duplicates_delivered_has_a_panel_that_reads_zero_when_nothing_was_delivered() -> None:
    titles = {
        panel["title"]: panel
        for panel in panels(load())
        if any("updatestream_duplicates_delivered_total" in t["expr"] for t in panel["targets"])
    }
    stat = next(p for title, p in titles.items() if p["type"] == "stat")
    assert "must be 0" in stat["title"]
    assert stat["targets"][0]["expr"].endswith("or vector(0)")
    steps = stat["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["color"] for s in steps] == ["green", "red"] and steps[1]["value"] == 1


# -- against a Prometheus scraping the project's metrics ---------------------------------------

ALERT_RULES = CHART / "alerts" / "updatestream-rules.yaml"


T0 = 1_700_000_000  # the shards' clock in these streams' events


def deliver(sink: CDCv2Sink, tracker: ProgressTracker) -> None:
    """Batches of stream `users` through its job's tracker into a real CDCv2 sink: an insert
    and a delete, then a hop copy the dedup did not drop, a batch after its original; the sink
    recognises that duplicate and the tracker counts what the sink reports."""
    source, destination = ShardLog("-80", 1), ShardLog("-40", 3)
    first = source.transaction(T0, [("insert", "users", None, {"id": 1})])
    later = source.transaction(T0 + 1, [("insert", "users", None, {"id": 5})])
    gone = source.transaction(T0 + 1, [("delete", "users", {"id": 5}, None)])
    for batch_id, events in enumerate([first, later + gone + source.copy_to(first, destination)]):
        result = sink.write_batch(
            list(tracker.observe(events)), BatchContext("users", "-", batch_id)
        )
        tracker.sink_result(sink.name, result)
        tracker.finish_batch(batch_id)


def folded(tracker: ProgressTracker, hops: int) -> StreamStatus:
    """The status the operator keeps of stream `users`: its job's report, read and folded as
    the operator reads and folds it, and the hops it recorded (30 s each)."""
    report = tracker.snapshot()
    entry = KeyRangeStatus(
        key_range="-",
        phase="Running",
        launch_id=1,
        shards=[ShardPosition(name=name) for name in report.shards],
    )
    entry = fold_progress(entry, job_progress(report, launch_id=1))
    return StreamStatus(key_ranges=[entry], hop_count=hops, hop_seconds_total=30.0 * hops)


@pytest.fixture(scope="module")
def scraped_metrics(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """The project's own metrics, served over HTTP and scraped by a real Prometheus:

    - the operator's (`updatestream_operator.metrics_book.MetricsBook`), fed the status of
      stream shop/orders and that of shop/users, folded from the report of users' job;
    - users' job's own endpoint (`updatestream_jobs.stream_metrics.StreamMetrics`), moved by
      its tracker through batches into a real CDCv2 sink (`deliver`), scraped as the chart's
      job PodMonitor has Prometheus scrape drivers: keeping only what the operator does not
      export, so nothing is counted twice.

    Both advance between scrapes, so rates and increases have something to show. Prometheus
    also evaluates the chart's alerting rules.
    """
    from updatestream_jobs.stream_metrics import StreamMetrics

    (monitor,) = [
        d
        for d in helm.template("--set", "metrics.jobPodMonitor.enabled=true")
        if d["kind"] == "PodMonitor"
    ]
    book = MetricsBook(clock=lambda: T0 + 3.0)
    orders = StreamRef(namespace="shop", name="orders", uid="0c5c3b5e-uid")
    users = StreamRef(namespace="shop", name="users", uid="2f1d9a77-uid")
    book.update(orders, operator_status(events=100, hops=1))
    registry = CollectorRegistry()
    registry.register(book)
    operator_port = free_port()
    server, thread = start_http_server(operator_port, addr="127.0.0.1", registry=registry)
    job = StreamMetrics("users")
    job_port = job.serve(0)
    sink = CDCv2Sink(
        spec.CDCv2Sink.model_validate(
            {"type": "cdcv2", "path": str(tmp_path_factory.mktemp("cdc"))}
        )
    )
    job.add_sinks([sink.name])
    tracker = ProgressTracker("users", "-", metrics=job, clock=lambda: T0 + 3.0)
    tracker.set_phase("running")
    book.update(users, folded(tracker, hops=0))
    drivers = monitor_scrape_config(monitor, None)
    drivers["static_configs"] = [{"targets": [f"127.0.0.1:{job_port}"]}]
    workdir = tmp_path_factory.mktemp("prometheus")
    targets = {"operator": [f"127.0.0.1:{operator_port}"]}
    try:
        with running_prometheus(workdir, targets, [ALERT_RULES], [drivers]) as prometheus:
            prometheus.wait_for_scrapes("operator", 2)
            prometheus.wait_for_scrapes(drivers["job_name"], 1)
            book.update(orders, operator_status(events=250, hops=2))
            book.count_error()
            deliver(sink, tracker)
            job.snapshot_rows.labels("users").inc(7)
            book.update(users, folded(tracker, hops=1))
            prometheus.wait_for_scrapes("operator", 3)
            prometheus.wait_for_scrapes(drivers["job_name"], 1)
            yield prometheus
    finally:
        job.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def operator_status(events: int, hops: int) -> StreamStatus:
    """A status as the operator folds job progress into it: two shards of one key range."""
    shards = [
        ShardPosition(
            name=shard,
            lag_seconds=2.5 * (i + 1),
            events={"insert": events, "update": events // 2, "delete": 1},
        )
        for i, shard in enumerate(("-80", "80-"))
    ]
    key_range = KeyRangeStatus(
        key_range="-",
        phase="Running",
        shards=shards,
        duplicates={"hop": events // 10, "unknown": 0},
    )
    return StreamStatus(key_ranges=[key_range], hop_count=hops, hop_seconds_total=12.5 * hops)


def test_every_query_returns_data_from_the_scraped_operator_and_job(
    scraped_metrics: Prometheus,
) -> None:
    empty: dict[str, set[str]] = {}
    for where, expr in queries(load()):
        result = scraped_metrics.query(concrete(expr))
        values = [float(sample["value"][1]) for sample in result]
        if not values or all(math.isnan(v) for v in values):
            empty[where] = metric_names(concrete(expr))
    assert not empty, f"queries without data: {empty}"


def test_the_queries_see_the_values_the_operator_and_the_job_exported(
    scraped_metrics: Prometheus,
) -> None:
    def values(title: str) -> dict[str, float]:
        result = scraped_metrics.query(concrete(dashboard[title]))
        return {s["metric"].get("stream", ""): float(s["value"][1]) for s in result}

    dashboard = {title: expr for title, expr in queries(load())}
    assert values("Highest lag/A") == {"": 5.0}
    assert values("Lag per stream/A") == {"orders": 5.0, "users": 3.0}
    assert values("Hops/A") == {"": 3}
    assert values("Duplicates delivered (must be 0)/A") == {"": 1}
    # one more hop of 12.5s (orders) and one of 30s (users) between the scrapes
    mean = values("Mean hop duration (last hour)/A")
    assert mean == {"orders": pytest.approx(12.5), "users": pytest.approx(30.0)}
    assert values("Events/s/A")[""] > 0
    by_op = scraped_metrics.query(concrete(dashboard["Events/s by operation/A"]))
    assert {(s["metric"]["stream"], s["metric"]["op"]) for s in by_op} == {
        ("orders", "insert"),
        ("orders", "update"),
        ("orders", "delete"),
        ("users", "insert"),
        ("users", "delete"),
    }
    assert {s["metric"].get("namespace") for s in by_op} == {"shop"}


def test_the_drivers_scraped_through_the_chart_add_only_what_the_operator_does_not_count(
    scraped_metrics: Prometheus,
) -> None:
    """Counted once: the driver's endpoint serves events, lag, hops and phases too, but the
    chart's PodMonitor keeps only its snapshot series; sums over everything scraped equal the
    job's own counts."""
    kept = scraped_metrics.query(
        'count by (__name__) ({__name__=~"updatestream_.*", job=~"podMonitor/.*"})'
    )
    assert {s["metric"]["__name__"] for s in kept} == {
        "updatestream_snapshot_rows_total",
        "updatestream_snapshot_chunks_remaining",
    }
    events = scraped_metrics.query('sum by (op) (updatestream_events_total{stream="users"})')
    # two inserts and the copy of one that reached the sink again, one delete: once each
    assert {s["metric"]["op"]: float(s["value"][1]) for s in events} == {
        "insert": 3.0,
        "delete": 1.0,
    }
    assert scraped_metrics.query('updatestream_snapshot_rows_total{stream="users"}')


def test_a_duplicate_delivered_to_a_sink_fires_the_critical_alert_and_shows_on_the_dashboard(
    scraped_metrics: Prometheus,
) -> None:
    """The duplicate the CDCv2 sink recognised reaches the job's report and, folded by the
    operator, its metrics; the real Prometheus, evaluating the chart's rules, fires
    UpdateStreamDuplicatesDelivered for that sink, and the dashboard's per-sink panel shows it."""
    firing: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while not firing and time.monotonic() < deadline:
        firing = scraped_metrics.query(
            'ALERTS{alertname="UpdateStreamDuplicatesDelivered", alertstate="firing"}'
        )
        time.sleep(0.5)
    assert [s["metric"]["stream"] for s in firing] == ["users"], firing
    labels = firing[0]["metric"]
    assert labels["severity"] == "critical" and labels["sink"].startswith("cdcv2(")
    dashboard = {title: expr for title, expr in queries(load())}
    per_sink = next(
        expr
        for title, expr in dashboard.items()
        if "by (namespace, stream, sink)" in expr and "duplicates_delivered" in expr
    )
    shown = scraped_metrics.query(concrete(per_sink))
    assert [(s["metric"]["sink"], float(s["value"][1])) for s in shown] == [(labels["sink"], 1.0)]
