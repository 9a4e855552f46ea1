"""The local launcher's process bookkeeping: one process per job, across launcher restarts and
a lost pid file; stop, status, Secrets as files, cleanup.

The launched program here is a small stand-in for `updatestream run` that takes the same
arguments and writes a status file: the real job needs MariaDB shards and a Spark JVM, and is
run by the end-to-end demo test. What is under test is the launcher, with real processes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from updatestream_operator.launchers.local import LocalLauncher, _processes_using
from updatestream_operator.reconciler.models import JobPhase, JobSpec, StreamRef

from harness.operator import wait_for
from updatestream.contract.job_config import JobConfig
from updatestream.core.keyrange import KeyRange
from updatestream.spec import (
    ShardMapHistoryEntry,
    SnapshotRequest,
    load_keyspace,
    parse_keyspace,
    parse_update_stream,
)

STAND_IN = r"""
import json, sys, time
args = sys.argv[1:]
config = open(args[args.index("--config") + 1]).read()
status = next(l[11:].strip() for l in config.splitlines() if l.startswith("statusFile:"))
if "--fail" in config:
    print("password=hunter22 rejected; giving up", flush=True)
    sys.exit(3)
report = {"shards": {"-80": {"token": {"ts": 5, "shard": "-80", "pos": "0-1-9"},
                             "byOp": {"insert": 2}, "lagSeconds": 0.5}}}
open(status, "w").write(json.dumps(report))
time.sleep(600)
"""


def job_spec(launch_id: int = 1, table: str = "orders", uid: str = "uid-1") -> JobSpec:
    keyspace = parse_keyspace(
        {
            "metadata": {"name": "commerce", "namespace": "ns"},
            "spec": {
                "shards": [
                    {"name": "-", "mysql": {"host": "db"}, "credentialsSecret": {"name": "reader"}}
                ],
                "vschema": {"sharded": False},
                "servingShards": ["-"],
            },
        }
    )
    stream = parse_update_stream(
        {
            "metadata": {"name": "orders"},
            "spec": {"keyspace": "commerce", "tables": [table], "sinks": [{"type": "console"}]},
        }
    )
    return JobSpec(
        job_id="us-orders-all-abc123",
        stream=StreamRef("ns", "orders", uid, 1),
        key_range="-",
        shard_map="-",
        spec_hash="h1",
        launch_id=launch_id,
        spec=stream.spec,
        keyspace=keyspace,
        secret_names=("reader",),
    )


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[LocalLauncher]:
    reads: list[tuple[str, str]] = []

    def read_secret(namespace: str, name: str) -> dict[str, str]:
        reads.append((namespace, name))
        return {"username": "reader", "password": "hunter22-local"}

    launcher = LocalLauncher(
        tmp_path / "state",
        command=[sys.executable, "-c", STAND_IN],
        secret_reader=read_secret,
        stop_timeout=10,
    )
    yield launcher
    for job in launcher.list():
        launcher.stop(job.key)


def test_launch_runs_one_process_and_reports_its_progress(launcher: LocalLauncher) -> None:
    job = job_spec()
    launcher.launch(job)
    (info,) = launcher.list("ns", "uid-1")
    assert (info.job_id, str(info.key_range), info.launch_id, info.phase) == (
        job.job_id,
        "-",
        1,
        JobPhase.RUNNING,
    )
    progress = wait_for(
        lambda: (s := launcher.status(job.key)).progress and s.progress.shards and s.progress,
        "the status file",
    )
    assert progress.launch_id == 1
    assert progress.shards[KeyRange.parse("-80")].events == {"insert": 2}

    directory = launcher.job_dir("ns", job.job_id)
    secret = directory / "secrets" / "reader" / "password"
    assert secret.read_text() == "hunter22-local"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert (directory / "launch-1" / "job.yaml").exists() and (directory / "keyspace.yaml").exists()


def test_no_second_process_for_a_job_across_restarts_and_a_lost_pid_file(
    launcher: LocalLauncher, tmp_path: Path
) -> None:
    job = job_spec()
    launcher.launch(job)
    directory = launcher.job_dir("ns", job.job_id)
    launcher.launch(job)  # the same launcher again
    restarted = LocalLauncher(
        tmp_path / "state", command=[sys.executable, "-c", STAND_IN], secrets_dir=tmp_path
    )
    restarted.launch(job_spec(launch_id=2))  # an operator that restarted
    meta = json.loads((directory / "job.json").read_text())
    (directory / "job.json").unlink()  # killed between starting the process and recording it
    (info,) = restarted.list()  # the running process is found without its record
    assert (info.phase, info.launch_id) == (JobPhase.RUNNING, 1)
    restarted.launch(job_spec(launch_id=3))
    assert _processes_using(directory) == [meta["pid"]]
    assert restarted.stop(job.key) is True
    assert _processes_using(directory) == []


def test_stop_ends_the_process_and_keeps_the_last_report(launcher: LocalLauncher) -> None:
    job = job_spec()
    launcher.launch(job)
    pid = json.loads((launcher.job_dir("ns", job.job_id) / "job.json").read_text())["pid"]
    wait_for(lambda: (p := launcher.status(job.key).progress) and p.shards, "a report")
    assert launcher.stop(job.key) is True
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert launcher.list() == []
    status = launcher.status(job.key)
    assert status.phase is JobPhase.ABSENT
    assert status.progress is not None and KeyRange.parse("-80") in status.progress.shards


def test_an_ended_process_is_reported_failed_with_its_scrubbed_output(
    launcher: LocalLauncher,
) -> None:
    job = job_spec(table="--fail")
    launcher.launch(job)
    info = wait_for(
        lambda: [j for j in launcher.list() if j.phase is JobPhase.FAILED], "the failure"
    )[0]
    assert "rejected; giving up" in info.message
    assert "hunter22" not in info.message


def test_cleanup_removes_the_streams_directories(launcher: LocalLauncher) -> None:
    launcher.launch(job_spec())
    launcher.launch(dataclasses.replace(job_spec(uid="uid-2"), job_id="other"))
    launcher.cleanup("ns", "uid-1")
    assert not launcher.job_dir("ns", "us-orders-all-abc123").exists()
    assert [j.job_id for j in launcher.list()] == ["other"]
    assert os.listdir(launcher.state_dir / "ns") == ["other"]


def _arguments(pid: int) -> list[str]:
    """The job process's arguments, once it runs the stand-in (not the forking interpreter)."""

    def read() -> list[str]:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        return args if "--config" in args else []

    return wait_for(read, "the job's command line", timeout=20)


