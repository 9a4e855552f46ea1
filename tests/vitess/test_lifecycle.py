"""A cluster's own life: up, down by pid with nothing left running, restart, purge."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pymysql
import pytest
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.errors import VitessStateError

from tests.vitess.conftest import credentials, reachable_dir


@pytest.fixture
def small_cluster() -> Iterator[VitessCluster]:
    cluster = VitessCluster(reachable_dir("updatestream-vitess-life-") / "cluster")
    try:
        yield cluster
    finally:
        cluster.down(purge=True)
        cluster.dir.parent.rmdir()


def _processes(cluster: VitessCluster) -> list[psutil.Process]:
    """Every running process whose command line names the cluster directory."""
    mine = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(cluster.dir) in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            mine.append(process)
    return mine


def _insert(cluster: VitessCluster, user_id: int) -> int:
    app = credentials(cluster, "app")
    conn = pymysql.connect(
        host="127.0.0.1", port=cluster.vtgate.mysql_port, user=app.username,
        password=app.password, database=cluster.keyspace, autocommit=True,
    )  # fmt: skip
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO users (id, name, created_at) VALUES (%s, 'x', UTC_TIMESTAMP(6))",
                (user_id,),
            )
            cur.execute("SELECT COUNT(*) FROM users")
            (count,) = cur.fetchone() or (0,)
            return int(count)
    finally:
        conn.close()


def test_down_stops_everything_and_up_restarts_with_the_data(
    small_cluster: VitessCluster,
) -> None:
    cluster = small_cluster
    cluster.up("-")
    assert len(_processes(cluster)) == 5  # etcd, vtctld, vtgate, vttablet, mysqld
    assert _insert(cluster, 1) == 1
    stopped = cluster.down()
    assert stopped == ["vtgate", "vttablet zone1-0000000100", "mysqld -", "vtctld", "etcd"]
    assert _processes(cluster) == []
    error_log = (cluster.tablet("-").dir(cluster.env()) / "error.log").read_text()
    assert "Received SHUTDOWN from user vt_dba" in error_log  # mysqlctl's clean shutdown
    cluster.up()  # the same ports, datadir and primary; writable again
    assert _insert(cluster, 2) == 2
    with pytest.raises(VitessStateError, match="serves -, not -80,80-"):
        cluster.up("-80,80-")
    assert cluster.down(purge=True)
    assert not cluster.dir.exists()
