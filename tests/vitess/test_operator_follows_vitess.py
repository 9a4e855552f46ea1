"""The operator keeps a Keyspace that names a Vitess cluster in step with it: the session's
real Vitess (vtctld, vtgate, primary tablets on MySQL 8), the operator under kopf's KopfRunner
against a real API server, and a Reshard driven with vtctldclient. Nothing is copied from
Vitess by hand: the Keyspace says only where vtctld is, and SwitchTraffic is what makes the
stream hop.

The stream's job is `tests/operator/standin_job.py` (it hops when the Keyspace the operator
shows it changes); a real job through real Reshards is tests/vitess/test_stream_reshard.py.
"""

from __future__ import annotations

import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.reshard import VitessReshard, plan_reshard

from harness.kube import KubeApi, free_port
from harness.operator import (
    SECRET_VALUE,
    StreamWatch,
    apply,
    get,
    kopf_operator,
    prepare_operator,
    stream_manifest,
    wait_for,
)
from harness.vitess_stream import reachable_dir
from tests.operator.conftest import kube_api  # noqa: F401  (the session's API server)

NS = "us-vitess"
STAND_IN = Path(__file__).parents[1] / "operator" / "standin_job.py"
SPLIT = ["-40", "40-80", "80-"]


class Operator(StreamWatch):
    def keyspace(self, name: str) -> dict[str, Any]:
        found = get(self.api, NS, "keyspace", name)
        assert found is not None, name
        return found

    def keyspace_ready(self, name: str) -> tuple[str, str] | None:
        for condition in self.keyspace(name).get("status", {}).get("conditions", []):
            if condition["type"] == "Ready":
                return condition["status"], condition.get("reason", "")
        return None

    def keyspace_events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["involvedObject"]["kind"] == "Keyspace"
                and e["involvedObject"]["name"] == name]  # fmt: skip


def _vitess_keyspace(name: str, vtctld: str, keyspace: str | None = None) -> dict[str, Any]:
    vitess: dict[str, Any] = {
        "vtctld": vtctld, "cell": "zone1", "credentialsSecret": {"name": "reader"},
        "syncSeconds": 1,
    }  # fmt: skip
    if keyspace:
        vitess["keyspace"] = keyspace
    return {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": "Keyspace",
        "metadata": {"name": name},
        "spec": {"vitess": vitess},
    }


@pytest.fixture(scope="module")
def operator(kube_api: KubeApi, vitess_cluster: VitessCluster) -> Iterator[Operator]:  # noqa: F811
    workdir = reachable_dir("updatestream-vitess-operator-")
    kubeconfig = prepare_operator(kube_api, workdir, NS)
    secrets = workdir / "secrets" / "reader"
    secrets.mkdir(parents=True)
    (secrets / "username").write_text("updatestream")
    (secrets / "password").write_text(SECRET_VALUE)
    try:
        with kopf_operator(
            kube_api,
            NS,
            kubeconfig,
            state_dir=workdir / "state",
            secrets_dir=workdir / "secrets",
            local_command=[sys.executable, str(STAND_IN)],
            in_job_hop_timeout=120.0,
        ):
            yield Operator(kube_api, NS)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_keyspace_naming_an_unreachable_vtctld_is_not_ready_and_says_why(
    operator: Operator,
) -> None:
    op = operator
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    apply(op.api, NS, _vitess_keyspace("nowhere", address))
    apply(op.api, NS, stream_manifest("waiting", "nowhere"))
    wait_for(lambda: op.keyspace_ready("nowhere") == ("False", "VitessNotRead"), "not ready")

    def warned() -> list[dict[str, Any]]:
        return [e for e in op.keyspace_events("nowhere") if e["type"] == "Warning"
                and f"cannot read Keyspace {NS}/nowhere from Vitess" in e["message"]]  # fmt: skip

    (event, *_) = wait_for(warned, "a Warning event on the Keyspace", timeout=60)
    assert event["reason"] == "VitessUnreadable"
    assert f"vtctld {address}" in event["message"] and "connection refused" in event["message"]
    wait_for(lambda: op.condition("waiting", "Degraded") == ("True", "VitessNotRead"), "Degraded")
    assert op.keyspace("nowhere")["spec"].keys() == {"vitess"}  # nothing invented
    op.api.kubectl("delete", "-n", NS, "updatestream", "waiting", "--wait=false")
    wait_for(lambda: op.stream("waiting") is None, "the stream to be deleted")
    op.api.kubectl("delete", "-n", NS, "keyspace", "nowhere")


