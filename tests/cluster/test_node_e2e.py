"""End to end on a real one-node Kubernetes: the chart's operator Pod from the project's image
launches a Spark job as a driver Pod and an executor Pod, which stream live traffic into the
Version Stream, memcached and CDCv2 sinks; a live split applied to the Keyspace with kubectl
is hopped inside the running job; `updatestream verify` checks every sink. The operator Pod
runs the image's vtctldclient, which it follows a Keyspace's Vitess cluster with. On the way
the node loses Pods as a failing node would (deleted at once, no grace): an executor
mid-stream, the operator in the middle of the hop, and the driver after it; the stream goes on
through each.

Real components throughout (tests/cluster/node.py): kubelet runs the Pods with containerd and
runc, in a namespace enforcing the `restricted` Pod Security Standard. The development
cluster's MariaDB shards, the memcached and the Version Stream MariaDB run on loopback and are
reached by the Pods through forwarders on the bridge address. The driver's checkpoints and the
CDCv2 files go to a local PersistentVolume, a directory the test reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.reshard import ReshardOptions
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.vitess.runtime import VITESS_VERSION

from harness.stream_job import reshard
from tests.cluster.node import (
    BRIDGE_IP,
    REPO_ROOT,
    Forwarder,
    Node,
    create_secret,
    install_chart,
    wait_for,
)
from tests.conftest import MariaDBFixture

NS = "us-node"
STREAM = "orders-node"
SINK_SECRET = "node-versionstream"
SINK_DATABASE = "us_node_e2e"
CLAIM = "updatestream-checkpoints"
CLAIM_MOUNT = "/var/lib/updatestream/checkpoints"
CLI = str(Path(sys.executable).with_name("updatestream"))
STREAM_SELECTOR = f"updatestream.io/stream={STREAM}"
OPERATOR_SELECTOR = "app.kubernetes.io/component=operator"
OPERATOR_DEPLOYMENT = "deploy/updatestream-updatestream-operator"
REPORT = REPO_ROOT / ".updatestream" / "node-e2e-report.txt"


@dataclass
class World:
    node: Node
    cluster: DevCluster
    memcached: MemcachedServer
    sink: MariaDBFixture
    volume: Path  # the local PersistentVolume's directory
    secrets: Path
    forwarders: dict[str, Forwarder]

    def versionstream_rows(self) -> int:
        """Rows in the Version Stream (0 before the sink's first batch creates its table)."""
        with self.sink.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name = 'versionstream'",
                (SINK_DATABASE,),
            )
            if not cur.fetchone()[0]:
                return 0
            cur.execute(f"SELECT COUNT(*) FROM `{SINK_DATABASE}`.versionstream")
            return int(cur.fetchone()[0])

    def status(self) -> dict[str, Any]:
        found = self.node.items(NS, "updatestreams")
        return dict(found[0].get("status") or {}) if found else {}

    def condition(self, type_: str) -> tuple[str, str] | None:
        for c in self.status().get("conditions", []):
            if c["type"] == type_:
                return c["status"], c.get("reason", "")
        return None

    def pods(self) -> list[dict[str, Any]]:
        return self.node.items(NS, "pods", STREAM_SELECTOR)


