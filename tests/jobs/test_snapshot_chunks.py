"""Snapshot chunks against real shards (no Spark), on MariaDB and on MySQL 8: a row read by the
snapshot encodes to exactly the text the binlog's image of it encodes to, on the columnar path and
on the row path; a chunk read after changes equals the table at the position it is read as of."""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from typing import Any

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_cli.devcluster.traffic import TrafficOptions

from harness.stream_job import traffic_generator
from tests.binlogs import config_for, positions, read
from updatestream.binlog.errors import ShardUnreachable
from updatestream.binlog.session import ShardSession
from updatestream.core.gtid import MariaDBGTID
from updatestream.core.snapshot_plan import Chunk
from updatestream.core.token import EventToken
from updatestream.core.vschema import VSchema
from updatestream.snapshot import chunks, columns
from updatestream.snapshot.chunks import ChunkReader
from updatestream.snapshot.tables import chunk_upper, describe_table, last_key

TABLES = ("users", "orders", "events")
pytestmark = pytest.mark.parametrize("flavor", FLAVORS, indirect=True, scope="module")

AWKWARD = [
    ("users", "INSERT INTO users (id, name, email, balance, visits, status, flags, profile, "
     "created_at, updated_at) VALUES (%s, %s, %s, -3.50, 7, 'closed', 'vip,admin', %s, "
     "'2024-02-29 23:59:59.000000', '2024-03-01 00:00:00.000001')"),
    ("events", "INSERT INTO events (event_key, kind, seq, payload, attrs, tags, occurred_at) "
     "VALUES (%s, %s, 18446744073709551615, %s, '{\"k\": [1, 2]}', 'blue,red', "
     "'2001-01-01 00:00:00')"),
]  # fmt: skip


def awkward_rows(cluster: DevCluster) -> None:
    """Rows whose text needs care: quotes, backslashes, control characters, non-ASCII, astral
    characters, DEL, an empty SET, a zero-microsecond DATETIME, a top-range unsigned, bytes."""
    names = ['q"uo\\te', "tab\tnew\nline\x01", "Zoë 明 🎉", "del\x7f"]
    for shard in ("-80", "80-"):
        with cluster.connect(shard, "admin", "commerce") as conn, conn.cursor() as cur:
            for number, name in enumerate(names):
                key = 9_000_000 + number * 2 + (0 if shard == "-80" else 1)
                cur.execute(AWKWARD[0][1], (key, name, None if number % 2 else name, '{"a": "é"}'))
                cur.execute(
                    AWKWARD[1][1], (f"awk-{shard}-{number}-{name}", name, bytes(range(256)))
                )
            cur.execute(
                "UPDATE users SET flags = '' WHERE id = %s",
                (9_000_000 + (0 if shard == "-80" else 1),),
            )
            conn.commit()


