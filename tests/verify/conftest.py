"""Fixtures of the verifier tests.

- `memcached`: one real memcached for this package (the jobs tests' server class).
- `scenario`: a two-shard cluster of this package's own, a short traffic run with a ledger, and
  the change events of that run read from the shards' binlogs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.traffic import TrafficOptions

from harness.stream_job import traffic_generator
from tests.binlogs import config_for, positions
from tests.verify.streams import read_events
from updatestream.binlog.events import ChangeEvent


@pytest.fixture(scope="package")
def memcached() -> Iterator[MemcachedServer]:
    with MemcachedServer() as server:
        yield server


@dataclass
class Scenario:
    cluster: DevCluster
    ledger_path: Path
    ledger: list[LedgerEntry]
    events: dict[str, list[ChangeEvent]]


@pytest.fixture(scope="package")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    with DevCluster(tmp_path_factory.mktemp("verify-cluster")).running("-80,80-") as cluster:
        config = config_for(cluster)
        start = positions(config)
        ledger = tmp_path_factory.mktemp("verify-ledger") / "ledger.jsonl"
        options = TrafficOptions(rate=250, duration=2.0, seed=5)
        generator = traffic_generator(cluster, ledger, options)
        generator.run()
        generator.close()
        events = read_events(config, start, positions(config))
        yield Scenario(cluster, ledger, list(read_ledger(ledger)), events)
