"""The snapshot survives what a running job meets, on MariaDB and on MySQL 8 shards: kill -9 at
three moments, and a split of a shard halfway through (`updatestream run` as a subprocess into
a Version Stream and CDCv2 files, under traffic; `updatestream verify --table-state` compares
each sink with the shards)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.reshard import ReshardOptions
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

from harness.stream_job import StreamJob, completed_hops, job_from_now, reshard, verify_state
from tests.conftest import MariaDBFixture

PRELOAD = 30_000
OVERLAP = ReshardOptions(min_replicate_seconds=5)


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, flavor: str) -> Iterator[DevCluster]:
    """A cluster of each test's own (MariaDB or MySQL): the tests kill jobs and reshard."""
    directory = tmp_path_factory.mktemp(f"snapshot-cluster-{flavor}")
    with DevCluster(directory, flavor=flavor).running("-80,80-") as dev:  # type: ignore[arg-type]
        yield dev


def snapshot_stream(
    cluster: DevCluster, server: MariaDBFixture, workdir: Path, database: str, chunk_rows: int
) -> StreamJob:
    account = (server.admin.username, server.admin.password)
    job = job_from_now(
        cluster, workdir, (server.host, server.port), account, database, secret="snap-vs"
    )
    job.write_stream({"mode": "snapshot"})
    job.extra = [
        "--source-option", f"snapshotChunkRows={chunk_rows}",
        "--source-option", "snapshotChunksPerBatch=2",
    ]  # fmt: skip
    return job


def loaded_traffic(cluster: DevCluster, workdir: Path, rate: float) -> TrafficGenerator:
    """Preload the sample tables, then return traffic over those rows (not started)."""
    loader = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, workdir / "preload.jsonl",
        TrafficOptions(rate=0, seed=5),
    )  # fmt: skip
    loader.preload(PRELOAD, batch=2000)
    loader.close()
    live = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, workdir / "ledger.jsonl",
        TrafficOptions(rate=rate, seed=6, max_tx_rows=3),
    )  # fmt: skip
    live.adopt_existing_rows()
    return live


def snapshot_of(status: dict[str, Any]) -> dict[str, Any]:
    return dict(status.get("snapshot") or {})


def snapshot_versions(server: MariaDBFixture, database: str) -> tuple[int, int]:
    """(versions with a snapshot origin, distinct entities among them) in the Version Stream."""
    conn = pymysql.connect(
        host=server.host, port=server.port, user=server.admin.username,
        password=server.admin.password, database=database,
    )  # fmt: skip
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*), COUNT(DISTINCT entity) FROM versionstream "
                "WHERE origin LIKE '% snapshot'"
            )
            total, distinct = cur.fetchone()
            return int(total), int(distinct)
    finally:
        conn.close()


def planned_chunks(checkpoint: Path) -> list[tuple[int, str]]:
    """(batch, chunk) for every chunk in Spark's offset log: the batch that read it."""
    found = []
    for path in sorted((checkpoint / "offsets").iterdir(), key=lambda p: p.name):
        if not path.name.isdigit():
            continue
        offset = json.loads(path.read_text().strip().splitlines()[-1])
        snapshot = offset.get("_snapshot") or {}
        found += [(int(path.name), json.dumps(c, sort_keys=True)) for c in snapshot["chunks"]]
    return found


def assert_states_equal(job: StreamJob) -> None:
    for sink, report in verify_state(job).items():
        assert report["ok"], (sink, report)
        assert report["shard_rows"] >= PRELOAD * 0.9, (sink, report)


@pytest.mark.parametrize("flavor", ["mariadb"])  # one engine: docs/testing.md
def test_kill_9_at_three_moments_of_the_snapshot_resumes_at_the_first_unfinished_chunk(
    cluster: DevCluster, mariadb_server: MariaDBFixture, flavor: str, tmp_path: Path
) -> None:
    job = snapshot_stream(
        cluster, mariadb_server, tmp_path, f"us_snap_kill_{flavor}", chunk_rows=1000
    )
    traffic = loaded_traffic(cluster, tmp_path, rate=100)
    job.start()
    killed_at: list[dict[str, Any]] = []
    try:
        first = job.wait_for("the first chunks", lambda s: snapshot_of(s).get("chunksDone"))
        traffic.start()
        total = snapshot_of(first)["chunksTotal"]
        assert total >= 20, first
        # The last kill leaves chunks for several batches (of 2 chunks) after it: the status
        # file is read every 0.5 s, and a batch or two may end between two readings, so a kill
        # 3 chunks before the end could find the snapshot finished.
        moments = (1, total // 2, total - 7)
        for moment in moments:
            status = job.wait_for(
                f"{moment} chunks", lambda s, m=moment: snapshot_of(s).get("chunksDone", 0) >= m
            )
            assert not snapshot_of(status)["finished"], status
            assert job.process is not None
            job.process.kill()  # SIGKILL: no chance to tidy up
            job.process.wait()
            killed_at.append(snapshot_of(status))
            job.start()
        job.wait_for("the snapshot", lambda s: snapshot_of(s).get("finished"))
        traffic.stop()
        traffic.close()
        job.wait_caught_up(["-80", "80-"])
    finally:
        job.stop()
    assert_states_equal(job)
    versions, entities = snapshot_versions(mariadb_server, f"us_snap_kill_{flavor}")
    assert versions == entities > PRELOAD * 0.9  # no row of a finished chunk came twice
    chunks = planned_chunks(job.checkpoint)
    assert len({chunk for _, chunk in chunks}) == len(chunks)  # each chunk planned once
    assert [k["chunksDone"] for k in killed_at] == sorted(k["chunksDone"] for k in killed_at)


@pytest.mark.parametrize("flavor", ["mysql"])  # one engine: docs/testing.md
def test_a_split_halfway_through_the_snapshot_reads_the_rest_from_the_destinations(
    cluster: DevCluster, mariadb_server: MariaDBFixture, flavor: str, tmp_path: Path
) -> None:
    job = snapshot_stream(
        cluster, mariadb_server, tmp_path, f"us_snap_split_{flavor}", chunk_rows=1500
    )
    traffic = loaded_traffic(cluster, tmp_path, rate=200)
    job.start()
    try:
        job.wait_for("the first chunks", lambda s: snapshot_of(s).get("chunksDone"))
        traffic.start()
        half = job.wait_for(
            "half the chunks",
            lambda s: snapshot_of(s)["chunksDone"] * 2 >= snapshot_of(s)["chunksTotal"],
        )
        assert not snapshot_of(half)["finished"]
        reshard(cluster, "-80", "-40,40-80", OVERLAP)
        job.wait_for("the split's hop", lambda s: len(completed_hops(s)) == 1)
        final = job.wait_for("the snapshot", lambda s: snapshot_of(s).get("finished"))
        traffic.stop()
        traffic.close()
        job.wait_caught_up(["-40", "40-80", "80-"])
    finally:
        job.stop()
    (hop,) = completed_hops(final)
    assert (hop["from"], hop["to"]) == (["-80", "80-"], ["-40", "40-80", "80-"])
    assert_states_equal(job)
    versions, entities = snapshot_versions(mariadb_server, f"us_snap_split_{flavor}")
    assert versions == entities > PRELOAD * 0.9
