"""A real local Vitess v24 cluster (etcd, vtctld, vtgate, primary tablets on MySQL 8).

`vitess_cluster` is started once per test session (`-80,80-`) and stopped by pid at the end;
before each module it is checked, and rebuilt when a module before failed midway and left it
resharded, with a process down or a workflow behind (tests that reshard it leave it serving
`-80,80-` again when they pass). It needs `make vitess-tools` and `make mysql` (which
`make test` runs first); without them the fixture fails with the command to run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.errors import VitessError

from harness.vitess_stream import reachable_dir
from tests.jobs.conftest import memcached  # noqa: F401  (the session's memcached server)
from updatestream import spec

SHARDS = "-80,80-"


def credentials(cluster: VitessCluster, role: sample_schema.Role) -> spec.Credentials:
    ref = spec.SecretRef(name=sample_schema.secret_name(cluster.keyspace, role))
    return spec.read_credentials(cluster.secrets_dir, ref)


class SessionCluster:
    """The session's cluster; `rebuilt` when a module before left it unable to serve."""

    def __init__(self) -> None:
        self.cluster = VitessCluster(reachable_dir("updatestream-vitess-") / "cluster")

    def rebuilt(self) -> VitessCluster:
        self.cluster.down(purge=True)
        self.cluster = VitessCluster(self.cluster.dir)
        self.cluster.up(SHARDS)
        return self.cluster


def cluster_problem(cluster: VitessCluster) -> str | None:
    """Why `cluster` cannot serve the next module as `-80,80-` with no workflow, or None."""
    env = cluster.env()
    serving = cluster.serving_shards_recorded()
    if serving != SHARDS.split(","):
        return f"it serves {','.join(serving)}"
    tablets = cluster.tablets()
    if sorted(t.shard for t in tablets) != sorted(serving):
        return f"it has tablets of {','.join(t.shard for t in tablets)}"
    down = [f"vttablet {t.shard}" for t in tablets if not t.vttablet_running(env)]
    down += [f"mysqld {t.shard}" for t in tablets if not t.mysqld_running(env)]
    down += [] if cluster.vtgate.is_running(env) else ["vtgate"]
    down += [] if cluster.vtctld.is_running(env) else ["vtctld"]
    if down:
        return f"{', '.join(down)} not running"
    try:
        workflows = cluster.vtctl().json("Workflow", "--keyspace", cluster.keyspace, "list")
    except VitessError as exc:
        return f"vtctld cannot list its workflows: {exc}"
    return f"workflows are left: {workflows}" if workflows else None


@pytest.fixture(scope="session")
def _session_cluster() -> Iterator[SessionCluster]:
    session = SessionCluster()
    try:
        session.cluster.up(SHARDS)
        yield session
    finally:
        session.cluster.down(purge=True)
        session.cluster.dir.parent.rmdir()


@pytest.fixture(scope="module")
def vitess_cluster(_session_cluster: SessionCluster) -> VitessCluster:
    """The session's cluster, checked before each module: one that a failed module left
    resharded, with a dead process or a workflow is rebuilt, so the failure stays its own."""
    problem = cluster_problem(_session_cluster.cluster)
    if problem is None:
        return _session_cluster.cluster
    print(f"the Vitess cluster is rebuilt for this module: {problem}")
    return _session_cluster.rebuilt()
