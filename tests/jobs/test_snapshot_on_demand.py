"""A snapshot on demand under traffic that deletes and updates the rows it re-reads, into every
sink that keeps the table's state: a mirror, a Version Stream and CDCv2 files (`updatestream run`
with binlog tails on, Spark local mode, real shards). Two requests of `orders` a few seconds
apart, the second while the first is still reading; then `updatestream verify --sink mirror` and
`--table-state --sink versionstream|cdcv2` compare each sink with the shards' rows.

Random traffic alone hits a row the re-read has not reached only now and then, so the test also
drives the interleaving: rows of its own (the highest keys of `orders`, which each range reads in
its last chunk, and which the random traffic never touches) are deleted and updated right after
each request was taken, while the ranges reading them are unfinished."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from updatestream_cli.devcluster import sample_rows
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.traffic import Change, TrafficGenerator, TrafficOptions

from harness.stream_job import CLI, SinkServer, StreamJob, sink_secret
from tests.conftest import MariaDBFixture
from updatestream.core.keyrange import KeyRange

KEY_RANGE = "60-a0"  # unaligned: two shards hold part of it
PRELOAD = 4_000  # rows of the three tables before the stream starts (its snapshot reads them)
DRIVEN_ORDERS = 2_400  # the test's own `orders` rows in the key range, inserted while it streams
DRIVEN_FIRST_ID = 2 * 10**12  # above every key the random traffic makes
SECRET = "on-demand-sinks"


def on_demand_job(cluster: DevCluster, server: MariaDBFixture, workdir: Path) -> StreamJob:
    """A stream of `KEY_RANGE` that starts with a snapshot, into a mirror, a Version Stream and
    CDCv2 files, polling a snapshot-request file; one chunk of 400 rows per batch, so a
    request of `orders` takes about ten batches."""
    sink_secret(cluster, SECRET, server.admin.username, server.admin.password)
    sink = SinkServer(server.host, server.port, SECRET, "on_demand_vs")
    job = StreamJob(cluster, workdir, sink, key_range=KEY_RANGE, name="on-demand")
    job.trigger_seconds = 0.5
    account = {"mysql": {"host": server.host, "port": server.port}}
    stream = {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": "UpdateStream",
        "metadata": {"name": job.name},
        "spec": {
            "keyspace": "commerce",
            "keyRanges": [KEY_RANGE],
            "start": {"mode": "snapshot"},
            "sinks": [
                {
                    "type": "mirror", **account, "database": "on_demand_mirror",
                    "credentialsSecret": {"name": SECRET},
                },
                {
                    "type": "versionStream", **account, "database": sink.database,
                    "credentialsSecret": {"name": SECRET},
                },
                {"type": "cdcv2", "path": str(job.cdc), "allowedLatenessSeconds": 1},
            ],
        },
    }  # fmt: skip
    (workdir / "stream.yaml").write_text(yaml.safe_dump(stream))
    job.extra = [
        "--snapshot-requests", str(requests_file(workdir)),
        "--source-option", "snapshotChunkRows=400",
        "--source-option", "snapshotChunksPerBatch=1",
    ]  # fmt: skip
    return job


def requests_file(workdir: Path) -> Path:
    return workdir / "requests.jsonl"


def generator(cluster: DevCluster, ledger: Path, **options: Any) -> TrafficGenerator:
    return TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, ledger, TrafficOptions(**options)
    )


class DrivenOrders:
    """`orders` rows of the test's own, in the key range, with keys above all others: the
    random traffic does not know them, so the test alone changes them, when it chooses."""

    def __init__(self, cluster: DevCluster, workdir: Path) -> None:
        self.writer = generator(cluster, workdir / "driven.jsonl", rate=0, seed=63)
        self.rng = random.Random(64)
        self.wanted = KeyRange.parse(KEY_RANGE)

    def insert(self, count: int) -> None:
        router = self.writer.router
        changes = []
        for number in range(count):
            while True:  # a user id whose keyspace id lies in the stream's key range
                image = sample_rows.new_order(
                    self.rng, DRIVEN_FIRST_ID + number, self.rng.randrange(1, 10**9)
                )
                if self.wanted.contains(router.keyspace_id("orders", image)):
                    break
            changes.append(Change("orders", "insert", image))
        for start in range(0, len(changes), 400):
            self.writer.commit(changes[start : start + 400])

    def highest(self, count: int) -> list[dict[str, Any]]:
        """The images of the `count` highest-keyed rows still there, highest first."""
        table = self.writer.tables["orders"]
        images = sorted(table.images.values(), key=lambda r: r["order_id"], reverse=True)
        return images[:count]

    def delete_and_update(self, deletes: int, updates: int) -> tuple[int, int]:
        """Delete the highest-keyed rows and update the next ones (one row a transaction)."""
        chosen = self.highest(deletes + updates)
        for image in chosen[:deletes]:
            self.writer.commit([Change("orders", "delete", image)])
        for image in chosen[deletes:]:
            values = sample_rows.changed(self.rng, "orders", image)
            self.writer.commit([Change("orders", "update", {**image, **values}, tuple(values))])
        return len(chosen[:deletes]), len(chosen[deletes:])

    def close(self) -> None:
        self.writer.close()


def snapshot_of(status: dict[str, Any]) -> dict[str, Any]:
    return dict(status.get("snapshot") or {})


def request(job: StreamJob, ident: str, ranges_before: int) -> dict[str, Any]:
    """Append a request of `orders` and wait until the job has taken it (its two ranges, one
    per shard, are in the status) while they are still being read."""
    subprocess.run(
        [CLI, "snapshot-request", str(requests_file(job.workdir)), "--table", "orders",
         "--id", ident],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return job.wait_for(
        f"request {ident} taken",
        lambda s: snapshot_of(s).get("rangesTotal", 0) >= ranges_before + 2,
    )


def verify_sinks(job: StreamJob) -> dict[str, dict[str, Any]]:
    """`updatestream verify` of the three sinks against the shards' rows in the key range."""
    common = [
        "--key-range", job.key_range, "--keyspace-manifest", str(job.cluster.manifest_path),
        "--secrets-dir", str(job.cluster.secrets_dir), "--json",
    ]  # fmt: skip
    server = ["--mysql", f"{job.sink.host}:{job.sink.port}", "--secret", job.sink.secret]
    commands = {
        "mirror": ["--sink", "mirror", *server, "--database", "on_demand_mirror"],
        "versionstream": [
            "--table-state", "--sink", "versionstream", *server, "--database", job.sink.database,
        ],
        "cdcv2": ["--table-state", "--sink", "cdcv2", "--path", str(job.cdc)],
    }  # fmt: skip
    reports = {}
    for sink, arguments in commands.items():
        done = subprocess.run(
            [CLI, "verify", *arguments, *common], capture_output=True, text=True, timeout=300
        )
        assert done.returncode in (0, 1), done.stderr
        reports[sink] = {**json.loads(done.stdout), "ok": done.returncode == 0}
    return reports


