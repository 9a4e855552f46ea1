"""The operator under kopf's KopfRunner against a real API server, as its own ServiceAccount,
launching jobs with spark-submit (driver Pods stay Pending: no kubelet runs here).

One UpdateStream goes through create, progress, update, suspend, resume, a serving-shard
change (one hop) and deletion. The whole time, every status, Event and log line is checked
never to show the Secret's value.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_operator.launchers.settings import ClusterSettings
from updatestream_operator.publisher import publish_once
from updatestream_operator.reconciler.naming import LABEL_STREAM_UID
from updatestream_operator.storage import KubeStore

from harness.kube import KubeApi, free_port
from harness.operator import (
    SECRET_VALUE,
    SPARK_ACCOUNT,
    StreamWatch,
    apply,
    get,
    items,
    keyspace_manifest,
    kopf_operator,
    prepare_operator,
    stream_manifest,
    wait_for,
)
from tests.charts.podsecurity import restricted_violations

NS = "us-life"
T0 = 1_700_000_100


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class Operator(StreamWatch):
    def __init__(self, api: KubeApi, metrics_port: int, logs: _Capture) -> None:
        super().__init__(api, NS)
        self.metrics_port = metrics_port
        self.logs = logs


ENFORCE = "pod-security.kubernetes.io/enforce"
TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}
BASE_DRIVER_TEMPLATE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"annotations": {"example.com/owner": "data-platform"}},
    "spec": {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [TOLERATION],
        "containers": [
            {
                "name": "spark-kubernetes-driver",
                "volumeMounts": [{"name": "work", "mountPath": "/var/lib/updatestream"}],
            }
        ],
        "volumes": [{"name": "work", "emptyDir": {"sizeLimit": "1Gi"}}],
    },
}


@pytest.fixture(scope="module")
def operator(kube_api: KubeApi, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    workdir = tmp_path_factory.mktemp("operator")
    kubeconfig = prepare_operator(kube_api, workdir, NS)
    # the API server's PodSecurity admission refuses a driver Pod that is not `restricted`
    kube_api.kubectl("label", "namespace", NS, f"{ENFORCE}=restricted", "--overwrite")
    port = free_port()
    base_template = workdir / "driver-pod-template.yaml"  # as the chart mounts one
    base_template.write_text(yaml.safe_dump(BASE_DRIVER_TEMPLATE))
    cluster = ClusterSettings(
        image="registry.invalid/updatestream:test",
        service_account=SPARK_ACCOUNT,
        driver_pod_template=base_template,
    )
    capture = _Capture()
    root = logging.getLogger()
    root.addHandler(capture)
    try:
        with kopf_operator(
            kube_api,
            NS,
            kubeconfig,
            launcher="spark-submit",
            metrics_port=port,
            metrics_address="127.0.0.1",
            timer_interval=2.0,
            cluster=cluster,
        ) as runner:
            yield Operator(kube_api, port, capture)
        capture.lines.append(runner.output)
    finally:
        root.removeHandler(capture)
    assert SECRET_VALUE not in "\n".join(capture.lines)


def _driver_pods(op: Operator, uid: str) -> list[dict[str, Any]]:
    return [
        p
        for p in items(op.api, NS, "pods", f"{LABEL_STREAM_UID}={uid}")
        if p["metadata"].get("labels", {}).get("updatestream.io/role") == "driver"
    ]


def _publish(op: Operator, job: str, launch_id: int, report: dict[str, Any], tmp: Path) -> None:
    """Do what the driver's sidecar does: copy a status file into the progress ConfigMap."""
    path = tmp / "status.json"
    path.write_text(json.dumps(report))
    store = KubeStore.connect(str(op.api.kubeconfig))
    publish_once(
        store,
        status_file=path,
        namespace=NS,
        config_map=f"{job}-progress",
        launch_id=launch_id,
    )


def _patch_spec(op: Operator, name: str, **spec: Any) -> None:
    patch = json.dumps({"spec": spec})
    op.api.kubectl("patch", "-n", NS, "updatestream", name, "--type=merge", "-p", patch)


def _token(shard: str, ts: int, seq: int) -> dict[str, Any]:
    return {"ts": ts, "shard": shard, "pos": f"0-1-{seq}", "flavor": "mariadb"}


def _launch_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"]["updatestream.io/launch-id"])


def _job_yaml(op: Operator, job: str) -> dict[str, Any]:
    """The job configuration the launch's ConfigMap holds (`updatestream run --config`)."""
    config_map = get(op.api, NS, "configmap", f"{job}-config")
    assert config_map is not None
    document: dict[str, Any] = yaml.safe_load(config_map["data"]["job.yaml"])
    return document