def _local_volume(path: Path) -> list[dict[str, Any]]:
    on_node = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["updatestream-node"]}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{NS}-checkpoints"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "updatestream-local",
                "local": {"path": str(path)},
                "nodeAffinity": {
                    "required": {"nodeSelectorTerms": [{"matchExpressions": [on_node]}]}
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "updatestream-local",
                "volumeName": f"{NS}-checkpoints",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def _install(node: Node) -> None:
    install_chart(node, NS, "--set", f"spark.checkpointClaim={CLAIM}")


def _operator_has_vtctldclient(node: Node) -> None:
    """The operator Pod runs the image's vtctldclient, of the pinned Vitess, and the operator's
    own lookup finds it there (it reads a Keyspace's spec.vitess with it)."""

    def run(*command: str) -> str:
        return node.kubectl("exec", "-n", NS, OPERATOR_DEPLOYMENT, "-c", "operator", "--", *command)

    _, major, patch = VITESS_VERSION.removeprefix("v").split(".")  # v0.24.4 is Vitess 24.0.4
    printed = run("vtctldclient", "--version")
    assert f"Version: {major}.0.{patch} " in printed, printed
    lookup = "from updatestream.vitess_topology import vtctldclient_program as p; print(p())"
    assert run("python", "-c", lookup).strip() == "/usr/local/bin/vtctldclient"


@pytest.fixture
def world(
    node: Node, mariadb_server: MariaDBFixture, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("node-e2e")
    cluster = DevCluster(workdir / "cluster")
    memcached = MemcachedServer()
    forwarders: dict[str, Forwarder] = {}
    try:
        cluster.up("-80,80-")
        memcached.start()
        for shard in ("-80", "80-"):
            forwarders[shard] = Forwarder(int(cluster.server(shard).port or 0))
        forwarders["memcached"] = Forwarder(memcached.port)
        forwarders["sink"] = Forwarder(mariadb_server.port)
        volume = workdir / "volume"
        volume.mkdir()
        os.chown(volume, 10001, 10001)
        secrets = workdir / "secrets"
        (secrets / SINK_SECRET).mkdir(parents=True)
        (secrets / SINK_SECRET / "username").write_text(mariadb_server.admin.username)
        (secrets / SINK_SECRET / "password").write_text(mariadb_server.admin.password)
        node.kubectl("create", "namespace", NS)
        node.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
        yield World(node, cluster, memcached, mariadb_server, volume, secrets, forwarders)
    finally:
        for forwarder in forwarders.values():
            forwarder.close()
        memcached.stop()
        cluster.down()


def _keyspace(w: World) -> dict[str, Any]:
    """The development cluster's manifest with every shard at its forwarder."""
    keyspace = yaml.safe_load(w.cluster.manifest_path.read_text())
    for shard in keyspace["spec"]["shards"]:
        shard["mysql"]["host"] = BRIDGE_IP
        shard["mysql"]["port"] = w.forwarders[shard["name"]].port
    return dict(keyspace)


def _stream(w: World, start: dict[str, str]) -> dict[str, Any]:
    sinks = [
        {"type": "memcached", "servers": [f"{BRIDGE_IP}:{w.forwarders['memcached'].port}"]},
        {
            "type": "versionStream",
            "mysql": {"host": BRIDGE_IP, "port": w.forwarders["sink"].port},
            "database": SINK_DATABASE,
            "credentialsSecret": {"name": SINK_SECRET},
        },
        {"type": "cdcv2", "path": f"{CLAIM_MOUNT}/cdc", "allowedLatenessSeconds": 1},
    ]
    return {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": "UpdateStream",
        "metadata": {"name": STREAM},
        "spec": {
            "keyspace": "commerce",
            "keyRanges": ["-"],
            "start": {"mode": "gtid", "gtid": start},
            "sinks": sinks,
        },
    }


def _diagnostics(node: Node) -> str:
    """What the node shows when the stream does not do what the test waits for."""
    parts = []
    for args in (
        ("get", "pods", "-n", NS, "-o", "wide"),
        ("get", "events", "-n", NS, "--sort-by=.lastTimestamp"),
        ("get", "updatestream", STREAM, "-n", NS, "-o", "jsonpath={.status.conditions}"),
        ("logs", "-n", NS, OPERATOR_DEPLOYMENT, "--tail=30"),
        ("logs", "-n", NS, "-l", "spark-role=driver", "-c", "spark-kubernetes-driver", "--tail=60"),
    ):
        parts.append(f"$ kubectl {' '.join(args)}\n{node.kubectl(*args, check=False)[-6000:]}")
    return "\n".join(parts)


def _relaunched(w: World, first: dict[str, Any]) -> bool:
    """A new driver Pod (another uid) of the next launch runs, with an executor."""
    pods = w.pods()
    return _replaced(pods, first) and any(
        p["metadata"]["labels"].get("spark-role") == "executor" for p in pods
    )


def _force_delete(node: Node, pod: dict[str, Any]) -> None:
    node.kubectl("delete", "pod", pod["metadata"]["name"], "-n", NS, "--force", "--grace-period=0")


def _replaced(pods: list[dict[str, Any]], lost: dict[str, Any]) -> bool:
    """Another Pod (another uid) of the lost one's role runs."""
    role = lost["metadata"]["labels"].get("spark-role")
    return any(
        p["metadata"]["uid"] != lost["metadata"]["uid"]
        and p["metadata"]["labels"].get("spark-role") == role
        and p["status"].get("phase") == "Running"
        for p in pods
    )


def _lose_an_executor(w: World) -> None:
    """An executor Pod deleted mid-stream: the driver asks for another, the query goes on."""
    (lost,) = w.node.items(NS, "pods", "spark-role=executor")
    before = w.versionstream_rows()
    _force_delete(w.node, lost)
    try:
        wait_for(lambda: _replaced(w.pods(), lost), "a new executor running", 300)
        wait_for(lambda: w.versionstream_rows() > before, "events after the lost executor", 300)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnostics(w.node)}") from None


def _hop_with_the_operator_lost(w: World) -> str:
    """A live split applied to the Keyspace, and the operator Pod deleted while the job hops:
    the Deployment's next operator finds the hop where the status left it and completes it.
    Returns what the lost operator had recorded of the hop when it went."""
    cluster, node = w.cluster, w.node
    reshard(cluster, "-80", "-40,40-80", ReshardOptions(min_replicate_seconds=5))
    for shard in ("-40", "40-80"):
        w.forwarders[shard] = Forwarder(int(cluster.server(shard).port or 0))
    node.apply(NS, _keyspace(w))

    def seen() -> str:
        status = w.status()
        if status.get("hopCount"):
            return "completed"
        return "recorded" if (status.get("keyRanges") or [{}])[0].get("hop") else "not yet seen"

    # the operator goes as soon as it recorded the hop (or after 15 s without it), before the
    # job's report lets it complete the hop
    deadline, recorded = time.monotonic() + 15, seen()
    while recorded == "not yet seen" and time.monotonic() < deadline:
        time.sleep(0.25)
        recorded = seen()
    (operator,) = node.items(NS, "pods", OPERATOR_SELECTOR)
    _force_delete(node, operator)
    assert recorded != "completed", "the hop completed before the operator Pod was deleted"
    try:
        wait_for(lambda: _replaced(node.items(NS, "pods", OPERATOR_SELECTOR), operator),
                 "the next operator Pod running", 300)  # fmt: skip
        wait_for(lambda: w.condition("Hopping") == ("False", "HopCompleted"), "the hop", 300)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnostics(node)}") from None
    return recorded


