"""The Version Stream repository and the Multi Snapshot Cache against a real MariaDB."""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from updatestream_cli.devcluster.local_server import FLAVORS

from tests.conftest import MariaDBFixture
from updatestream.versionstream import (
    MultiSnapshotCache,
    Origin,
    Record,
    VersionNotFound,
    VersionStreamError,
    VersionStreamRepository,
)

DATABASE = "us_vsrepo"


@pytest.fixture(scope="module", params=FLAVORS)
def vs_server(request: pytest.FixtureRequest) -> MariaDBFixture:
    """The Version Stream's server: the session's MariaDB, or its MySQL 8."""
    fixture: MariaDBFixture = request.getfixturevalue(f"{request.param}_server")
    return fixture


@pytest.fixture
def repo(vs_server: MariaDBFixture) -> Iterator[VersionStreamRepository]:
    repository = make_repo(vs_server, f"r_{uuid.uuid4().hex[:10]}")
    repository.create_table()
    yield repository
    repository.close()


def make_repo(server: MariaDBFixture, table: str, stream: int = 0) -> VersionStreamRepository:
    def connect() -> pymysql.connections.Connection:
        return server.connect(autocommit=False)

    return VersionStreamRepository(connect, table=table, database=DATABASE, stream=stream)


def put(repo: VersionStreamRepository, entity: str, data: Any) -> int:
    result = repo.append([Record(entity, None if data is None else json.dumps(data))])
    assert result.last_version is not None
    return result.last_version


def test_fetch_last_new_versions_and_data(repo: VersionStreamRepository) -> None:
    assert repo.fetch_last_version() is None
    assert put(repo, "e1", {"n": 0}) == 0
    assert put(repo, "e2", {"n": 1}) == 1
    assert put(repo, "e2", {"n": 2}) == 2
    assert put(repo, "e1", None) == 3
    assert repo.fetch_last_version() == 3
    assert repo.fetch_new_versions(0) == {"e1": 3, "e2": 2}
    assert repo.fetch_new_versions(1, 2) == {"e2": 2}
    assert repo.fetch_data("e2", 1) == {"n": 1}
    assert repo.fetch_data("e1", 3) is None  # the tombstone
    assert repo.fetch_entry("e2", 2).previous_version == 1
    assert repo.fetch_entry("e1", 0).previous_version is None
    assert repo.fetch_history("e1") == [(0, {"n": 0}), (3, None)]
    with pytest.raises(VersionNotFound, match="no version 1 of entity 'e1'"):
        repo.fetch_data("e1", 1)


def test_streams_in_one_table_have_their_own_versions(
    vs_server: MariaDBFixture, repo: VersionStreamRepository
) -> None:
    other = make_repo(vs_server, repo.table.split(".")[-1].strip("`"), stream=5)
    put(repo, "a", 1)
    assert put(other, "a", 2) == 0
    assert put(repo, "a", 3) == 1
    assert other.fetch_data("a", 0) == 2
    other.close()


def test_origins_are_appended_at_most_once(repo: VersionStreamRepository) -> None:
    a, b = Origin("-80", "1-1-5", 0), Origin("-80", "1-1-5", 1)
    first = repo.append([Record("x", "1", a), Record("y", "2", b), Record("x", "1", a)])
    assert (first.appended, first.skipped, first.first_version) == (2, 1, 0)
    again = repo.append([Record("y", "2", b), Record("z", "3", Origin("80-", "2-2-1", 0))])
    assert (again.appended, again.skipped, again.first_version) == (1, 1, 2)
    assert repo.fetch_new_versions(0) == {"x": 0, "y": 1, "z": 2}


def test_naive_single_row_appends_are_gapless_too(repo: VersionStreamRepository) -> None:
    for n in range(5):
        repo.append_naive(f"e{n % 2}", json.dumps(n))
    assert repo.fetch_last_version() == 4
    assert repo.fetch_data("e0", 4) == 4