def findings(report: dict[str, Any]) -> dict[str, Any]:
    """What a failed verification found: counts, and a few keys of each finding."""
    keys = ("missing", "extra", "different", "differing", "multiplicity")
    found: dict[str, Any] = {k: report[k] for k in keys if report.get(k)}
    for finding, examples in (report.get("examples") or {}).items():
        found[f"{finding} (first)"] = examples[:2]
    return found


def test_two_requests_under_deletes_and_updates_leave_every_sink_equal_to_the_shards(
    cluster: DevCluster, mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    loader = generator(cluster, tmp_path / "preload.jsonl", rate=0, seed=61)
    loader.preload(PRELOAD, batch=1000)
    loader.close()
    live = generator(cluster, tmp_path / "ledger.jsonl", rate=150, seed=62, max_tx_rows=3)
    live.adopt_existing_rows()
    driven = DrivenOrders(cluster, tmp_path)
    job = on_demand_job(cluster, mariadb_server, tmp_path)
    job.start()
    driven_changes: list[tuple[int, int]] = []
    try:
        job.wait_for("the snapshot", lambda s: snapshot_of(s).get("finished"), timeout=600)
        live.start()
        driven.insert(DRIVEN_ORDERS)  # delivered as inserts; the requests re-read them
        time.sleep(2)
        taken = request(job, "orders-1", snapshot_of(job.wait_first_batch())["rangesTotal"])
        driven_changes.append(driven.delete_and_update(15, 15))
        time.sleep(3)
        request(job, "orders-2", snapshot_of(taken)["rangesTotal"])
        driven_changes.append(driven.delete_and_update(15, 15))
        after = job.wait_for("the re-reads", lambda s: snapshot_of(s).get("finished"))
        assert snapshot_of(after)["rangesDone"] == snapshot_of(after)["rangesTotal"]
        time.sleep(2)
        stats = live.stop()
        job.wait_caught_up(cluster.serving_map().names)
        status = job.wait_for("the last batch", lambda s: True)
    finally:
        job.stop()
        with contextlib.suppress(Exception):  # stopped already unless the test failed
            live.stop()
        driven.close()
    reports = verify_sinks(job)
    failing = {sink: findings(r) for sink, r in reports.items() if not r["ok"]}
    assert failing == {}, json.dumps(failing, indent=1)
    assert reports["mirror"]["source_rows"] == reports["mirror"]["mirror_rows"] > PRELOAD / 4
    assert stats.by_op["delete"] > 0 and stats.by_op["update"] > 0
    assert driven_changes == [(15, 15), (15, 15)]
    for sink, counts in status["sinks"].items():
        assert counts["duplicatesDelivered"] == 0, (sink, counts)
    logs = "".join(path.read_text() for path in [*job.logs, job.trace] if path.exists())
    assert "refuses the rows a snapshot on demand re-reads" in logs  # CDCv2 says so