def test_a_job_for_in_job_hops_watches_its_keyspace_file_which_publish_rewrites(
    launcher: LocalLauncher,
) -> None:
    job = dataclasses.replace(job_spec(), in_job_hops=True)
    launcher.launch(job)
    directory = launcher.job_dir("ns", job.job_id)
    args = _arguments(json.loads((directory / "job.json").read_text())["pid"])
    keyspace_file = directory / "keyspace.yaml"
    config = JobConfig.load(Path(args[args.index("--config") + 1]))
    assert config.keyspace_watch == str(keyspace_file)
    (info,) = launcher.list("ns", "uid-1")
    assert info.in_job_hops is True

    before = keyspace_file.stat()
    launcher.publish_keyspace(info, job.keyspace)  # unchanged: the file is left alone
    assert keyspace_file.stat().st_ino == before.st_ino
    assert keyspace_file.stat().st_mtime_ns == before.st_mtime_ns

    changed = job.keyspace.model_copy(
        update={
            "spec": job.keyspace.spec.model_copy(
                update={"shard_map_history": [ShardMapHistoryEntry(at=5.0, shards=["-"])]}
            ),
            "status": {"servingShardMap": "-"},
        }
    )
    launcher.publish_keyspace(info, changed)
    after = keyspace_file.stat()
    assert after.st_ino != before.st_ino  # a new file renamed over the old one
    written = load_keyspace(keyspace_file)
    assert written.spec.shard_map_history == changed.spec.shard_map_history
    assert written.status is None  # the operator's status is not the job's business
    assert sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp")) == []


def test_a_job_without_in_job_hops_is_not_told_to_watch(launcher: LocalLauncher) -> None:
    job = job_spec()
    launcher.launch(job)
    directory = launcher.job_dir("ns", job.job_id)
    args = _arguments(json.loads((directory / "job.json").read_text())["pid"])
    assert JobConfig.load(Path(args[args.index("--config") + 1])).keyspace_watch is None
    assert [j.in_job_hops for j in launcher.list()] == [False]


def test_a_job_polls_the_streams_snapshot_requests_which_publish_rewrites(
    launcher: LocalLauncher,
) -> None:
    job = dataclasses.replace(job_spec(), in_job_hops=True)
    job = dataclasses.replace(
        job,
        spec=job.spec.model_copy(
            update={"snapshot_requests": [SnapshotRequest(id="first", table="orders")]}
        ),
    )
    launcher.launch(job)
    directory = launcher.job_dir("ns", job.job_id)
    args = _arguments(json.loads((directory / "job.json").read_text())["pid"])
    config = JobConfig.load(Path(args[args.index("--config") + 1]))
    requests = directory / "snapshot-requests.jsonl"
    assert config.snapshot_requests == str(requests)
    assert requests.read_text() == '{"id":"first","table":"orders"}\n'
    (info,) = launcher.list("ns", "uid-1")
    more = [SnapshotRequest(id="first", table="orders"), SnapshotRequest(id="two", keyRange="-80")]
    text = "".join(r.line() + "\n" for r in more)
    launcher.publish_snapshot_requests(info, text)
    assert requests.read_text().splitlines()[1] == '{"id":"two","keyRange":"-80"}'
    before = requests.stat()
    launcher.publish_snapshot_requests(info, text)  # unchanged: left alone
    assert requests.stat().st_mtime_ns == before.st_mtime_ns