def test_concurrent_appenders_on_an_empty_stream_stay_gapless(
    vs_server: MariaDBFixture, repo: VersionStreamRepository
) -> None:
    errors: list[BaseException] = []

    def appender(name: str) -> None:
        try:
            for n in range(30):
                repo.append([Record(f"{name}{n}", "1"), Record(f"{name}{n}", "2")])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(f"t{i}-",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    versions = repo.fetch_new_versions(0)
    assert len(versions) == 120
    assert repo.fetch_last_version() == 239
    assert sorted(versions.values()) == list(range(1, 240, 2))  # each pair stayed adjacent


def lifecycle(repo: VersionStreamRepository) -> list[tuple[str, Any]]:
    """Entity 1 created, entity 2 created and updated, entity 1 deleted, entity 3 created,
    entity 1 re-created and updated, entity 2 deleted."""
    history: list[tuple[str, Any]] = [
        ("e1", {"v": "e1.0"}),
        ("e2", {"v": "e2.0"}),
        ("e2", {"v": "e2.1"}),
        ("e1", None),
        ("e3", {"v": "e3.0"}),
        ("e1", {"v": "e1.again"}),
        ("e1", {"v": "e1.again.1"}),
        ("e2", None),
    ]
    for entity, data in history:
        put(repo, entity, data)
    return history


def state_at(history: list[tuple[str, Any]], version: int) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for entity, data in history[: version + 1]:
        state[entity] = data
    return {e: d for e, d in state.items() if d is not None}


def test_snapshot_reads_at_every_old_version(repo: VersionStreamRepository) -> None:
    history = lifecycle(repo)
    cache = MultiSnapshotCache(repo)
    assert cache.refresh() == len(history) - 1
    for version in reversed(range(len(history))):
        expected = state_at(history, version)
        for entity in ("e1", "e2", "e3", "missing"):
            assert cache.get(entity, version) == expected.get(entity), (entity, version)
        assert cache.entities(version) == expected
    # deleted then re-created: gone at 3 and 4, back at 5
    assert [cache.get("e1", v) for v in (0, 3, 4, 5)] == [
        {"v": "e1.0"},
        None,
        None,
        {"v": "e1.again"},
    ]
    fetched = cache.fetches
    cache.get("e1", 1)
    assert cache.fetches == fetched  # immutable entries are served from the cache


def test_snapshot_beyond_the_last_version_is_refused(repo: VersionStreamRepository) -> None:
    lifecycle(repo)
    cache = MultiSnapshotCache(repo)
    with pytest.raises(VersionStreamError, match=r"snapshot 99 .* does not exist yet"):
        cache.get("e1", 99)


def test_cache_learns_new_versions_and_evicts_safely(repo: VersionStreamRepository) -> None:
    history = lifecycle(repo)
    cache = MultiSnapshotCache(repo, max_entries=2)
    assert cache.get("e2", 2) == {"v": "e2.1"}
    history.append(("e3", {"v": "e3.1"}))
    put(repo, "e3", {"v": "e3.1"})
    assert cache.get("e3", 8) == {"v": "e3.1"}
    assert cache.get("e3", 7) == {"v": "e3.0"}
    for version in range(len(history)):
        assert cache.entities(version) == state_at(history, version)


def test_concurrent_snapshot_reads_while_appending(repo: VersionStreamRepository) -> None:
    cache = MultiSnapshotCache(repo, max_entries=50)
    history: list[tuple[str, Any]] = []
    lock = threading.Lock()
    errors: list[str] = []
    done = threading.Event()

    def writer() -> None:
        rng = random.Random(1)
        for n in range(150):
            entity = f"e{rng.randrange(8)}"
            data = None if rng.random() < 0.2 else {"n": n}
            with lock:
                put(repo, entity, data)
                history.append((entity, data))
        done.set()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set() or rng.random() < 0.5:
            with lock:
                known = list(history)
            if not known:
                continue
            version = rng.randrange(len(known))
            entity = f"e{rng.randrange(8)}"
            got = cache.get(entity, version)
            want = state_at(known, version).get(entity)
            if got != want:
                errors.append(f"{entity}@{version}: {got} != {want}")

    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cache.entities(149) == state_at(history, 149)
