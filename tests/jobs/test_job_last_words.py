"""The job's last words, through `updatestream run` as a subprocess on real shards.

- SIGTERM, to the job's process alone or to its whole process group (as the operator's local
  launcher sends it, so the Spark JVM gets it too), ends in a clean stop: exit status 0, and the
  status file says `"phase": "stopped"` with the last positions delivered.
- A fatal source error (a binlog purged under a stopped job's checkpoint) prints the one-line
  `error: ...` and where the full trace is, not Spark's and Python's stacks; the trace file has
  them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.mariadb_server import MariaDBServer

from harness.stream_job import CLI

SHARDS = ("-80", "80-")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path_factory.mktemp("last-words-cluster"))
    try:
        dev.up("-80,80-")
        yield dev
    finally:
        dev.down()


def write_rows(cluster: DevCluster, first_id: int, count: int) -> None:
    for shard in SHARDS:
        with cluster.connect(shard, "app", "commerce") as conn, conn.cursor() as cur:
            for user_id in range(first_id, first_id + count):
                cur.execute(
                    "INSERT INTO users (id, name, created_at) VALUES (%s, 'w', NOW(6))",
                    (user_id,),
                )


def run_args(cluster: DevCluster, tmp_path: Path, *extra: str) -> list[str]:
    start = {s: cluster.server(s).gtid_position() for s in SHARDS}
    stream = manifests.update_stream(
        "last-words",
        "commerce",
        start={"mode": "gtid", "gtid": start},
        sinks=[{"type": "console", "path": str(tmp_path / "events.jsonl")}],
    )
    (tmp_path / "stream.yaml").write_text(yaml.safe_dump(stream))
    return [
        CLI, "run",
        "--stream", str(tmp_path / "stream.yaml"),
        "--keyspace", str(cluster.manifest_path),
        "--secrets-dir", str(cluster.secrets_dir),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--status-file", str(tmp_path / "status.json"),
        "--master", "local[1]",
        *extra,
    ]  # fmt: skip


def read_status(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def wait_for(predicate: Any, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.mark.parametrize("whole_group", [False, True], ids=["process", "process-group"])
def test_sigterm_leaves_a_stopped_status_with_the_last_positions(
    cluster: DevCluster, tmp_path: Path, whole_group: bool
) -> None:
    args = run_args(cluster, tmp_path, "--trigger-seconds", "0.5")
    write_rows(cluster, 1000 if whole_group else 2000, 5)
    expected = {s: cluster.server(s).gtid_position() for s in SHARDS}
    status = tmp_path / "status.json"
    with (tmp_path / "out.txt").open("w") as out:
        job = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(
                lambda: (
                    {s: p.get("position") for s, p in read_status(status).get("shards", {}).items()}
                    == expected
                ),
                "the job to deliver the rows written before it started",
            )
            assert read_status(status)["phase"] == "running"
            if whole_group:
                os.killpg(job.pid, signal.SIGTERM)
            else:
                job.send_signal(signal.SIGTERM)
            code = job.wait(timeout=120)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
    output = (tmp_path / "out.txt").read_text()
    assert code == 0, output
    final = read_status(status)
    assert final["phase"] == "stopped"
    assert {s: p["position"] for s, p in final["shards"].items()} == expected
    assert "Traceback" not in output and "\tat " not in output
    for shard in SHARDS:
        assert f"position {expected[shard]}" in output


def purge_all_but_the_newest(server: MariaDBServer) -> None:
    """FLUSH, then PURGE up to the newest file; a dump thread still on an old file keeps it, so
    repeat until the oldest file left is the newest."""
    server.query("FLUSH BINARY LOGS")
    newest = server.binlog_files()[-1][0]

    def purged() -> bool:
        server.query(f"PURGE BINARY LOGS TO '{newest}'")
        return server.binlog_files()[0][0] == newest

    wait_for(purged, f"the binlogs before {newest} to be purged", timeout=60)


def test_a_fatal_source_error_prints_one_line_and_where_the_trace_is(
    cluster: DevCluster, tmp_path: Path
) -> None:
    args = run_args(cluster, tmp_path, "--available-now")
    write_rows(cluster, 3000, 3)
    first = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    # While the job is stopped, its shard -80 loses the binlogs after its checkpoint.
    write_rows(cluster, 3100, 3)
    purge_all_but_the_newest(cluster.server("-80"))
    write_rows(cluster, 3200, 3)

    second = subprocess.run(args, capture_output=True, text=True, timeout=300)
    trace = tmp_path / "checkpoint.log"
    assert second.returncode == 1
    assert second.stdout == ""
    lines = second.stderr.strip().splitlines()
    assert lines[0].startswith("error: shard -80 (127.0.0.1:")
    assert "no longer holds the binlogs after" in lines[0]
    assert lines[1:] == [f"the job's full trace (Spark, Python) is in {trace}"]
    text = trace.read_text()
    assert "Traceback (most recent call last)" in text and "\tat org.apache.spark" in text
    assert "BinlogPurged" in text
    assert cluster.credentials("reader").password not in text + second.stderr
