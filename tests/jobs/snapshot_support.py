"""Helpers of the snapshot tests: a stream job into a console file, the state its events build,
and the shards' rows to compare it with."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import binlog_image, pk_json
from updatestream_jobs.job import Job

from updatestream import spec
from updatestream.binlog.events import SNAPSHOT_OPS, encode_row
from updatestream.contract.job_config import JobConfig
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema


def snapshot_job(
    cluster: DevCluster,
    tmp_path: Path,
    console: Path,
    *,
    key_range: str = "-",
    options: dict[str, str] | None = None,
    name: str = "snap",
    start: str = "snapshot",
    tables: tuple[str, ...] = (),
    sinks: tuple[dict[str, Any], ...] = (),
) -> Job:
    """A stream job into the `console` file (and `sinks`, after it)."""
    stream = spec.parse_update_stream(
        {
            "apiVersion": "updatestream.io/v1alpha1",
            "kind": "UpdateStream",
            "metadata": {"name": name},
            "spec": {
                "keyspace": "commerce",
                "keyRanges": [key_range],
                "start": {"mode": start},
                "tables": list(tables),
                "sinks": [{"type": "console", "path": str(console)}, *sinks],
            },
        }
    )
    return Job(
        JobConfig(
            stream=stream,
            keyspace=cluster.keyspace(),
            key_range=key_range,
            secrets_dir=cluster.secrets_dir,
            checkpoint=tmp_path / f"checkpoint-{name}",
            trigger_seconds=0.5,
            metrics_port=0,
            status_file=tmp_path / f"status-{name}.json",
            keyspace_watch=str(cluster.manifest_path),
            source_options={"snapshotChunkRows": "3000", **(options or {})},
        )
    )


@dataclass
class Delivered:
    """The state a sink that applies every delivered event holds, and what was seen on the way."""

    state: dict[tuple[str, str], str] = field(default_factory=dict)
    ops: Counter[str] = field(default_factory=Counter)
    identities: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    snapshot_keys: Counter[tuple[str, str]] = field(default_factory=Counter)
    backwards: list[str] = field(default_factory=list)  # a change older than its key's snapshot
    snapshot_at: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.identities.values() if n > 1)


def read_console(path: Path) -> Delivered:
    out = Delivered()
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        event = json.loads(line)
        op = event["op"]
        out.ops[op] += 1
        if op == "heartbeat":
            continue
        key = (event["table"], event["pk"])
        ident = (event["shard"], event["gtid"], event["table"], event["pk"], event["tx_index"])
        if event.get("source_shard"):
            ident = (event["source_shard"], event["source_gtid"], *ident[2:])
        out.identities[(op in SNAPSHOT_OPS, *ident)] += 1
        if op in SNAPSHOT_OPS:
            out.snapshot_keys[key] += 1
            out.snapshot_at[key] = event["timestamp"]
        elif key in out.snapshot_at and event["timestamp"] < out.snapshot_at[key] - 1:
            out.backwards.append(f"{op} {key} at {event['timestamp']}")
        if op == "delete":
            out.state.pop(key, None)
        else:
            out.state[key] = event["after"]
    return out


def shard_rows(cluster: DevCluster, key_range: str = "-") -> dict[tuple[str, str], str]:
    """Every row of the sample tables on the serving shards whose keyspace id is in range."""
    wanted = KeyRange.parse(key_range)
    vschema = VSchema.from_dict(cluster.keyspace().spec.vschema, keyspace="commerce")
    rows: dict[tuple[str, str], str] = {}
    for shard in cluster.serving_map().names:
        with cluster.connect(shard, "admin", "commerce") as conn:
            for table in sample_schema.COLUMNS:
                with conn.cursor(pymysql.cursors.DictCursor) as cur:
                    cur.execute(f"SELECT * FROM `{table}`")
                    for row in cur.fetchall():
                        image = {**row, **binlog_image(table, row)}  # added columns kept
                        ksid = vschema.keyspace_id_for(table, image)
                        if ksid is not None and wanted.contains(ksid):
                            rows[(table, pk_json(table, row))] = encode_row(image)
    return rows


def differences(
    expected: dict[Any, str], actual: dict[Any, str], *, added_later: frozenset[str] = frozenset()
) -> list[str]:
    """What differs, key by key and column by column. A column in `added_later` may be missing
    from a delivered image taken before the column existed, when the shard holds NULL in it."""
    found = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        if want is None:
            found.append(f"extra {key}")
        elif got is None:
            found.append(f"missing {key}")
        else:
            shard_row, delivered_row = json.loads(want), json.loads(got)
            for column in added_later:
                if column not in delivered_row and shard_row.get(column) is None:
                    shard_row.pop(column, None)
            if shard_row != delivered_row:
                found.append(f"differs {key}: {want} != {got}")
    return found


def wait_for_snapshot(
    job: Job, status: Path, predicate: Callable[[dict[str, Any]], Any], timeout: float = 300.0
) -> dict[str, Any]:
    """Wait until the status file's snapshot report satisfies `predicate`; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        report = json.loads(status.read_text()) if status.exists() else {}
        snapshot = report.get("snapshot") or {}
        if snapshot and predicate(snapshot):
            return dict(snapshot)
        assert job.query is not None and job.query.isActive, job.query and job.query.exception()
        assert time.monotonic() < deadline, f"the snapshot never got there: {report}"
        time.sleep(0.5)


def wait_until_caught_up(
    job: Job, cluster: DevCluster, status: Path, timeout: float = 240.0
) -> dict[str, Any]:
    """Wait until the job's status shows the snapshot finished and every serving shard at its
    current position, and then one more batch finished; returns the status.

    A shard's position in the status moves as the batch's events go to the sinks, and the
    snapshot's progress thread may write the status before that batch's writes are done: only
    a batch finished after it says the sinks hold them (a job stopped sooner cancels the batch,
    which a restart would replay, but this test reads the sinks then)."""
    final = {s: cluster.server(s).gtid_position() for s in cluster.serving_map().names}
    deadline = time.monotonic() + timeout
    reached_at: int | None = None  # finished batches when the positions were first seen
    while True:
        report = json.loads(status.read_text()) if status.exists() else {}
        shards = report.get("shards", {})
        snapshot = report.get("snapshot") or {}
        if snapshot.get("finished") and all(
            shards.get(s, {}).get("position") == p for s, p in final.items()
        ):
            batches = int(report.get("batches") or 0)
            if reached_at is None:
                reached_at = batches
            elif batches > reached_at:
                return report
        assert job.query is not None and job.query.isActive, job.query and job.query.exception()
        assert time.monotonic() < deadline, f"not caught up with {final}: {report}"
        time.sleep(0.5)
