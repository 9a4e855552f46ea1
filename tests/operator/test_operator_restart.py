"""`updatestream operator` killed with SIGKILL in the middle of launching, then restarted:
still exactly one job per key range, and the stream ends up Ready."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from updatestream_operator.reconciler.naming import LABEL_KEY_RANGE, LABEL_STREAM_UID

from harness.kube import KubeApi, free_port
from harness.operator import (
    SECRET_VALUE,
    SPARK_ACCOUNT,
    apply,
    get,
    items,
    keyspace_manifest,
    prepare_operator,
    stream_manifest,
    wait_for,
)
from harness.process import die_with_parent
from harness.stream_job import CLI

NS = "us-restart"


def _children(pid: int) -> list[str]:
    """The command lines of the direct children of `pid`."""
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            found.append(" ".join(child.cmdline()))
    return found


def _spark_submits(marker: str) -> list[int]:
    """Live spark-submit JVMs whose command line names `marker` (orphans included)."""
    pids = []
    for process in psutil.process_iter(["cmdline", "status"]):
        command = " ".join(process.info["cmdline"] or ())
        if (
            "SparkSubmit" in command
            and marker in command
            and process.info["status"] != psutil.STATUS_ZOMBIE
        ):
            pids.append(process.pid)
    return pids


class OperatorProcess:
    def __init__(self, kubeconfig: Path, log: Path, tmp: Path) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        # the operator's temporary files: a kill -9 in the middle of a spark-submit leaves its
        # work directory behind, here rather than in the machine's /tmp
        self.tmp = tmp
        self.process: subprocess.Popen[bytes] | None = None
        self.liveness = f"http://127.0.0.1:{free_port()}/healthz"

    def healthz(self) -> int:
        """The HTTP status of kopf's health endpoint; 0 when nothing answers."""
        try:
            with urllib.request.urlopen(self.liveness, timeout=2) as response:
                json.loads(response.read())  # kopf reports its probes' results as JSON
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def start(self) -> None:
        command = [
            CLI,
            "operator",
            "--namespace",
            NS,
            "--launcher",
            "spark-submit",
            "--metrics-port",
            "0",
            "--interval",
            "2",
            "--service-account",
            SPARK_ACCOUNT,
            "--image",
            "registry.invalid/updatestream:test",
            "--kubeconfig",
            str(self.kubeconfig),
            "--liveness",
            self.liveness,
            "--verbose",
        ]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig), "TMPDIR": str(self.tmp)},
                preexec_fn=die_with_parent,
            )

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def operator_process(
    kube_api: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    workdir = tmp_path_factory.mktemp("restart")
    kubeconfig = prepare_operator(kube_api, workdir, NS)
    apply(kube_api, NS, keyspace_manifest("commerce"))
    (workdir / "tmp").mkdir()
    operator = OperatorProcess(kubeconfig, workdir / "operator.log", workdir / "tmp")
    try:
        yield operator
    finally:
        operator.stop()
        for pid in _spark_submits(NS):  # orphans of the killed operator
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert SECRET_VALUE not in operator.log.read_text(errors="replace")


def _driver_pods(api: KubeApi, uid: str) -> list[dict[str, Any]]:
    return [
        p
        for p in items(api, NS, "pods", f"{LABEL_STREAM_UID}={uid}")
        if p["metadata"]["labels"].get("updatestream.io/role") == "driver"
    ]


def test_kill_9_while_launching_then_restart_leaves_one_job_per_key_range(
    kube_api: KubeApi, operator_process: OperatorProcess
) -> None:
    api, operator = kube_api, operator_process
    operator.start()
    assert operator.process is not None
    wait_for(lambda: operator.healthz() == 200, "kopf's health endpoint (--liveness)", timeout=60)
    apply(api, NS, stream_manifest("orders", "commerce", keyRanges=["-80", "80-"]))
    uid = wait_for(lambda: get(api, NS, "updatestream", "orders"), "the stream")["metadata"]["uid"]

    # kill the operator while its first spark-submit runs (before any driver Pod exists)
    pid = operator.process.pid
    wait_for(
        lambda: [c for c in _children(pid) if "SparkSubmit" in c or "spark-submit" in c],
        "the operator to run spark-submit",
        timeout=120,
    )
    pods_at_kill = len(_driver_pods(api, uid))
    operator.kill9()
    assert operator.healthz() == 0
    status = (get(api, NS, "updatestream", "orders") or {}).get("status") or {}
    assert [e["phase"] for e in status.get("keyRanges", [])][:1] == ["Launching"]

    operator.start()
    pods = wait_for(
        lambda: (p := _driver_pods(api, uid)) and len(p) >= 2 and p,
        "a driver Pod for each key range",
        timeout=300,
    )

    def settled() -> bool:
        """Every key range has its job: what is left is the drivers' own start (no kubelet
        runs them here, so Ready says they are Pending)."""
        found = get(api, NS, "updatestream", "orders") or {}
        conditions = {
            c["type"]: (c["status"], c["reason"])
            for c in found.get("status", {}).get("conditions", [])
        }
        return conditions.get("Ready") == ("False", "Pending")

    wait_for(settled, "every key range's job launched after the restart", timeout=300)
    assert operator.healthz() == 200
    wait_for(lambda: not _spark_submits(NS), "the orphaned spark-submit to finish", timeout=180)
    time.sleep(5)  # a few more folds by the restarted operator
    pods = _driver_pods(api, uid)
    by_range = sorted(p["metadata"]["labels"][LABEL_KEY_RANGE] for p in pods)
    assert by_range == ["80-max", "min-80"], json.dumps([p["metadata"]["name"] for p in pods])
    assert pods_at_kill == 0
    # whichever launch won, the pod, its progress ConfigMap and the status agree on it
    status = (get(api, NS, "updatestream", "orders") or {})["status"]
    launches = {e["job"]: e["launchId"] for e in status["keyRanges"]}
    for pod in pods:
        name = pod["metadata"]["name"]
        launch = pod["metadata"]["annotations"]["updatestream.io/launch-id"]
        progress = get(api, NS, "configmap", f"{name}-progress")
        assert progress is not None
        assert progress["metadata"]["annotations"]["updatestream.io/launch-id"] == launch
        assert str(launches[name]) == launch
    log = operator.log.read_text(errors="replace")
    assert log.count("launching job") >= 3  # the killed run's and the restarted run's

    api.kubectl("delete", "-n", NS, "updatestream", "orders", "--wait=false")
    wait_for(lambda: get(api, NS, "updatestream", "orders") is None, "deletion", timeout=120)
    assert _driver_pods(api, uid) == []
    assert items(api, NS, "configmaps", f"{LABEL_STREAM_UID}={uid}") == []