def _stream_yaml(op: Operator, job: str) -> dict[str, Any]:
    stream: dict[str, Any] = _job_yaml(op, job)["stream"]
    return stream


class TestLifecycle:
    """Ordered steps of one stream's life; each step starts from where the previous ended."""

    uid = ""
    job = ""

    def test_create_launches_one_driver_pod_owned_by_the_stream(self, operator: Operator) -> None:
        op = operator
        apply(op.api, NS, keyspace_manifest("commerce"))
        apply(op.api, NS, stream_manifest("orders", "commerce"))
        stream = wait_for(lambda: op.stream("orders"), "the UpdateStream")
        TestLifecycle.uid = uid = stream["metadata"]["uid"]
        pods = wait_for(lambda: _driver_pods(op, uid), "the driver Pod", timeout=240)
        assert len(pods) == 1
        pod = pods[0]
        TestLifecycle.job = job = pod["metadata"]["name"]
        assert pod["status"]["phase"] == "Pending"
        owners = pod["metadata"]["ownerReferences"]
        assert [(o["kind"], o["uid"]) for o in owners] == [("UpdateStream", uid)]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["job-config"]["configMap"]["name"] == f"{job}-config"
        assert any(v.get("secret", {}).get("secretName") == "reader" for v in volumes.values())
        assert pod["spec"]["serviceAccountName"] == SPARK_ACCOUNT
        driver = next(
            c for c in pod["spec"]["containers"] if c["name"] == "spark-kubernetes-driver"
        )
        # the Spark main file is `updatestream run` itself: its options, not the subcommand
        assert driver["args"][-2:] == ["--config", "/etc/updatestream/job/job.yaml"]
        assert "run" not in driver["args"]
        job_yaml = _job_yaml(op, job)
        assert job_yaml["keyRange"] == "-"
        assert job_yaml["statusFile"] == "/var/run/updatestream/status.json"
        assert job_yaml["metricsHost"] == "0.0.0.0"  # Prometheus scrapes the Pod's address
        assert "dedup" not in job_yaml
        # the driver re-reads its Keyspace through the API to hop inside its running query
        assert job_yaml["keyspaceWatch"] == f"kubernetes:{NS}/commerce"
        assert pod["metadata"]["annotations"]["updatestream.io/in-job-hops"] == "true"
        containers = {c["name"] for c in pod["spec"]["containers"]}
        assert containers == {"spark-kubernetes-driver", "progress-publisher"}
        # the Pod spark-submit made from the launcher's template, held to the chart's checker
        assert restricted_violations(pod["spec"]) == []
        # built on the deployment's driver template: its scheduling reaches the Pod
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert TOLERATION in pod["spec"]["tolerations"]
        assert pod["metadata"]["annotations"]["example.com/owner"] == "data-platform"
        assert volumes["work"]["emptyDir"] == {"sizeLimit": "1Gi"}
        mounts = {m["mountPath"]: m["name"] for m in driver["volumeMounts"]}
        checkpoints = ClusterSettings().checkpoint_root
        assert volumes[mounts[checkpoints]] == {"name": mounts[checkpoints], "emptyDir": {}}
        namespace = get(op.api, NS, "namespace", NS)
        assert namespace is not None
        assert namespace["metadata"]["labels"][ENFORCE] == "restricted"

        config_map = get(op.api, NS, "configmap", f"{job}-config")
        assert config_map is not None
        assert config_map["metadata"]["ownerReferences"][0]["uid"] == uid
        start = _stream_yaml(op, job)["spec"]["start"]
        assert start == {"mode": "timestamp", "timestamp": 1_700_000_000}
        assert "reader" in config_map["data"]["keyspace.yaml"]

        wait_for(
            lambda: op.condition("orders", "Ready") == ("False", "Pending"), "Ready False, Pending"
        )
        status = op.status("orders")
        assert status["observedGeneration"] == stream["metadata"]["generation"]
        assert status["keyRanges"][0]["job"] == job
        assert status["shards"] == "-80,80-"
        assert op.condition("orders", "Degraded") == ("False", "AsExpected")
        assert "Launched" in op.reasons("orders")
        printed = op.api.kubectl("get", "-n", NS, "updatestream", "orders").stdout
        # no kubelet here: the driver Pods stay Pending, and Ready says so
        assert "Launched" not in printed and "False" in printed and "-80,80-" in printed

    def test_progress_reaches_status_and_metrics(self, operator: Operator, tmp_path: Path) -> None:
        op, job = operator, TestLifecycle.job
        report = {
            "shards": {
                "-80": {"token": _token("-80", T0, 10), "byOp": {"insert": 4}, "lagSeconds": 3},
                "80-": {"token": _token("80-", T0 + 2, 20), "byOp": {"update": 1}, "lagSeconds": 1},
            },
            "duplicates": {},
            "updatedAt": time.time(),  # fresh: the lag is the job's own
        }
        _publish(op, job, 1, report, tmp_path)

        def folded() -> dict[str, Any] | None:
            status = op.status("orders")
            return status if status.get("maxLagSeconds") == 3 else None

        status = wait_for(folded, "progress folded into status")
        shards = {s["name"]: s for s in status["keyRanges"][0]["shards"]}
        assert shards["-80"]["token"]["pos"] == "0-1-10"
        assert shards["80-"]["events"] == {"update": 1}
        with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics") as r:
            text = r.read().decode()
        assert (
            'updatestream_lag_seconds{namespace="us-life",shard="-80",stream="orders"} 3.0' in text
        )
        labels = 'namespace="us-life",op="insert",shard="-80",stream="orders"'
        assert f"updatestream_events_total{{{labels}}} 4.0" in text
        assert 'updatestream_hops_total{namespace="us-life",stream="orders"} 0.0' in text

        # a job error quoting a password reaches status scrubbed
        _publish(
            op, job, 1, {**report, "error": f"login failed: password={SECRET_VALUE}"}, tmp_path
        )
        wait_for(lambda: op.condition("orders", "Degraded") == ("True", "JobError"), "Degraded")
        degraded = next(c for c in op.status("orders")["conditions"] if c["type"] == "Degraded")
        assert "password=***" in degraded["message"]
        # the error stays the key range's problem until the job delivers a batch
        _publish(op, job, 1, {**report, "batches": 1}, tmp_path)
        wait_for(lambda: op.condition("orders", "Degraded") == ("False", "AsExpected"), "recovery")

    def test_update_relaunches_from_the_recorded_positions(self, operator: Operator) -> None:
        op, job = operator, TestLifecycle.job
        _patch_spec(op, "orders", sinks=[{"type": "cdcv2", "path": "/data/other"}])
        pods = wait_for(
            lambda: [p for p in _driver_pods(op, TestLifecycle.uid) if _launch_of(p) == 2],
            "the relaunched driver",
            timeout=240,
        )
        assert pods[0]["metadata"]["name"] == job
        start = _stream_yaml(op, job)["spec"]["start"]
        assert start["mode"] == "tokens"
        assert start["tokens"]["-80"]["pos"] == "0-1-10"
        assert start["tokens"]["80-"]["pos"] == "0-1-20"
        assert len(_driver_pods(op, TestLifecycle.uid)) == 1
        assert "Reconfiguring" in op.reasons("orders")

    def test_suspend_removes_the_job_and_keeps_positions(self, operator: Operator) -> None:
        op, job = operator, TestLifecycle.job
        _patch_spec(op, "orders", suspend=True)
        wait_for(lambda: op.condition("orders", "Ready") == ("False", "Suspended"), "Suspended")
        # the status is recorded before the stop acts: the Pod goes a moment later
        wait_for(lambda: _driver_pods(op, TestLifecycle.uid) == [], "the driver Pod deleted")
        wait_for(lambda: get(op.api, NS, "configmap", f"{job}-config") is None, "its config")
        leftovers = [
            s["metadata"]["name"]
            for s in items(op.api, NS, "services")
            if job in s["metadata"]["name"]
        ]
        assert leftovers == []
        shards = {s["name"]: s for s in op.status("orders")["keyRanges"][0]["shards"]}
        assert shards["-80"]["token"]["pos"] == "0-1-10"

    def test_resume_continues_from_the_positions(self, operator: Operator, tmp_path: Path) -> None:
        op, job = operator, TestLifecycle.job
        _patch_spec(op, "orders", suspend=False)
        pods = wait_for(
            lambda: _driver_pods(op, TestLifecycle.uid), "the resumed driver", timeout=240
        )
        assert _launch_of(pods[0]) == 3
        assert _stream_yaml(op, job)["spec"]["start"]["tokens"]["80-"]["pos"] == "0-1-20"
        wait_for(lambda: op.condition("orders", "Ready") == ("False", "Pending"), "Pending again")
        # the resumed job delivers more before the split
        report = {
            "shards": {
                "-80": {"token": _token("-80", T0 + 50, 15), "lagSeconds": 1},
                "80-": {"token": _token("80-", T0 + 60, 25), "lagSeconds": 1},
            }
        }
        _publish(op, job, 3, report, tmp_path)

        def moved() -> bool:
            shards = {s["name"]: s for s in op.status("orders")["keyRanges"][0]["shards"]}
            return shards["-80"].get("token", {}).get("pos") == "0-1-15"

        wait_for(moved, "the new positions in status")

    def test_a_split_hops_exactly_once(self, operator: Operator) -> None:
        # The driver Pod is Pending (no kubelet runs here), so it cannot hop inside a running
        # query: the hop stops it and relaunches it from planned positions.
        op, job = operator, TestLifecycle.job
        apply(op.api, NS, keyspace_manifest("commerce", serving=["-40", "40-80", "80-"]))
        pods = wait_for(
            lambda: [p for p in _driver_pods(op, TestLifecycle.uid) if _launch_of(p) == 4],
            "the driver relaunched after the hop",
            timeout=240,
        )
        assert pods[0]["metadata"]["annotations"]["updatestream.io/shard-map"] == "-40,40-80,80-"
        start = _stream_yaml(op, job)["spec"]["start"]
        assert start["mode"] == "resume"
        assert start["tokens"] == {"80-": _token("80-", T0 + 60, 25)}
        assert start["timestamps"] == {"-40": T0 + 50, "40-80": T0 + 50}
        job_yaml = _job_yaml(op, job)
        assert job_yaml["dedup"] == {
            "watermarks": {"-80": {"pos": "0-1-15", "flavor": "mariadb"}},
            "overlap_until": {"-40": T0 + 50, "40-80": T0 + 50},
        }
        assert job_yaml["hopStartedAt"] > T0

        wait_for(lambda: op.condition("orders", "Hopping") == ("False", "HopCompleted"), "hop done")
        wait_for(
            lambda: op.condition("orders", "Ready") == ("False", "Pending"), "Pending after hop"
        )
        time.sleep(6)  # a few more timer folds: still one hop, still launch 4
        status = op.status("orders")
        assert status["hopCount"] == 1
        (hop,) = status["hops"]
        assert hop["fromShards"] == ["-80", "80-"]
        assert hop["toShards"] == ["-40", "40-80", "80-"]
        assert hop["watermarks"] == {"-80": "0-1-15"}
        assert hop["durationSeconds"] >= 0 and hop["completedAt"]
        assert status["shards"] == "-40,40-80,80-"
        assert [_launch_of(p) for p in _driver_pods(op, TestLifecycle.uid)] == [4]
        reasons = op.reasons("orders")
        assert reasons.count("HopStarted") == 1 and reasons.count("HopCompleted") == 1

    def test_delete_leaves_nothing_behind(self, operator: Operator) -> None:
        op, uid = operator, TestLifecycle.uid
        op.api.kubectl("delete", "-n", NS, "updatestream", "orders", "--wait=false")
        wait_for(lambda: op.stream("orders") is None, "the stream to be deleted")
        assert _driver_pods(op, uid) == []
        assert items(op.api, NS, "configmaps", f"{LABEL_STREAM_UID}={uid}") == []
        owned = [
            obj["metadata"]["name"]
            for kind in ("configmaps", "services", "pods")
            for obj in items(op.api, NS, kind)
            if any(o["uid"] == uid for o in obj["metadata"].get("ownerReferences", []))
            or TestLifecycle.job in obj["metadata"]["name"]
        ]
        assert owned == []


