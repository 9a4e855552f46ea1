"""A stream job through real Vitess Reshards, for the stream tests and `bench-vitess-peers`.

`ReshardRun` holds a local Vitess cluster, a stream job (`updatestream run`, see
`harness.stream_job`) into every sink, and traffic through vtgate with a ledger: it starts and
stops the traffic, creates a Reshard and waits until it caught up (switching and completing
are the caller's), waits for the job's next hop, verifies every sink against the ledger and the
mirror against the shards, and leaves the cluster serving `-80,80-` again whatever happened.
The job follows the cluster's Keyspace manifest, which the cluster tool rewrites from what
vtctld says; nothing about a reshard is told to it.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.gateway import VtgateGateway
from updatestream_cli.vitess.reshard import VitessReshard, plan_reshard

from harness.stream_job import StreamJob, completed_hops, job_from_now

_workflows = itertools.count(1)


def reachable_dir(prefix: str) -> Path:
    """A fresh directory the cluster's unprivileged user can reach (pytest's tmp_path is
    inside a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=tempfile.gettempdir()))
    os.chmod(path, 0o755)
    return path


def empty_keyspace(cluster: VitessCluster) -> None:
    """Delete the rows left from before, on each serving shard's primary, before a stream
    starts: it takes no snapshot, so its mirror would lack them."""
    for shard in cluster.serving_shards_recorded():
        tablet = cluster.tablet(shard)
        with tablet.dba_connect(cluster.env(), cluster.keyspace) as conn, conn.cursor() as cur:
            for table in ("orders", "events", "users"):
                cur.execute(f"DELETE FROM `{table}`")


def ledger_keys(ledger: Path) -> set[tuple[str, str]]:
    if not ledger.exists():
        return set()
    with ledger.open(encoding="utf-8") as lines:
        return {(entry["table"], entry["pk"]) for entry in map(json.loads, lines)}


def vitess_stream_job(cluster: VitessCluster, workdir: Path, sink: tuple[str, int],
                      account: tuple[str, str], memcached: str) -> StreamJob:  # fmt: skip
    """A job of every serving shard from its current position into memcached, a Version
    Stream, CDCv2 files and a mirror (the last two on `sink`, host and port, with `account`)."""
    return job_from_now(
        cluster, workdir, sink, account, "us_vitess_versions", secret="vitess-stream-sink",
        name="vitess-feed", memcached=memcached, mirror_database="us_vitess_mirror",
        position=cluster.gtid_executed,
    )  # fmt: skip


@dataclass
class ReshardRun:
    cluster: VitessCluster
    job: StreamJob
    ledger: Path
    rate: float  # row changes per second through vtgate
    traffic: TrafficGenerator | None = None
    hopped_at: float = 0.0  # servingChangedAt of the last hop seen
    pending: VitessReshard | None = None  # the last Reshard

    def start_traffic(self, seed: int) -> None:
        gateway = VtgateGateway(
            "127.0.0.1", self.cluster.vtgate.mysql_port, self.cluster.manifest_path,
            self.cluster.secrets_dir,
        )  # fmt: skip
        options = TrafficOptions(rate=self.rate, seed=seed)
        self.traffic = TrafficGenerator(
            self.cluster.manifest_path, self.cluster.secrets_dir, self.ledger, options,
            gateway=gateway,
        )  # fmt: skip
        # only the rows of this ledger: the stream started with no snapshot, so a row left from
        # before is not in its sinks (a CDCv2 retraction of it would count -1)
        known = ledger_keys(self.ledger)
        self.traffic.adopt_existing_rows(lambda table, pk: (table, pk) in known)
        self.traffic.start()

    def stop_traffic(self) -> int:
        assert self.traffic is not None
        rows = self.traffic.stop().rows
        self.traffic = None
        return rows

    def reshard(self, sources: str, targets: str) -> VitessReshard:
        """A Reshard created and caught up; switching and completing are the caller's."""
        plan = plan_reshard(
            self.cluster.serving_shards_recorded(), sources, targets, f"us_case_{next(_workflows)}"
        )
        runner = VitessReshard(self.cluster, plan, max_lag_seconds=5.0)
        self.pending = runner
        runner.create()
        runner.wait_caught_up()
        time.sleep(2)  # VReplication keeps copying under traffic for a while, as it would
        return runner

    def wait_hop(self, timeout: float = 600) -> dict[str, Any]:
        """The job's status once it completed a hop at a serving map change after the last
        one seen (a restarted job's status also lists the hop of its checkpoint)."""
        after = self.hopped_at

        def hopped(status: dict[str, Any]) -> bool:
            return any(h["servingChangedAt"] > after for h in completed_hops(status))

        status = self.job.wait_for(f"a hop after {after}", hopped, timeout=timeout)
        self.hopped_at = max(h["servingChangedAt"] for h in completed_hops(status))
        return status

    def restore(self) -> None:
        """Leave the cluster serving `-80,80-` even after a failure midway: the last Reshard
        completed or cancelled, and a split `-80` merged back."""
        pending, self.pending = self.pending, None
        if pending is not None and pending.exists():
            if pending.writes_switched():
                pending.complete()
            else:
                pending.cancel()
        left = [s for s in self.cluster.serving_shards_recorded() if s != "80-"]
        if left != ["-80"]:
            self.reshard(",".join(left), "-80").run()
            self.pending = None

    def verify(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """Traffic stopped: the job catches up, then `updatestream verify` of every sink against
        the ledger, and of the mirror against the shards."""
        self.job.wait_caught_up(self.cluster.serving_shards_recorded(), timeout=600)
        return self.job.verify(self.ledger), self.job.verify_mirror()