def test_a_keyspace_whose_vtctld_never_answers_is_deleted_without_waiting_a_minute(
    operator: Operator,
) -> None:
    """A vtctld that takes the connection and never answers keeps the Keyspace's timer inside
    its read (up to the read's 10 s timeout) nearly all the time; deleting the Keyspace waits
    for that read to end, not for kopf's default cancellation poll of a minute."""
    op = operator
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the backlog; nothing is ever read
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        apply(op.api, NS, _vitess_keyspace("silent", address))
        wait_for(lambda: op.keyspace_ready("silent") == ("False", "VitessNotRead"), "not ready")
        op.api.kubectl("delete", "-n", NS, "keyspace", "silent", timeout=30)
    assert get(op.api, NS, "keyspace", "silent") is None


def _serving(op: Operator, name: str) -> list[str]:
    return list(op.keyspace(name)["spec"].get("servingShards", []))


def _reshard(cluster: VitessCluster, sources: str, targets: str, workflow: str) -> VitessReshard:
    plan = plan_reshard(cluster.serving_shards_recorded(), sources, targets, workflow)
    runner = VitessReshard(cluster, plan, max_lag_seconds=5.0)
    runner.create()
    runner.wait_caught_up()
    return runner


def _hops_completed(op: Operator, name: str) -> int:
    return int(op.status(name).get("hopCount", 0))


def test_a_reshard_of_the_vitess_keyspace_makes_the_stream_hop(
    operator: Operator, vitess_cluster: VitessCluster
) -> None:
    op, cluster = operator, vitess_cluster
    vtctld = f"127.0.0.1:{cluster.vtctld.grpc_port}"
    apply(op.api, NS, _vitess_keyspace("shop", vtctld, keyspace=cluster.keyspace))
    wait_for(lambda: _serving(op, "shop") == ["-80", "80-"], "the shards read from Vitess")
    spec = op.keyspace("shop")["spec"]
    ports = {t.shard: t.mysql_port for t in cluster.tablets()}
    assert {s["name"]: s["mysql"]["port"] for s in spec["shards"]} == ports
    assert {s["flavor"] for s in spec["shards"]} == {"mysql"}
    assert spec["vschema"]["sharded"] is True and "orders" in spec["vschema"]["tables"]
    assert spec.get("shardMapHistory", []) == []
    wait_for(lambda: op.keyspace_ready("shop") == ("True", "ShardMapValid"), "Keyspace Ready")

    apply(op.api, NS, stream_manifest("orders", "shop"))
    wait_for(lambda: op.condition("orders", "Ready") == ("True", "Streaming"), "streaming")
    split = _reshard(cluster, "-80", "-40,40-80", "us_operator_split")
    try:
        assert _serving(op, "shop") == ["-80", "80-"]  # copying is not serving
        switched_at = time.time()
        split.switch_traffic()
        wait_for(lambda: _serving(op, "shop") == SPLIT, "the split read from Vitess", 60)
        ((entry),) = op.keyspace("shop")["spec"]["shardMapHistory"]
        assert entry["shards"] == SPLIT and switched_at <= entry["at"] <= time.time()
        assert any(e["reason"] == "ServingShardsChanged" for e in op.keyspace_events("shop"))
        wait_for(lambda: _hops_completed(op, "orders") == 1, "the stream's hop", 180)
        (hop,) = op.status("orders")["hops"]
        assert (hop["fromShards"], hop["toShards"]) == (["-80", "80-"], SPLIT)
        split.complete()  # -80's tablet and mysqld are gone: so is its shard in the Keyspace
        wait_for(
            lambda: "-80" not in [s["name"] for s in op.keyspace("shop")["spec"]["shards"]],
            "-80 dropped",
        )
    finally:
        _restore(cluster, split)
    wait_for(lambda: _serving(op, "shop") == ["-80", "80-"], "the merge read from Vitess", 60)
    wait_for(lambda: _hops_completed(op, "orders") == 2, "the stream's second hop", 180)
    assert [h["toShards"] for h in op.status("orders")["hops"]] == [SPLIT, ["-80", "80-"]]
    op.api.kubectl("delete", "-n", NS, "updatestream", "orders", "--wait=false")
    wait_for(lambda: op.stream("orders") is None, "the stream to be deleted")
    op.api.kubectl("delete", "-n", NS, "keyspace", "shop")


def _restore(cluster: VitessCluster, split: VitessReshard) -> None:
    """Leave the session cluster serving `-80,80-` whatever happened above."""
    if split.exists():
        if split.writes_switched():
            split.complete()
        else:
            split.cancel()
    if cluster.serving_shards_recorded() != ["-80", "80-"]:
        _reshard(cluster, "-40,40-80", "-80", "us_operator_merge").run()
