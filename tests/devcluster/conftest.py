"""Fixtures of the development-cluster tests: clusters of their own, since they change data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from updatestream_cli.devcluster.cluster import DevCluster


@pytest.fixture(scope="module")
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A two-shard cluster for one test module."""
    cluster = DevCluster(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.up("-80,80-")
        yield cluster
    finally:
        cluster.down()
