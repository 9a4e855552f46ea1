"""End to end through the operator: a live split hopped by a real Spark job it launched.

Real components throughout: a kube-apiserver on etcd with the CRDs, the operator under kopf's
KopfRunner as its own ServiceAccount with the local launcher (`updatestream run` processes,
Spark in local mode), a development cluster of two mariadbd shards whose manifest is applied
as the Keyspace object, its Secrets as Kubernetes Secrets (an operator outside a cluster reads
them through the API for the local launcher), an UpdateStream into a Version Stream on a
MariaDB of its own and into CDCv2 files, and live traffic with a ledger. The cluster splits
`-80` into `-40,40-80` under that traffic, with filtered replication running a few seconds
before the cut-over so the new shards hold copies of changes already delivered; the new
manifest is applied to the API server as a user would. The job hops inside its running query;
the operator records the hop from the job's report. After the stream caught up,
`updatestream verify` checks both sinks against the ledger.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.reshard import ReshardOptions
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_operator.launchers.local import _processes_using
from updatestream_operator.reconciler.conditions import rfc3339

from harness.kube import KubeApi
from harness.operator import (
    OPERATOR_ACCOUNT,
    OPERATOR_NAMESPACE,
    StreamWatch,
    apply,
    condition_of,
    get,
    items,
    kopf_operator,
    prepare_operator,
    secret_from_files,
    wait_for,
)
from harness.stream_job import completed_hops, read_status, reshard
from harness.verify_command import verify_sink
from tests.conftest import MariaDBFixture
from updatestream.contract.job_config import JobConfig

NS = "us-e2e"
STREAM = "orders-e2e"
SINK_SECRET = "e2e-versionstream"
SINK_DATABASE = "us_e2e_operator"
SPLIT = ["-40", "40-80", "80-"]
# Filtered replication runs a few seconds before the cut-over, as it would in production.
OVERLAP = ReshardOptions(min_replicate_seconds=5)
# An operator outside a cluster with the local launcher and no --secrets-dir reads the Secrets
# the Keyspace and the sinks name through the API: the least-privilege ClusterRole does not
# allow that (in a cluster the kubelet mounts them), so this namespace grants it.
SECRET_READER = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: local-launcher-secrets}}
rules: [{{apiGroups: [""], resources: [secrets], verbs: [get]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: local-launcher-secrets}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: local-launcher-secrets}}
subjects: [{{kind: ServiceAccount, name: {OPERATOR_ACCOUNT}, namespace: {OPERATOR_NAMESPACE}}}]
"""


class World:
    def __init__(self, api: KubeApi, cluster: DevCluster, workdir: Path) -> None:
        self.api, self.cluster, self.workdir = api, cluster, workdir
        self.state_dir = workdir / "state"
        self.secrets_dir = workdir / "secrets"
        self.streams = StreamWatch(api, NS)

    def status(self) -> dict[str, Any]:
        return self.streams.status(STREAM)

    def reasons(self) -> list[str]:
        return self.streams.reasons(STREAM)

    def job_dir(self) -> Path:
        (job,) = [d for d in (self.state_dir / NS).iterdir() if d.is_dir()]
        return job

    def record(self) -> dict[str, Any]:
        return dict(json.loads((self.job_dir() / "job.json").read_text()))

    def report(self) -> dict[str, Any]:
        return read_status(self.job_dir() / "launch-1" / "status.json")

    def secret_values(self) -> list[str]:
        return [p.read_text() for p in self.secrets_dir.glob("*/password")]

    def verify(self, ledger: Path) -> dict[str, dict[str, Any]]:
        status_file = str(self.job_dir() / "launch-1" / "status.json")
        sink = next(s for s in self.stream_spec()["sinks"] if s["type"] == "versionStream")
        options = {
            "versionstream": [
                "--mysql", f"{sink['mysql']['host']}:{sink['mysql']['port']}",
                "--secrets-dir", str(self.secrets_dir), "--secret", SINK_SECRET,
                "--database", SINK_DATABASE,
            ],
            "cdcv2": ["--path", str(self.workdir / "cdc")],
        }  # fmt: skip
        return {
            name: verify_sink(ledger, name, *extra, "--status-file", status_file)
            for name, extra in options.items()
        }

    def stream_spec(self) -> dict[str, Any]:
        return dict((get(self.api, NS, "updatestream", STREAM) or {})["spec"])


