"""A real local Vitess v24 cluster (etcd, vtctld, vtgate, primary tablets on MySQL 8).

`vitess_cluster` is started once per test session (`-80,80-`) and stopped by pid at the end.
It needs `make vitess-tools` and `make mysql` (which `make test` runs first); without them the
fixture fails with the command to run. Tests that reshard it leave it serving `-80,80-` again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.vitess.cluster import VitessCluster

from harness.vitess_stream import reachable_dir
from tests.jobs.conftest import memcached  # noqa: F401  (the session's memcached server)
from updatestream import spec


def credentials(cluster: VitessCluster, role: sample_schema.Role) -> spec.Credentials:
    ref = spec.SecretRef(name=sample_schema.secret_name(cluster.keyspace, role))
    return spec.read_credentials(cluster.secrets_dir, ref)


@pytest.fixture(scope="session")
def vitess_cluster() -> Iterator[VitessCluster]:
    cluster = VitessCluster(reachable_dir("updatestream-vitess-") / "cluster")
    try:
        cluster.up("-80,80-")
        yield cluster
    finally:
        cluster.down(purge=True)
        cluster.dir.parent.rmdir()
