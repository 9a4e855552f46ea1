"""Partitioned Version Streams, their stream-of-streams, sub-streams and the Multi Snapshot Cache
reading them, against a real MariaDB."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from tests.conftest import MariaDBFixture
from updatestream.versionstream import (
    CombinedStream,
    MultiSnapshotCache,
    Origin,
    PartitionedStream,
    Recombiner,
    Record,
    StreamOfStreams,
    SubStream,
    VersionNotFound,
    VersionStreamError,
    VersionStreamRepository,
    partition_of,
    partition_streams,
)

DATABASE = "us_vspart"
PARTITIONS = 4


def connector(server: MariaDBFixture) -> Any:
    def connect() -> pymysql.connections.Connection:
        return server.connect(autocommit=False)

    return connect


@pytest.fixture
def table(mariadb_server: MariaDBFixture) -> Iterator[str]:
    name = f"p_{uuid.uuid4().hex[:10]}"
    stream = PartitionedStream(
        connector(mariadb_server), table=name, database=DATABASE, partitions=PARTITIONS
    )
    stream.create_table()
    stream.close()
    yield name


def writer(server: MariaDBFixture, table: str) -> PartitionedStream:
    return PartitionedStream(
        connector(server), table=table, database=DATABASE, partitions=PARTITIONS
    )


def combined(server: MariaDBFixture, table: str) -> CombinedStream:
    return CombinedStream(connector(server), table=table, database=DATABASE, partitions=PARTITIONS)


def stored(server: MariaDBFixture, table: str) -> dict[int, list[tuple[int, str, Any]]]:
    """Every version of every partition: stream -> [(version, entity, data)] in version order."""
    out: dict[int, list[tuple[int, str, Any]]] = defaultdict(list)
    with server.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT stream, version, entity, data FROM {table} ORDER BY stream, version")
        for stream, version, entity, data in cur.fetchall():
            out[int(stream)].append(
                (int(version), str(entity), None if data is None else json.loads(data))
            )
    return out


def sos_rows(server: MariaDBFixture, table: str) -> list[tuple[int, int, int]]:
    with server.connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT version, partition_stream, partition_version FROM {table}_sos "
            "WHERE stream = 0 ORDER BY version"
        )
        return [(int(v), int(p), int(m)) for v, p, m in cur.fetchall()]


def states_at(
    partitions: dict[int, list[tuple[int, str, Any]]], mapping: dict[int, int]
) -> dict[str, Any]:
    """The combined state at a mapping, straight from the partitions' rows."""
    state: dict[str, Any] = {}
    for stream, versions in partitions.items():
        for version, entity, data in versions:
            if version <= mapping.get(stream, -1):
                state[entity] = data
    return {e: d for e, d in state.items() if d is not None}


