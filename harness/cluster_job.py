"""A job of a stream over the development cluster, run in this process (the tests and the
benchmarks), and the wait until its status reaches the shards."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_jobs.job import Job

from updatestream import spec
from updatestream.contract.job_config import JobConfig

SHARDS = ("-80", "80-")


def cluster_job(cluster: DevCluster, stream: spec.UpdateStream, work: Path, **config: Any) -> Job:
    """A job of `stream` reading `cluster`'s shards: its checkpoint and status file in `work`
    and a batch a second unless `config` says otherwise; `config` sets the rest."""
    settings: dict[str, Any] = {
        "checkpoint": work / "checkpoint",
        "status_file": work / "status.json",
        "trigger_seconds": 1.0,
        **config,
    }
    return Job(
        JobConfig(
            stream=stream, keyspace=cluster.keyspace(), secrets_dir=cluster.secrets_dir, **settings
        )
    )


def wait_caught_up(job: Job, cluster: DevCluster, status: Path) -> None:
    """Wait until the job's status shows every shard at its current position."""
    final = {shard: cluster.server(shard).gtid_position() for shard in SHARDS}
    deadline = time.monotonic() + 180
    while True:
        shards = json.loads(status.read_text())["shards"] if status.exists() else {}
        if all(shards.get(s, {}).get("position") == final[s] for s in SHARDS):
            return
        assert job.query.isActive, job.query.exception()
        assert time.monotonic() < deadline, f"status never reached {final}: {shards}"
        time.sleep(1)