def _verify(w: World, ledger: Path, status_file: Path) -> dict[str, dict[str, Any]]:
    options = {
        "memcached": [
            "--servers", w.memcached.address,
            "--keyspace-manifest", str(w.cluster.manifest_path),
            "--secrets-dir", str(w.cluster.secrets_dir),
        ],
        "versionstream": [
            "--mysql", f"127.0.0.1:{w.sink.port}", "--secrets-dir", str(w.secrets),
            "--secret", SINK_SECRET, "--database", SINK_DATABASE,
        ],
        "cdcv2": ["--path", str(w.volume / "cdc")],
    }  # fmt: skip
    reports = {}
    for sink, extra in options.items():
        done = subprocess.run(
            [CLI, "verify", "--ledger", str(ledger), "--sink", sink, *extra,
             "--status-file", str(status_file), "--json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
        reports[sink] = json.loads(done.stdout)
    return reports


def _caught_up(w: World, ledger: Path, job_id: str) -> dict[str, dict[str, Any]]:
    """`updatestream verify` of every sink against the ledger, run until none has lost a change
    or holds a stale key; a wait that runs out says what each sink last lacked."""
    status_file = w.volume.parent / "status.json"
    last: dict[str, dict[str, Any]] = {}

    def clean() -> dict[str, dict[str, Any]] | None:
        progress = f"{job_id}-progress"
        maps = w.node.items(NS, "configmaps", "")
        data = next((c.get("data") or {} for c in maps if c["metadata"]["name"] == progress), {})
        status_file.write_text(data.get("status.json") or "{}")
        began = time.monotonic()
        last.update(_verify(w, ledger, status_file))
        lacks = {sink: (r["lost"], r.get("stale_keys", 0)) for sink, r in last.items()}
        print(f"verify took {time.monotonic() - began:.1f}s; (lost, stale) {lacks}", flush=True)
        done = all(r["lost"] == 0 and not r.get("stale_keys") for r in last.values())
        return dict(last) if done else None

    try:
        return wait_for(clean, "every sink to catch up with the ledger", timeout=300)
    except AssertionError as exc:
        verdicts = {sink: {k: v for k, v in r.items() if k != "duplicates_dropped_by_cause"}
                    for sink, r in last.items()}  # fmt: skip
        raise AssertionError(
            f"{exc}\nthe last verdicts: {json.dumps(verdicts)}\n{_diagnostics(w.node)}"
        ) from None


def _reached(what: str, since: float) -> None:
    """A line of the test's output (shown when it fails) with the time each stage took."""
    print(f"{time.monotonic() - since:6.1f}s after the apply: {what}", flush=True)


# every wait below is bounded and says what it waited for; together they can outlast the
# suite's default timeout on a loaded machine, which would cut them short without their message
@pytest.mark.timeout(1800)
def test_the_operator_pod_runs_a_spark_job_as_pods_that_deliver_every_change(
    world: World,
) -> None:
    w, node, cluster = world, world.node, world.cluster
    _install(node)
    _operator_has_vtctldclient(node)
    node.apply(NS, *_local_volume(w.volume))
    reader = cluster.secret_ref("reader").name
    create_secret(node, NS, reader, cluster.secrets_dir / reader)
    create_secret(node, NS, SINK_SECRET, w.secrets / SINK_SECRET)
    node.apply(NS, _keyspace(w))

    start = {s: cluster.server(s).gtid_position() for s in ("-80", "80-")}
    ledger = w.volume.parent / "ledger.jsonl"
    traffic = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, ledger, TrafficOptions(rate=50, seed=19)
    ).start()
    try:
        applied = time.monotonic()
        node.apply(NS, _stream(w, start))
        try:
            wait_for(lambda: w.versionstream_rows() > 0, "the first event in a sink", timeout=300)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_diagnostics(node)}") from None
        first_event = time.monotonic() - applied
        _reached("the first event in a sink", applied)
        roles = wait_for(
            lambda: (
                {p["metadata"]["labels"].get("spark-role") for p in w.pods()}
                >= {"driver", "executor"}
            ),
            "a driver and an executor Pod",
        )
        assert roles
        pods_wide = node.kubectl("get", "pods", "-n", NS, "-o", "wide")
        _lose_an_executor(w)
        # a live split, applied to the Keyspace as a user would: the job hops in place
        recorded = _hop_with_the_operator_lost(w)
        _reached("the hop completed", applied)
        time.sleep(5)  # traffic onto the new shards
        # the driver Pod deleted at once, as a failing node would lose it: the operator
        # relaunches the job, which resumes from its checkpoint on the claim
        (first,) = node.items(NS, "pods", "spark-role=driver")
        _force_delete(node, first)
        try:
            wait_for(lambda: _relaunched(w, first), "the relaunched driver running", 300)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_diagnostics(node)}") from None
        _reached("the relaunched driver running", applied)
        resumed_from = w.versionstream_rows()
        wait_for(lambda: w.versionstream_rows() > resumed_from, "events after the relaunch", 300)
        # the relaunch started with the dedup rule the first job reported after its hop
        entry = w.status()["keyRanges"][0]
        assert "-80" in (entry.get("dedup") or {}).get("watermarks", {}), entry
        (config,) = [
            c
            for c in node.items(NS, "configmaps", STREAM_SELECTOR)
            if c["metadata"]["name"].endswith("-config")
        ]
        assert yaml.safe_load(config["data"]["job.yaml"])["dedup"] == entry["dedup"]
    finally:
        stats = traffic.stop()

    (driver,) = node.items(NS, "pods", "spark-role=driver")
    job_id = driver["metadata"]["name"]
    reports = _caught_up(w, ledger, job_id)
    _reached("every sink caught up", applied)
    for sink, verdict in reports.items():
        assert verdict["lost"] == 0 and verdict["duplicates_delivered"] == 0, (sink, verdict)
        assert verdict["committed"] == stats.rows, (sink, verdict)
        assert not verdict.get("stale_keys"), (sink, verdict)
    for pod in w.pods():
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
    reasons = [
        e["reason"] for e in node.items(NS, "events") if e["involvedObject"]["name"] == STREAM
    ]
    assert reasons.count("Launched") == 1 and reasons.count("Relaunched") == 1, reasons
    assert reasons.count("HopCompleted") == 1, reasons
    status = w.status()
    assert status["hopCount"] == 1
    (hop,) = status["hops"]
    assert (hop["method"], hop["phase"]) == ("InJob", "Completed")
    assert (hop["fromShards"], hop["toShards"]) == (["-80", "80-"], ["-40", "40-80", "80-"])

    node.kubectl("delete", "updatestream", STREAM, "-n", NS, "--wait=true", "--timeout=180s")

    def gone() -> bool:
        left = [
            *w.pods(),
            *node.items(NS, "configmaps", STREAM_SELECTOR),
            *node.items(NS, "services", STREAM_SELECTOR),
        ]
        return not left

    wait_for(gone, "no Pod, ConfigMap or Service of the stream left", timeout=180)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(
        f"time from kubectl apply of the UpdateStream to the first event in a sink: "
        f"{first_event:.1f}s\n"
        f"cluster-up {node.timings['cluster-up']:.1f}s, image build and load "
        f"{node.timings['image']:.1f}s\ncommitted rows {stats.rows}\n"
        f"the hop when the operator Pod was deleted: {recorded}\n\n{pods_wide}\n"
        + json.dumps(reports, indent=1)
    )