def test_entities_are_spread_over_the_partitions_the_same_way_everywhere() -> None:
    counts = Counter(partition_of(f'users:{{"id":{n}}}', 4) for n in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert min(counts.values()) > 800
    assert partition_of('users:{"id":1}', 4) == partition_of('users:{"id":1}', 4)
    assert partition_streams(10, 3) == [10, 11, 12]
    with pytest.raises(VersionStreamError, match="1 to 64 partitions"):
        partition_streams(0, 0)


def test_concurrent_writers_keep_every_partition_gapless_and_ordered(
    mariadb_server: MariaDBFixture, table: str
) -> None:
    """Four writers, each with its own connections, append batches at once; two of them append
    every batch twice (a replay). Every partition ends gapless, each origin once, each
    entity's versions in its writer's order, every entity in its own partition."""
    batches, per_batch = 12, 40

    def write(number: int) -> None:
        stream = writer(mariadb_server, table)
        try:
            for batch in range(batches):
                records = [
                    Record(
                        f"w{number}:{(batch * per_batch + i) % 25}",
                        json.dumps({"writer": number, "seq": batch * per_batch + i}),
                        Origin(f"w{number}", f"0-1-{batch}", i),
                    )
                    for i in range(per_batch)
                ]
                stream.append(records)
                if number % 2:
                    assert stream.append(records).appended == 0
        finally:
            stream.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    partitions = stored(mariadb_server, table)
    assert set(partitions) == set(range(PARTITIONS))
    assert sum(len(v) for v in partitions.values()) == 4 * batches * per_batch
    for stream, versions in partitions.items():
        assert [v for v, _, _ in versions] == list(range(len(versions)))
        assert {partition_of(e, PARTITIONS) for _, e, _ in versions} == {stream}
        seqs: dict[str, list[int]] = defaultdict(list)
        for _, entity, data in versions:
            seqs[entity].append(data["seq"])
        assert all(s == sorted(s) for s in seqs.values())


def test_the_stream_of_streams_orders_the_partitions_into_one_stream(
    mariadb_server: MariaDBFixture, table: str
) -> None:
    rng = random.Random(5)
    stream = writer(mariadb_server, table)
    for batch in range(15):
        records = [
            Record(
                f"e{rng.randrange(30)}", None if rng.random() < 0.1 else json.dumps(batch * 10 + i)
            )
            for i in range(rng.randint(1, 12))
        ]
        result = stream.append(records)
        assert result.combined_version is not None
    stream.close()
    sos = sos_rows(mariadb_server, table)
    assert [v for v, _, _ in sos] == list(range(len(sos)))  # gapless
    by_partition: dict[int, list[int]] = defaultdict(list)
    for _, partition, mapped in sos:
        by_partition[partition].append(mapped)
    partitions = stored(mariadb_server, table)
    for partition, mapped in by_partition.items():
        assert mapped == sorted(set(mapped))  # only ever forward
        assert mapped[-1] == partitions[partition][-1][0]  # up to the last committed version
    # the cache reads the combined stream: at every version, the partitions at its mapping
    reader = combined(mariadb_server, table)
    cache = MultiSnapshotCache(reader)
    mapping: dict[int, int] = {}
    for version, partition, mapped in sos:
        mapping[partition] = mapped
        assert cache.entities(version) == states_at(partitions, mapping), version
    latest = states_at(partitions, mapping)
    entity = next(iter(latest))
    assert cache.get(entity, sos[-1][0]) == latest[entity]
    with pytest.raises(VersionNotFound):
        reader.fetch_entry("never-written", sos[-1][0])
    reader.close()


def test_an_entity_never_goes_back_in_the_combined_stream(
    mariadb_server: MariaDBFixture, table: str
) -> None:
    """One writer counts ten entities up while a recombiner runs on its own and a reader
    follows the combined stream through the cache: what it sees only moves forward."""
    repositories = [
        VersionStreamRepository(connector(mariadb_server), table=table, database=DATABASE, stream=s)
        for s in partition_streams(0, PARTITIONS)
    ]
    sos = StreamOfStreams(
        connector(mariadb_server), table=table, database=DATABASE, stream=0,
        partition_streams=partition_streams(0, PARTITIONS),
    )  # fmt: skip
    recombiner = Recombiner(sos, interval=0.02).start()
    reader = combined(mariadb_server, table)
    cache = MultiSnapshotCache(reader)
    seen: dict[str, int] = {}
    committed_at: dict[tuple[str, int], float] = {}
    lags: list[float] = []
    for count in range(40):
        for n in range(10):
            entity = f"counter{n}"
            repositories[partition_of(entity, PARTITIONS)].append(
                [Record(entity, json.dumps(count))]
            )
            committed_at[(entity, count)] = time.monotonic()
        last = cache.refresh()
        if last is None:
            continue
        for entity, value in cache.entities(last).items():
            assert value >= seen.get(entity, -1), (entity, value, seen)
            if value > seen.get(entity, -1):
                lags.append(time.monotonic() - committed_at[(entity, value)])
            seen[entity] = value
    recombiner.stop()  # one last recombination: everything committed is mapped
    assert recombiner.rounds > 0
    assert cache.entities(cache.refresh() or 0) == {f"counter{n}": 39 for n in range(10)}
    assert lags and max(lags) < 5.0  # bounded by the interval (generously: a busy machine)
    for repository in repositories:
        repository.close()
    reader.close()
    sos.close()


def test_a_sub_stream_is_one_tables_projection(mariadb_server: MariaDBFixture, table: str) -> None:
    stream = writer(mariadb_server, table)
    stream.append([Record('users:{"id":1}', '{"v":1}'), Record('orders:{"id":1}', '{"v":2}')])
    stream.append([Record('users:{"id":2}', '{"v":3}'), Record('users:{"id":1}', None)])
    stream.close()
    single = VersionStreamRepository(
        connector(mariadb_server), table=table, database=DATABASE, stream=50
    )
    single.append([Record('users:{"id":9}', "1"), Record('orders:{"id":9}', "2")])
    reader = combined(mariadb_server, table)
    users = SubStream(reader, "users")
    last = users.fetch_last_version()
    assert last is not None
    assert MultiSnapshotCache(users).entities(last) == {'users:{"id":2}': {"v": 3}}
    assert MultiSnapshotCache(SubStream(reader, "orders")).entities(last) == {
        'orders:{"id":1}': {"v": 2}
    }
    assert MultiSnapshotCache(SubStream(single, "orders")).entities(1) == {'orders:{"id":9}': 2}
    with pytest.raises(VersionNotFound, match="sub-stream users"):
        users.fetch_entry('orders:{"id":1}', last)
    single.close()
    reader.close()


def test_a_long_table_name_leaves_no_room_for_the_stream_of_streams(
    mariadb_server: MariaDBFixture,
) -> None:
    with pytest.raises(VersionStreamError, match="at most 60"):
        PartitionedStream(connector(mariadb_server), table="t" * 61, partitions=2)
