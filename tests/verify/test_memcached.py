"""`updatestream verify --sink memcached` against a real memcached invalidated by the real sink
from the real change events of a traffic run, reading the rows through the manifest; then with
an older token and with an older value written into entries."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pymemcache.client.base import Client
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_jobs.sinks.memcached_sink import MemcachedSink

from tests.verify.conftest import Scenario
from tests.verify.streams import Run, batches, feed, verify
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.cache.entry import encode
from updatestream.cache.key_templates import KeyTemplates


@pytest.fixture(scope="module")
def cache(scenario: Scenario, memcached: MemcachedServer) -> Iterator[Client]:
    memcached.flush()
    config = spec.MemcachedSink.model_validate(
        {"type": "memcached", "servers": [memcached.address]}
    )
    feed(MemcachedSink(config, keyspace="commerce"), batches(scenario.events))
    client = Client(("127.0.0.1", memcached.port))
    try:
        yield client
    finally:
        client.close()


def histories(scenario: Scenario) -> dict[tuple[str, str], list[ChangeEvent]]:
    found: dict[tuple[str, str], list[ChangeEvent]] = {}
    for events in scenario.events.values():
        for event in events:
            found.setdefault((event.table or "", event.pk or ""), []).append(event)
    return found


def run(scenario: Scenario, memcached: MemcachedServer, *more: str) -> Run:
    cluster = scenario.cluster
    return verify(
        "--ledger", scenario.ledger_path, "--sink", "memcached", "--servers", memcached.address,
        "--keyspace-manifest", cluster.manifest_path, "--secrets-dir", cluster.secrets_dir,
        "--json", *more,
    )  # fmt: skip


def test_clean_then_stale_token_then_stale_value(
    scenario: Scenario, memcached: MemcachedServer, cache: Client
) -> None:
    keys = KeyTemplates("commerce")
    changed = [
        (key, events)
        for key, events in histories(scenario).items()
        if len(events) >= 2 and events[-1].op != "delete" and events[-2].op != "delete"
    ]
    assert len(changed) >= 2
    (first_key, first), (second_key, second) = changed[:2]
    first_name = keys.key(first_key[0], json.loads(first_key[1]))
    second_name = keys.key(second_key[0], json.loads(second_key[1]))
    # a reader loaded the row at its last change: token and the current row as value
    assert second[-1].after is not None
    cache.set(second_name, encode(second[-1].token, second[-1].after.encode()))

    result = run(scenario, memcached)
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert report["stale_keys"] == 0
    assert report["committed"] == len(scenario.ledger)
    assert report["delivered"] == len({(e.table, e.pk) for e in scenario.ledger})
    assert (report["lost"], report["duplicates_delivered"]) == (0, 0)

    fresh = cache.get(first_name)
    assert fresh == encode(first[-1].token)
    cache.set(first_name, encode(first[-2].token))  # an older token
    result = run(scenario, memcached)
    assert result.returncode == 1
    assert result.json()["stale_keys"] == 1
    cache.set(first_name, fresh)

    assert second[-2].after is not None
    cache.set(second_name, encode(second[-1].token, second[-2].after.encode()))  # older value
    result = run(scenario, memcached)
    assert result.returncode == 1
    assert result.json()["stale_keys"] == 1
