"""A real Prometheus (Debian's /usr/bin/prometheus) on loopback, scraping given targets.

Started with a one-second scrape interval and its own TSDB directory; stopped by pid. The
chart's monitors (Prometheus Operator PodMonitors) become scrape configurations here the way
the Prometheus Operator makes them (`monitor_scrape_config`): discovered Pods kept by the
monitor's namespaces, label selector and port name, with its metric relabelings.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.kube import free_port

PROMETHEUS = "/usr/bin/prometheus"
_STARTS = 3  # attempts when the picked port was taken meanwhile


class PrometheusError(Exception):
    """Prometheus did not start, or a query was refused."""


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector; PrometheusError if it is refused (bad PromQL)."""
        params = urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise PrometheusError(f"query {expr!r} refused: {body.get('error')}")
        result = body["data"]["result"]
        if body["data"]["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def wait_for_scrapes(self, job: str, count: int, timeout: float = 30.0) -> None:
        """Wait until `job` has been scraped successfully at least `count` more times."""
        start = self._scrapes(job)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._scrapes(job) >= start + count:
                return
            time.sleep(0.25)
        raise PrometheusError(f"job {job} was not scraped {count} times within {timeout:.0f}s")

    def _scrapes(self, job: str) -> int:
        found = self.query(f'sum_over_time(up{{job="{job}"}}[10m])')  # successful scrapes
        return int(float(found[0]["value"][1])) if found else 0

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def _relabel(rule: dict[str, Any]) -> dict[str, Any]:
    """A monitor's relabeling (camelCase) as Prometheus configuration (snake_case)."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(key, key.lower()): value for key, value in rule.items()}


def _label(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def monitor_scrape_config(
    monitor: dict[str, Any], discovery_url: str | None, interval: str = "1s"
) -> dict[str, Any]:
    """A PodMonitor's first endpoint as a Prometheus scrape configuration.

    With `discovery_url` (an HTTP service discovery listing the cluster's Pods with the meta
    labels of Prometheus' Kubernetes discovery: Debian's Prometheus is built without the
    latter) Pods are kept as the Prometheus Operator keeps them: those in the monitor's
    namespaces with its labels, at the container port of its name. Without it the
    configuration has no targets yet: add `static_configs` (the metric relabelings apply)."""
    spec = monitor["spec"]
    endpoint = spec["podMetricsEndpoints"][0]
    config: dict[str, Any] = {
        "job_name": f"podMonitor/{monitor['metadata']['namespace']}/{monitor['metadata']['name']}",
        "honor_labels": bool(endpoint.get("honorLabels")),
        "metrics_path": endpoint.get("path", "/metrics"),
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "metric_relabel_configs": [_relabel(r) for r in endpoint.get("metricRelabelings") or []],
    }
    if discovery_url is None:
        return config
    keep = []
    namespaces = (spec.get("namespaceSelector") or {}).get("matchNames")
    if namespaces:
        keep.append(
            {
                "source_labels": ["__meta_kubernetes_namespace"],
                "regex": "|".join(namespaces),
                "action": "keep",
            }
        )
    keep += [
        {
            "source_labels": [f"__meta_kubernetes_pod_label_{_label(key)}"],
            "regex": value,
            "action": "keep",
        }
        for key, value in (spec.get("selector") or {}).get("matchLabels", {}).items()
    ]
    keep += [
        {
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": endpoint["port"],
            "action": "keep",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    discovery = [{"url": discovery_url, "refresh_interval": "2s"}]
    return {**config, "http_sd_configs": discovery, "relabel_configs": keep}


def pod_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Running Pods as HTTP service discovery target groups: one per container port, with the
    meta labels Prometheus' Kubernetes discovery gives (role pod)."""
    groups = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or pod["status"].get("phase") != "Running":
            continue
        metadata = pod["metadata"]
        common = {
            "__meta_kubernetes_namespace": metadata["namespace"],
            "__meta_kubernetes_pod_name": metadata["name"],
            "__meta_kubernetes_pod_ip": ip,
            **{
                f"__meta_kubernetes_pod_label_{_label(k)}": v
                for k, v in (metadata.get("labels") or {}).items()
            },
        }
        for container in pod["spec"]["containers"]:
            for port in container.get("ports") or []:
                labels = {
                    **common,
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                }
                groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_prometheus(
    workdir: Path,
    targets: dict[str, Sequence[str]],
    timeout: float = 60.0,
    rule_files: Sequence[Path] = (),
    scrape_configs: Sequence[dict[str, Any]] = (),
) -> Prometheus:
    """Prometheus scraping each job's `host:port` targets every second, and `scrape_configs`
    as given, evaluating the alerting rules of `rule_files` every second."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(addresses)}]}
            for job, addresses in targets.items()
        ]
        + list(scrape_configs),
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    log = workdir / "prometheus.log"
    for _ in range(_STARTS):
        url = f"http://127.0.0.1:{free_port()}"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address={url.removeprefix('http://')}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        prometheus = Prometheus(url, process, log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            if _ready(url):
                return prometheus
            time.sleep(0.2)
        prometheus.stop()
        if "address already in use" not in log.read_text(errors="replace"):
            break
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise PrometheusError(f"prometheus did not start; its log ends with:\n{tail}")


@contextlib.contextmanager
def running_prometheus(
    workdir: Path,
    targets: dict[str, Sequence[str]],
    rule_files: Sequence[Path] = (),
    scrape_configs: Sequence[dict[str, Any]] = (),
) -> Iterator[Prometheus]:
    prometheus = start_prometheus(
        workdir, targets, rule_files=rule_files, scrape_configs=scrape_configs
    )
    try:
        yield prometheus
    finally:
        prometheus.stop()
