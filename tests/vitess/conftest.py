"""A real local Vitess v24 cluster (etcd, vtctld, vtgate, primary tablets on MySQL 8).

`vitess_cluster` is started once per test session (`-80,80-`) and stopped by pid at the end.
It needs `make vitess-tools` and `make mysql` (which `make test` runs first); without them the
fixture fails with the command to run. Tests that reshard it leave it serving `-80,80-` again.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.vitess.cluster import VitessCluster

from tests.jobs.conftest import memcached  # noqa: F401  (the session's memcached server)
from updatestream import spec


def reachable_dir(prefix: str) -> Path:
    """A fresh directory the cluster's unprivileged user can reach (pytest's tmp_path is
    inside a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=tempfile.gettempdir()))
    os.chmod(path, 0o755)
    return path


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