@pytest.fixture(scope="module")
def loaded(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    config = config_for(cluster)
    start = positions(config)
    ledger = tmp_path_factory.mktemp("ledger") / "ledger.jsonl"
    gen = traffic_generator(cluster, ledger, TrafficOptions(rate=0, seed=31))
    gen.preload(3000, batch=500)
    gen.close()
    awkward_rows(cluster)
    return {"config": config, "start": start, "end": positions(config)}


def binlog_state(config: Any, start: Any, end: Any, shard: str) -> dict[tuple[str, str], str]:
    """Each key's last image in the binlog between start and end (all rows were written then)."""
    state: dict[tuple[str, str], str] = {}
    for event in read(config, shard, start[shard], end[shard]):
        key = (event.table or "", event.pk or "")
        if event.op == "delete":
            state.pop(key, None)
        else:
            assert event.after is not None
            state[key] = event.after
    return state


def snapshot_state(config: Any, shard: str, at: EventToken) -> dict[tuple[str, str], str]:
    endpoint = config.endpoint(shard)
    state: dict[tuple[str, str], str] = {}
    with ShardSession(endpoint, config.reader) as session:
        for table in TABLES:
            info = describe_table(session, "commerce", table)
            last = last_key(session, info)
            frontier = None
            while last is not None and (frontier is None or frontier < last):
                upto = chunk_upper(session, info, frontier, 700, last)
                chunk = Chunk(f"t:{table}", "-", table, frontier, upto)
                for row in ChunkReader(config.reader, endpoint, chunk, at).rows():
                    assert row[2] == "snapshot" and row[8] == at.dumps()
                    assert (row[3], row[4]) not in state
                    state[(row[3], row[4])] = row[7]
                frontier = upto
    return state


@pytest.mark.parametrize("path", ["columnar", "rows"])
def test_a_snapshot_row_encodes_exactly_like_its_binlog_image(
    loaded: dict[str, Any], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "rows":
        monkeypatch.setattr(chunks, "columnar_query", lambda info, vschema: None)
    config, start, end = loaded["config"], loaded["start"], loaded["end"]
    for shard in ("-80", "80-"):
        at = EventToken(0, shard, end[shard])
        expected = binlog_state(config, start, end, shard)
        got = snapshot_state(config, shard, at)
        assert len(expected) > 1000
        mismatched = [k for k in expected if got.get(k) != expected[k]]
        assert mismatched == [] and set(got) == set(expected), [
            (k, expected[k], got.get(k)) for k in mismatched[:3]
        ]


def test_every_sample_table_takes_the_columnar_path(loaded: dict[str, Any]) -> None:
    config = loaded["config"]
    with ShardSession(config.endpoint("-80"), config.reader) as session:
        for table in TABLES:
            info = describe_table(session, "commerce", table)
            vschema = VSchema.from_json(config.vschema_json)
            assert columns.columnar_query(info, vschema) is not None


def test_a_chunk_read_after_changes_is_the_table_at_its_position(
    cluster: DevCluster, loaded: dict[str, Any]
) -> None:
    """Rows inserted, updated, deleted and re-keyed after the position a chunk is read as of are
    undone with the binlog's before images."""
    config = loaded["config"]
    before = positions(config)
    at = EventToken(0, "-80", before["-80"])
    expected = snapshot_state(config, "-80", at)
    rng = random.Random(7)
    users = sorted(json.loads(pk)["id"] for table, pk in expected if table == "users")
    with cluster.connect("-80", "admin", "commerce") as conn, conn.cursor() as cur:
        for user in rng.sample(users, 40):
            cur.execute(
                "UPDATE users SET visits = visits + 1, name = 'changed' WHERE id = %s", (user,)
            )
        for user in rng.sample(users, 20):
            cur.execute("DELETE FROM users WHERE id = %s", (user,))
        moved = rng.choice(users)
        cur.execute("UPDATE users SET id = id + 50000000 WHERE id = %s", (moved,))
        cur.execute(
            "INSERT INTO users (id, name, created_at) SELECT id + 1, 'new', NOW(6) FROM users "
            "WHERE id < 9000000 ORDER BY id DESC LIMIT 1 ON DUPLICATE KEY UPDATE name = 'x'"
        )
        conn.commit()
    assert snapshot_state(config, "-80", at) == expected


def test_a_chunk_read_with_a_wrong_password_is_a_typed_error_without_it(
    cluster: DevCluster, loaded: dict[str, Any], tmp_path: Any
) -> None:
    """A refused login is a ShardUnreachable naming the shard, the Secret and the server's
    reason, never the password; it comes from the plain connection tried before connectorx,
    whose pool would retry the login for 30 s first."""
    secrets = tmp_path / "secrets"
    (secrets / "wrong").mkdir(parents=True)
    (secrets / "wrong" / "username").write_text("app_user_that_does_not_exist")
    (secrets / "wrong" / "password").write_text("Sup3r-Secret-Pw")
    config = dataclasses.replace(loaded["config"].reader, secrets_dir=str(secrets))
    endpoint = dataclasses.replace(loaded["config"].endpoint("-80"), secret="wrong")
    with pytest.raises(ShardUnreachable) as caught:
        columns.fetch(endpoint, config, "SELECT 1")
    message = str(caught.value)
    assert "'wrong'" in message and "-80" in message
    assert "MySQL error 1045: Access denied" in message, message
    assert "Sup3r-Secret-Pw" not in message


def test_a_chunk_waits_until_the_transactions_up_to_its_position_are_visible(
    cluster: DevCluster, loaded: dict[str, Any]
) -> None:
    """MariaDB lists a transaction in `@@gtid_binlog_pos` before its rows are visible, so the
    reader waits until a consistent snapshot's own position contains the chunk's: at once for a
    position the shard has, until the commit for one a transaction ahead, and never for a
    position the shard does not reach (a typed error naming the shard)."""
    config = loaded["config"].reader
    endpoint = loaded["config"].endpoint("-80")
    now = positions(loaded["config"])["-80"]
    if endpoint.flavor == "mysql":  # no wait on MySQL (see the chunks module)
        assert chunks.wait_until_visible(endpoint, config, now) == 0
        return
    assert chunks.wait_until_visible(endpoint, config, now) == 1
    (last,) = list(now)
    ahead = now.advance(MariaDBGTID(last.domain, last.server, last.seq + 1))
    committed: list[float] = []

    def commit_later() -> None:
        time.sleep(1.0)
        with cluster.connect("-80", "admin", "commerce") as conn, conn.cursor() as cur:
            cur.execute("UPDATE users SET visits = visits + 1 ORDER BY id LIMIT 1")
            conn.commit()
        committed.append(time.monotonic())

    writer = threading.Thread(target=commit_later)
    writer.start()
    looks = chunks.wait_until_visible(endpoint, config, ahead, timeout=120)
    returned = time.monotonic()
    writer.join()
    assert looks > 1 and committed and committed[0] <= returned
    with cluster.connect("-80", "admin", "commerce") as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")  # a new binlog file: its coordinates start again
    assert chunks.wait_until_visible(endpoint, config, ahead) == 1
    never = now.advance(MariaDBGTID(last.domain, last.server, last.seq + 1000))
    with pytest.raises(ShardUnreachable, match=r"-80.*stalled") as caught:
        chunks.wait_until_visible(endpoint, config, never, timeout=0.5)
    assert str(never) in str(caught.value)
