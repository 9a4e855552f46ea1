"""Fixtures for the tests on the one-node cluster (tests/cluster/node.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.kube import ensure_kube_tools
from tests.cluster.node import Node


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the node's binaries before the first test when one needs them (a cold build is
    longer than the per-test timeout); later runs only compare a hash."""
    if any("node" in getattr(item, "fixturenames", ()) for item in items):
        ensure_kube_tools()


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    """A running one-node cluster with the project's image loaded; stopped, and the host
    restored, after the module. A node that cannot come up fails the test."""
    cluster = Node()
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()