def test_a_missing_keyspace_is_reported_as_degraded(operator: Operator) -> None:
    op = operator
    apply(op.api, NS, stream_manifest("lost", "nowhere"))
    wait_for(lambda: op.condition("lost", "Degraded") == ("True", "KeyspaceNotFound"), "Degraded")
    assert op.condition("lost", "Ready") == ("False", "KeyspaceNotFound")
    op.api.kubectl("delete", "-n", NS, "updatestream", "lost", "--wait=false")
    wait_for(lambda: op.stream("lost") is None, "the stream to be deleted")


def test_a_secret_the_operator_reads_is_scrubbed_from_its_logs(operator: Operator) -> None:
    """The local launcher reads Secrets through the API: their values join the scrubber."""
    store = KubeStore.connect(str(operator.api.kubeconfig))
    values = store.read_secret(NS, "reader")
    assert values["password"] == SECRET_VALUE
    logging.getLogger("updatestream_operator.test").warning("read %s", values)
    logging.getLogger("kopf.objects").error("failed with %s", SECRET_VALUE)
    (line,) = [line for line in operator.logs.lines if line.startswith("read {")]
    assert "'password': '***'" in line and "'username': 'updatestream'" in line
    assert SECRET_VALUE not in "\n".join(operator.logs.lines)


def test_no_secret_value_in_any_status_or_event(operator: Operator) -> None:
    op = operator
    op.events()
    everything = "\n".join(op.seen)
    assert op.seen and SECRET_VALUE not in everything
    assert SECRET_VALUE not in "\n".join(op.logs.lines)
    assert any("launching job" in line for line in op.logs.lines)
