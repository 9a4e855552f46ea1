"""On the one-node cluster: an UpdateStream's status tells what really runs, and the real
Prometheus sees it through the chart's monitoring configuration.

- a stream whose job cannot reach its sink (a port nothing listens on) is Degraded, with the
  job's own error naming the field, and not Ready, within 30 s of its driver's exit; the
  chart's lag and Degraded alerts fire for it in a real Prometheus;
- a stream that flows is Ready only once its job has reported a batch, its driver Pod declares
  its metrics port, and Prometheus scrapes that Pod through the chart's job PodMonitor,
  keeping only what the operator does not count;
- a stream whose driver cannot be scheduled says so in Ready;
- none of the noise of before: no error at the operator's start, no line per timer tick, no
  MissingClusterDNS warning, no stack trace at a driver's shutdown, a line per 100 batches.

Real components: kubelet runs the Pods; the shards are a development cluster listening on
the bridge address; memcached and the traffic run on this machine; Prometheus runs here,
scraping the Pods the chart's PodMonitors select (found through the API server and kept by the
monitors' rules, as the Prometheus Operator configures it), with the chart's PrometheusRule.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

from tests.charts.prometheus import Prometheus, monitor_scrape_config, start_prometheus
from tests.cluster.node import (
    BRIDGE_IP,
    REPO_ROOT,
    Forwarder,
    Node,
    PodDiscovery,
    create_secret,
    install_chart,
    wait_for,
)

NS = "us-status"
CHART = REPO_ROOT / "charts" / "updatestream-operator"
# the chart's alerts with thresholds a test can wait for (the defaults are 300 s for 10 min)
ALERT_VALUES = [
    "--set", "prometheusRule.enabled=true",
    "--set", "prometheusRule.alerts.lagHigh.threshold=20",
    "--set", "prometheusRule.alerts.lagHigh.for=10s",
    "--set", "prometheusRule.alerts.degraded.for=10s",
    "--set", "metrics.podMonitor.enabled=true",
    "--set", "metrics.jobPodMonitor.enabled=true",
]  # fmt: skip
REPORT = REPO_ROOT / ".updatestream" / "node-status-report.txt"
# the module's first test also waits for the node and the image (built when its inputs changed)
pytestmark = pytest.mark.timeout(1800)


@dataclass
class World:
    node: Node
    cluster: DevCluster
    memcached: Forwarder
    closed_port: int  # a port on the bridge address nothing listens on
    prometheus: Prometheus
    timings: dict[str, float]

    def status(self, name: str) -> dict[str, Any]:
        found = self.node.items(NS, "updatestreams")
        return next(
            (dict(s.get("status") or {}) for s in found if s["metadata"]["name"] == name), {}
        )

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == type_), {})

    def driver(self, name: str) -> dict[str, Any] | None:
        pods = self.node.items(NS, "pods", f"updatestream.io/stream={name},spark-role=driver")
        return pods[0] if pods else None

    def apply_stream(self, name: str, port: int, **spec: Any) -> None:
        stream = {
            "apiVersion": "updatestream.io/v1alpha1",
            "kind": "UpdateStream",
            "metadata": {"name": name},
            "spec": {
                "keyspace": "commerce",
                "tables": ["users"],
                "sinks": [
                    {
                        "type": "memcached",
                        "servers": [f"{BRIDGE_IP}:{port}"],
                        "keyTemplate": {"users": "user:{id}"},
                    }
                ],
                **spec,
            },
        }
        self.node.apply(NS, stream)

    def delete_stream(self, name: str) -> None:
        self.node.kubectl("delete", "updatestream", name, "-n", NS, "--wait=true", "--timeout=180s")


def _monitoring(
    node: Node, workdir: Path, discovery: PodDiscovery
) -> tuple[list[dict[str, Any]], Path]:
    """The chart's PodMonitors as scrape configurations and its PrometheusRule as a rule file,
    rendered with the values of the installed release plus ALERT_VALUES."""
    rendered = node.helm("template", "updatestream", str(CHART), "-n", NS, *ALERT_VALUES)
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    monitors = [d for d in documents if d["kind"] == "PodMonitor"]
    (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
    rules = workdir / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return [monitor_scrape_config(m, discovery.url, interval="2s") for m in monitors], rules


@pytest.fixture(scope="module")
def world(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("node-status")
    cluster = DevCluster(workdir / "cluster", bind_address=BRIDGE_IP)
    memcached = MemcachedServer()
    forwarder: Forwarder | None = None
    prometheus: Prometheus | None = None
    traffic: TrafficGenerator | None = None
    pods: PodDiscovery | None = None
    try:
        cluster.up("-80,80-")
        memcached.start()
        forwarder = Forwarder(memcached.port)
        node.kubectl("create", "namespace", NS)
        node.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
        started = time.monotonic()
        install_chart(node, NS)
        timings = {"helm install": time.monotonic() - started}
        reader = cluster.secret_ref("reader").name
        create_secret(node, NS, reader, cluster.secrets_dir / reader)
        node.apply(NS, yaml.safe_load(cluster.manifest_path.read_text()))
        pods = PodDiscovery(node)
        configs, rules = _monitoring(node, workdir, pods)
        (workdir / "prometheus").mkdir()
        prometheus = start_prometheus(
            workdir / "prometheus", {}, rule_files=[rules], scrape_configs=configs
        )
        traffic = TrafficGenerator(
            cluster.manifest_path,
            cluster.secrets_dir,
            workdir / "ledger.jsonl",
            TrafficOptions(rate=20, seed=29),
        ).start()
        yield World(node, cluster, forwarder, _closed_port(), prometheus, timings)
    finally:
        if traffic is not None:
            traffic.stop()
        if prometheus is not None:
            prometheus.stop()
        if pods is not None:
            pods.close()
        if forwarder is not None:
            forwarder.close()
        memcached.stop()
        cluster.down()


def _closed_port() -> int:
    """A port on the bridge address that was free a moment ago: nothing listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((BRIDGE_IP, 0))
        return int(sock.getsockname()[1])


