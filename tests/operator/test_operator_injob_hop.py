"""Hops inside the running job: the operator under kopf's KopfRunner against a real API
server, as its own ServiceAccount, with the local launcher.

The jobs are real processes, but not Spark jobs: `standin_job.py` takes the job's arguments,
watches the keyspace file the operator rewrites, and writes its status file as a job hopping
in place does (see its docstring). One stream's job reports its hop: exactly one hop record,
HopStarted then HopCompleted, Hopping then Ready, and the same process throughout. The other
stream's job never reports it: after the (short) timeout the operator stops it and relaunches
it from planned positions.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_operator.launchers.local import _processes_using

from harness.kube import KubeApi
from harness.operator import (
    SECRET_VALUE,
    SPARK_ACCOUNT,
    StreamWatch,
    apply,
    apply_crds,
    keyspace_manifest,
    kopf_operator,
    prepare_namespace,
    prepare_operator,
    stream_manifest,
    wait_for,
)
from updatestream.contract.job_config import JobConfig

NS = "us-injob"
TIMEOUT = 15.0  # the operator's in-job hop timeout in these tests
STAND_IN = Path(__file__).with_name("standin_job.py")
SPLIT = ["-40", "40-80", "80-"]


class Operator(StreamWatch):
    def __init__(self, api: KubeApi, state_dir: Path) -> None:
        super().__init__(api, NS)
        self.state_dir = state_dir

    def job_dir(self, name: str) -> Path:
        jobs = [d for d in (self.state_dir / NS).iterdir() if d.name.startswith(f"us-{name}-")]
        assert len(jobs) == 1, jobs
        return jobs[0]

    def job_record(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.job_dir(name) / "job.json").read_text())
        return data


@pytest.fixture(scope="module")
def operator(kube_api: KubeApi, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    workdir = tmp_path_factory.mktemp("injob")
    kubeconfig = prepare_operator(kube_api, workdir, NS)
    secrets = workdir / "secrets" / "reader"
    secrets.mkdir(parents=True)
    (secrets / "username").write_text("updatestream")
    (secrets / "password").write_text(SECRET_VALUE)
    state_dir = workdir / "state"
    with kopf_operator(
        kube_api,
        NS,
        kubeconfig,
        state_dir=state_dir,
        secrets_dir=workdir / "secrets",
        local_command=[sys.executable, str(STAND_IN)],
        in_job_hop_timeout=TIMEOUT,
    ):
        yield Operator(kube_api, state_dir)
    assert _processes_using(state_dir) == [], "a job process outlived its stream"


def _split(api: KubeApi, keyspace: str) -> float:
    """Split -80 into -40,40-80 in the Keyspace, recording the old map in its history."""
    changed_at = time.time()
    manifest = keyspace_manifest(keyspace, serving=SPLIT)
    manifest["spec"]["shardMapHistory"] = [{"at": changed_at, "shards": ["-80", "80-"]}]
    apply(api, NS, manifest)
    return changed_at


def _streaming(op: Operator, stream: str, keyspace: str) -> dict[str, Any]:
    apply(op.api, NS, keyspace_manifest(keyspace))
    apply(op.api, NS, stream_manifest(stream, keyspace))
    wait_for(lambda: op.condition(stream, "Ready") == ("True", "Streaming"), f"{stream} Ready")

    def delivering() -> bool:
        shards = op.status(stream).get("keyRanges", [{}])[0].get("shards", [])
        return len(shards) == 2 and all(s.get("token") for s in shards)

    wait_for(delivering, f"{stream}'s positions in status")
    return op.job_record(stream)


def test_a_split_is_hopped_inside_the_running_job(operator: Operator) -> None:
    op = operator
    record = _streaming(op, "orders", "commerce")
    directory = op.job_dir("orders")
    cmdline = Path(f"/proc/{record['pid']}/cmdline").read_bytes().decode().split("\0")
    config = JobConfig.load(Path(cmdline[cmdline.index("--config") + 1]))
    assert config.keyspace_watch == str(directory / "keyspace.yaml")
    assert record["inJobHops"] is True

    changed_at = _split(op.api, "commerce")
    # the hop is recorded while the job makes it
    wait_for(
        lambda: op.condition("orders", "Hopping") == ("True", "ServingShardsChanged"), "Hopping"
    )
    entry = op.status("orders")["keyRanges"][0]
    assert entry["hop"]["phase"] == "InJob" and entry["hop"]["method"] == "InJob"
    assert op.condition("orders", "Ready") == ("False", "Hopping")
    # the operator showed the job the new Keyspace through the file it watches
    written = yaml.safe_load((directory / "keyspace.yaml").read_text())
    assert written["spec"]["servingShards"] == SPLIT

    wait_for(lambda: op.condition("orders", "Hopping") == ("False", "HopCompleted"), "hop done")
    wait_for(lambda: op.condition("orders", "Ready") == ("True", "Streaming"), "Ready after")
    time.sleep(4)  # more timer folds: still one hop
    status = op.status("orders")
    assert status["hopCount"] == 1
    (hop,) = status["hops"]
    assert (hop["method"], hop["phase"], hop["launchId"]) == ("InJob", "Completed", 1)
    assert (hop["fromShards"], hop["toShards"]) == (["-80", "80-"], SPLIT)
    assert hop["duplicatesDropped"] == 3  # the job's own count
    assert hop["durationSeconds"] >= 3.0  # from the Keyspace's change, as the job measured
    assert hop["durationSeconds"] < time.time() - changed_at + 1
    entry = status["keyRanges"][0]
    assert entry["launchId"] == 1 and entry["shardMap"] == ",".join(SPLIT)
    assert [s["name"] for s in entry["shards"]] == SPLIT
    assert all(s["token"]["shard"] == s["name"] for s in entry["shards"])
    assert status["shards"] == ",".join(SPLIT)

    # the same process throughout: never stopped, never relaunched
    assert op.job_record("orders")["pid"] == record["pid"]
    assert not (directory / "launch-2").exists()
    reasons = op.reasons("orders")
    assert reasons.count("HopStarted") == 1 and reasons.count("HopCompleted") == 1
    assert reasons.index("HopStarted") < reasons.index("HopCompleted")
    assert not {"Relaunched", "HopPlanned", "HopFallback", "Reconfiguring"} & set(reasons)


def test_a_job_that_never_reports_the_hop_is_relaunched_after_the_timeout(
    operator: Operator,
) -> None:
    op = operator
    record = _streaming(op, "silent-orders", "commerce-b")
    _split(op.api, "commerce-b")
    wait_for(
        lambda: op.condition("silent-orders", "Hopping") == ("True", "ServingShardsChanged"),
        "Hopping",
    )
    started = time.monotonic()
    fallback = wait_for(
        lambda: [e for e in op.events("silent-orders") if e["reason"] == "HopFallback"],
        "the fallback",
        timeout=TIMEOUT + 30,
    )
    assert time.monotonic() - started >= TIMEOUT - 3
    assert fallback[0]["type"] == "Warning"
    assert (
        f"did not report its hop to {','.join(SPLIT)} within {TIMEOUT:.0f}s"
        in (fallback[0]["message"])
    )
    wait_for(
        lambda: op.condition("silent-orders", "Hopping") == ("False", "HopCompleted"), "hop done"
    )
    wait_for(lambda: op.condition("silent-orders", "Ready") == ("True", "Streaming"), "Ready")
    status = op.status("silent-orders")
    assert status["hopCount"] == 1
    (hop,) = status["hops"]
    assert (hop["method"], hop["phase"], hop["launchId"]) == ("Relaunch", "Completed", 2)
    relaunched = op.job_record("silent-orders")
    assert relaunched["launchId"] == 2 and relaunched["pid"] != record["pid"]
    # relaunched from planned positions: the unchanged shard from its token, the new ones
    # from the last delivered time of the shard they split from, with the hop's dedup filter
    launches = op.job_dir("silent-orders").glob("launch-*/job.yaml")
    latest = max(launches, key=lambda path: int(path.parent.name.removeprefix("launch-")))
    config = yaml.safe_load(latest.read_text())
    start = config["stream"]["spec"]["start"]
    assert start["mode"] == "resume"
    assert set(start["tokens"]) == {"80-"}
    assert set(start["timestamps"]) == {"-40", "40-80"}
    assert set(config["dedup"]["watermarks"]) == {"-80"}
    reasons = op.reasons("silent-orders")
    for reason in ("HopStarted", "HopFallback", "HopPlanned", "HopCompleted"):
        assert reasons.count(reason) == 1, (reason, reasons)


def test_spark_drivers_may_read_keyspaces_and_nothing_more_of_them(kube_api: KubeApi) -> None:
    """crds/rbac/spark-driver.yaml: a driver hopping in place reads its Keyspace by name."""
    namespace = "us-injob-rbac"
    apply_crds(kube_api)
    prepare_namespace(kube_api, namespace)
    account = f"system:serviceaccount:{namespace}:{SPARK_ACCOUNT}"

    def can(verb: str, resource: str) -> bool:
        resource, _, subresource = resource.partition("/")
        extra = [f"--subresource={subresource}"] if subresource else []
        result = kube_api.kubectl(
            "auth", "can-i", verb, resource, *extra, "-n", namespace, f"--as={account}",
            check=False,
        )  # fmt: skip
        assert result.stdout.strip() in ("yes", "no"), result.stderr
        return result.stdout.strip() == "yes"

    assert can("get", "keyspaces.updatestream.io")
    for verb, resource in [
        ("list", "keyspaces.updatestream.io"),
        ("watch", "keyspaces.updatestream.io"),
        ("patch", "keyspaces.updatestream.io"),
        ("get", "keyspaces.updatestream.io/status"),
        ("get", "updatestreams.updatestream.io"),
        ("get", "secrets"),
    ]:
        assert not can(verb, resource), f"{verb} {resource}"
