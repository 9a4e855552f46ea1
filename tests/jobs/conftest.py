"""Fixtures of the jobs tests.

- `memcached`: one real memcached for the session (`-U 0 -m 64` on a free loopback port),
  stopped by its pid at the end. Tests that need an empty cache call `memcached.flush()` or use
  keys of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from updatestream_cli.devcluster.memcached_server import MemcachedServer


@pytest.fixture(scope="session")
def memcached() -> Iterator[MemcachedServer]:
    with MemcachedServer() as server:
        yield server


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for the jobs tests (2 cores, small shuffles, no UI), with the
    `updatestream` data source registered. Stopped at the end of the session."""
    from updatestream_jobs.job import spark_session

    session = spark_session("local[2]", "updatestream-tests")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        yield session
    finally:
        session.stop()