def _rfc3339(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _firing(prometheus: Prometheus, alert: str, stream: str) -> list[dict[str, Any]]:
    return prometheus.query(
        f'ALERTS{{alertname="{alert}", alertstate="firing", stream="{stream}"}}'
    )


def test_a_wrong_sink_port_is_degraded_with_the_jobs_error_and_the_alerts_fire(
    world: World,
) -> None:
    w, name = world, "wrong-port"
    applied = time.monotonic()
    w.apply_stream(name, w.closed_port)

    def exited() -> dict[str, Any] | None:
        driver = w.driver(name)
        for container in (driver or {}).get("status", {}).get("containerStatuses") or []:
            ended = (container.get("state") or {}).get("terminated")
            if container["name"] == "spark-kubernetes-driver" and ended:
                return dict(ended)
        return None

    ended = wait_for(exited, "the driver's exit", timeout=300)
    exit_seen = time.monotonic()
    degraded = wait_for(
        lambda: (c := w.condition(name, "Degraded")).get("status") == "True" and c,
        "Degraded",
        timeout=60,
    )
    ready = w.condition(name, "Ready")
    message = degraded["message"]
    assert f"spec.sinks[0].servers[0]: memcached {BRIDGE_IP}:{w.closed_port} does not answer" in (
        message
    ), message
    assert degraded["reason"] == "JobFailed" and ready["status"] == "False", (degraded, ready)
    after_exit = _rfc3339(degraded["lastTransitionTime"]) - _rfc3339(ended["finishedAt"])
    assert after_exit <= 30, (after_exit, ended, degraded)
    events = [
        e for e in w.node.items(NS, "events")
        if e["involvedObject"]["name"] == name and e["reason"] == "JobFailed"
    ]  # fmt: skip
    assert events and "does not answer" in events[0]["message"], events
    w.timings["driver exit -> Degraded (status times)"] = after_exit
    w.timings["apply -> driver exit"] = exit_seen - applied

    # the real Prometheus, scraping the operator through the chart's PodMonitor and
    # evaluating the chart's rules: the lag keeps growing, and both alerts fire
    lag = wait_for(lambda: _firing(w.prometheus, "UpdateStreamLagHigh", name), "the lag alert", 240)
    w.timings["apply -> UpdateStreamLagHigh firing"] = time.monotonic() - applied
    assert {s["metric"]["shard"] for s in lag} == {"-80", "80-"}
    wait_for(lambda: _firing(w.prometheus, "UpdateStreamDegraded", name), "the Degraded alert", 120)
    w.timings["apply -> UpdateStreamDegraded firing"] = time.monotonic() - applied
    w.delete_stream(name)


def test_ready_only_after_the_first_batch_and_the_driver_scraped_through_the_chart(
    world: World,
) -> None:
    w, name = world, "flowing"
    applied = time.monotonic()
    w.apply_stream(name, w.memcached.port)
    seen: list[tuple[str, str, int]] = []

    def ready() -> dict[str, Any] | None:
        status = w.status(name)
        condition = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
        batches = sum(e.get("batches", 0) for e in status.get("keyRanges", []))
        seen.append((condition.get("status", ""), condition.get("reason", ""), batches))
        return status if condition.get("status") == "True" else None

    status = wait_for(ready, "Ready", timeout=400)
    w.timings["apply -> Ready"] = time.monotonic() - applied
    (entry,) = status["keyRanges"]
    assert entry["batches"] >= 1, status  # Ready only once the job reported a batch
    waiting = {reason for flag, reason, _ in seen if flag == "False"}
    assert waiting & {"Pending", "Starting"}, seen
    assert all(batches == 0 for flag, _, batches in seen if flag == "False"), seen

    driver = w.driver(name)
    assert driver is not None
    (container,) = [
        c for c in driver["spec"]["containers"] if c["name"] == "spark-kubernetes-driver"
    ]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    pod = driver["metadata"]["name"]

    def scraped() -> list[dict[str, Any]]:
        return w.prometheus.query(f'updatestream_snapshot_rows_total{{pod="{pod}"}}')

    found = wait_for(scraped, "the driver's metrics in Prometheus", timeout=120)
    assert found[0]["metric"]["job"].endswith("-jobs"), found  # the chart's job PodMonitor
    # counted once: the driver's own events are dropped, the operator's kept
    assert not w.prometheus.query(f'updatestream_events_total{{pod="{pod}"}}')
    wait_for(
        lambda: w.prometheus.query(f'updatestream_events_total{{stream="{name}"}}'),
        "the stream's events from the operator",
        timeout=120,
    )

    log = w.node.kubectl("logs", "-n", NS, pod, "-c", "spark-kubernetes-driver")
    assert "INFO updatestream_jobs.batches: batch 0:" in log, log[-3000:]
    assert " INFO " not in log.replace("INFO updatestream_jobs.batches", ""), log[-3000:]
    follower = subprocess.Popen(
        [
            str(w.node.bin_dir / "kubectl"),
            "logs",
            "-f",
            "-n",
            NS,
            pod,
            "-c",
            "spark-kubernetes-driver",
        ],
        env=w.node.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        w.delete_stream(name)
        shutdown, _ = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(timeout=10)
    # no claim of its own to delete at shutdown: no KubernetesClientException stack trace
    assert "persistentvolumeclaims" not in shutdown, shutdown[-3000:]
    assert "KubernetesClientException" not in shutdown, shutdown[-3000:]


def test_a_stream_that_cannot_be_scheduled_says_so_in_ready(world: World) -> None:
    w, name = world, "too-big"
    w.apply_stream(name, w.memcached.port, spark={"driver": {"coreRequest": "16"}})
    ready = wait_for(
        lambda: (c := w.condition(name, "Ready")).get("reason") == "Unschedulable" and c,
        "Ready's reason Unschedulable",
        timeout=300,
    )
    assert ready["status"] == "False"
    assert "cannot be scheduled" in ready["message"] and "Insufficient cpu" in ready["message"]
    assert w.condition(name, "Degraded").get("status") == "False"
    w.delete_stream(name)


def test_the_operator_and_the_node_say_nothing_routine(world: World) -> None:
    w = world
    log = w.node.kubectl("logs", "-n", NS, "deploy/updatestream-updatestream-operator")
    assert "ERROR" not in log and "TooManyRequests" not in log, log[-3000:]
    assert "Timer 'refresh_stream' succeeded." not in log
    assert "GET /healthz" not in log
    reasons = {e["reason"] for e in w.node.items(NS, "events")}
    assert "MissingClusterDNS" not in reasons, reasons
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(w.timings, indent=1) + "\n")