def operator_secrets(
    api: KubeApi,
    namespace: str,
    cluster: DevCluster,
    sink_server: MariaDBFixture,
    sink_secret: str,
    secrets_dir: Path,
) -> None:
    """The Secrets a stream's job reads, in `namespace` and under `secrets_dir` as the local
    launcher mounts them: the cluster's reader and `sink_server`'s admin as `sink_secret`; and
    the Role that lets the operator read them."""
    api.kubectl("apply", "-n", namespace, "-f", "-", input=SECRET_READER)
    reader = cluster.secrets_dir / cluster.secret_ref("reader").name
    sink_server.admin_secret(secrets_dir, sink_secret)
    shutil.copytree(reader, secrets_dir / reader.name)
    for folder in secrets_dir.iterdir():
        secret_from_files(api, namespace, folder)


@pytest.fixture
def world(
    kube_api: KubeApi, mariadb_server: MariaDBFixture, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("e2e")
    with DevCluster(workdir / "cluster").running("-80,80-") as cluster:
        w = World(kube_api, cluster, workdir)
        kubeconfig = prepare_operator(kube_api, workdir, NS)
        operator_secrets(kube_api, NS, cluster, mariadb_server, SINK_SECRET, w.secrets_dir)
        with kopf_operator(kube_api, NS, kubeconfig, verbose=False, state_dir=w.state_dir):
            yield w
        assert _processes_using(w.state_dir) == [], "a job process outlived its stream"


def test_a_live_split_is_hopped_by_the_spark_job_the_operator_launched(
    world: World, mariadb_server: MariaDBFixture
) -> None:
    w, cluster = world, world.cluster
    keyspace = yaml.safe_load(cluster.manifest_path.read_text())
    apply(w.api, NS, keyspace)
    start = {s: cluster.server(s).gtid_position() for s in ["-80", "80-"]}
    sinks = [
        manifests.database_sink(
            "versionStream", mariadb_server.host, mariadb_server.port, SINK_DATABASE, SINK_SECRET
        ),
        {"type": "cdcv2", "path": str(w.workdir / "cdc"), "allowedLatenessSeconds": 1},
    ]
    stream = manifests.update_stream(
        STREAM, "commerce", start={"mode": "gtid", "gtid": start}, sinks=sinks
    )
    apply(w.api, NS, stream)

    def delivering() -> bool:
        status = w.status()
        shards = (status.get("keyRanges") or [{}])[0].get("shards", [])
        return condition_of(status, "Ready") == ("True", "Streaming") and (
            len(shards) == 2 and all(s.get("token") for s in shards)
        )

    wait_for(delivering, "the job's first batch in status", timeout=300)
    record = w.record()
    cmdline = Path(f"/proc/{record['pid']}/cmdline").read_bytes().decode().split("\0")
    config = JobConfig.load(Path(cmdline[cmdline.index("--config") + 1]))
    assert config.keyspace_watch == str(w.job_dir() / "keyspace.yaml")

    ledger = w.workdir / "ledger.jsonl"
    traffic = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, ledger, TrafficOptions(rate=300, seed=21)
    ).start()
    try:
        time.sleep(4)
        split_at = reshard(cluster, "-80", "-40,40-80", OVERLAP)
        apply(w.api, NS, yaml.safe_load(cluster.manifest_path.read_text()))  # as a user would

        def recording() -> dict[str, Any] | None:
            status = w.status()
            wanted = ("True", "ServingShardsChanged")
            return status if condition_of(status, "Hopping") == wanted else None

        hopping = wait_for(recording, "the hop recorded (Hopping)")
        assert condition_of(hopping, "Ready") == ("False", "Hopping")
        assert hopping["keyRanges"][0]["hop"]["method"] == "InJob"
        wait_for(lambda: w.streams.condition(STREAM, "Hopping") == ("False", "HopCompleted"), "hop")
        time.sleep(3)  # traffic onto the new shards
    finally:
        stats = traffic.stop()
    after = time.time() + 3
    want = {s: cluster.server(s).gtid_position() for s in SPLIT}

    def caught_up() -> bool:
        shards = w.report().get("shards", {})
        return all(
            shards.get(s, {}).get("position") == want[s]
            and (shards[s].get("heartbeatTimestamp") or 0) >= after
            for s in SPLIT
        )

    wait_for(caught_up, f"the job at {want}", timeout=300)
    report = w.report()
    (job_hop,) = completed_hops(report)
    # the operator keeps the hop's duplicates current from the job's later reports

    def folded() -> dict[str, Any] | None:
        status = w.status()
        hops = status.get("hops") or [{}]
        return status if hops[0].get("duplicatesDropped") == job_hop["duplicatesDropped"] else None

    status = wait_for(folded, "the hop record to carry the job's final numbers")

    # the job: read the new shards, hopped once, in place
    assert report["shardMap"] == ",".join(SPLIT)
    assert (job_hop["from"], job_hop["to"]) == (["-80", "80-"], SPLIT)
    assert job_hop["servingChangedAt"] == pytest.approx(split_at, abs=0.01)
    assert job_hop["duplicatesDropped"] > 0
    assert all(report["shards"][s]["events"] > 0 for s in SPLIT)
    # the operator: exactly one completed hop record, with the job's numbers
    assert status["hopCount"] == 1
    (hop,) = status["hops"]
    assert (hop["method"], hop["phase"], hop["launchId"]) == ("InJob", "Completed", 1)
    assert (hop["fromShards"], hop["toShards"]) == (["-80", "80-"], SPLIT)
    assert hop["detectedAt"] == job_hop["detectedAt"]
    assert hop["durationSeconds"] == pytest.approx(job_hop["durationSeconds"], abs=0.001)
    changed = dt.datetime.fromtimestamp(job_hop["servingChangedAt"], dt.UTC)
    assert hop["servingChangedAt"] == rfc3339(changed)
    entry = status["keyRanges"][0]
    assert entry.get("hop") is None and entry["launchId"] == 1
    assert entry["shardMap"] == ",".join(SPLIT)
    assert condition_of(status, "Ready") == ("True", "Streaming")
    assert condition_of(status, "Hopping") == ("False", "HopCompleted")
    # never relaunched: the same process, one launch
    assert w.record()["pid"] == record["pid"] and Path(f"/proc/{record['pid']}").exists()
    assert not (w.job_dir() / "launch-2").exists()
    reasons = w.reasons()
    assert reasons.count("Launched") == 1
    assert reasons.count("HopStarted") == 1 and reasons.count("HopCompleted") == 1
    assert reasons.index("HopStarted") < reasons.index("HopCompleted")
    assert not {"Relaunched", "HopPlanned", "HopFallback", "Reconfiguring", "JobFailed"} & set(
        reasons
    )
    # no Secret value in the status or the Events
    visible = json.dumps(status) + json.dumps(items(w.api, NS, "events"))
    assert not [v for v in w.secret_values() if v in visible]

    # both sinks against the ledger: nothing lost, no duplicate delivered, the overlap dropped
    for sink, verdict in w.verify(ledger).items():
        assert verdict["lost"] == 0 and verdict["duplicates_delivered"] == 0, (sink, verdict)
        assert verdict["committed"] == stats.rows, (sink, verdict)
        assert verdict["duplicates_dropped"] > 0, (sink, verdict)
