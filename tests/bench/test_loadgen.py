"""The C load generator against real MariaDB shards: its ledger checks clean, its rows land on
the shards their keyspace ids say, and its keyspace ids are the Python vindexes'."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
from pathlib import Path

import pytest
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import read_ledger
from updatestream_cli.devcluster.verify import check_ledger

from bench.loadgen_runner import Load, LoadgenError, LoadOptions, build, run_load
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema

VSCHEMA = VSchema.from_dict(sample_schema.VSCHEMA, keyspace="commerce")


def ksid_of(table: str, row: dict[str, object]) -> bytes:
    ksid = VSCHEMA.keyspace_id_for(table, row)
    assert ksid is not None
    return ksid


def c_keyspace_ids(lines: list[str]) -> list[str]:
    done = subprocess.run(
        [str(build()), "--keyspace-ids"],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_keyspace_ids_are_the_python_vindexes() -> None:
    rng = random.Random(7)
    ids = [1, 2, 3, 2**31, 2**63 - 1, *(rng.randrange(1, 2**63) for _ in range(300))]
    keys = ["ev-1", "", "ünïcödé", *(f"ev-{rng.randrange(2**40):x}-{i:04x}" for i in range(300))]
    lines = [f"users {n}" for n in ids] + [f"orders {n}" for n in ids]
    lines += [f"events {k}" for k in keys]
    expected = [VSCHEMA.keyspace_id_for("users", {"id": n}) for n in ids]
    expected += [VSCHEMA.keyspace_id_for("orders", {"order_id": 1, "user_id": n}) for n in ids]
    expected += [VSCHEMA.keyspace_id_for("events", {"event_key": k}) for k in keys]
    got = c_keyspace_ids(lines)
    assert got[:2] == ["166b40b44aba4bd6", "06e7ea22ce92708f"]
    assert got == [ksid.hex() for ksid in expected if ksid is not None]


def test_the_ledger_checks_clean_against_the_shards(cluster: DevCluster, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    options = LoadOptions(rate=1500, duration=3, seed=11, connections=2)
    first = run_load(cluster.manifest_path, cluster.secrets_dir, ledger, options)
    # several transactions per round trip: each still its own commit, GTID and clock
    pipelined = dataclasses.replace(options, seed=12, pipeline=4)
    second = run_load(cluster.manifest_path, cluster.secrets_dir, ledger, pipelined)
    entries = read_ledger(ledger)  # the ledger's one reader (the verifier's too) checks each line
    assert first.figures.rows > 1000 and second.figures.rows > 1000
    assert len(entries) == first.figures.rows + second.figures.rows
    # one numbering over both runs, as the Python generator continues a ledger
    assert [e.order for e in entries] == list(range(1, len(entries) + 1))
    assert {e.op for e in entries} == {"insert", "update", "delete"}
    assert {e.table for e in entries} == set(sample_schema.COLUMNS)
    assert second.figures.by_shard.keys() == {"-80", "80-"}
    check = check_ledger(cluster, ledger)
    assert check.ok, (check.missing[:3], check.unexpected[:3], check.different[:3])
    assert check.database_rows == check.ledger_rows > 0
    # every transaction has the GTID its shard gave it: one per transaction, the newest one is
    # where the shard's binlog ends (writers of one shard record their commits in the order
    # they get the ledger, which may differ from the GTIDs' between transactions in flight)
    transactions = {(e.tx, e.shard, e.gtid) for e in entries}
    assert len({(shard, gtid) for _, shard, gtid in transactions}) == len(transactions)
    assert len(transactions) == first.figures.transactions + second.figures.transactions
    for shard in ("-80", "80-"):
        newest = max(
            (e.gtid for e in entries if e.shard == shard), key=lambda g: int(g.split("-")[2])
        )
        assert cluster.server(shard).gtid_position() == newest


def test_every_row_sits_on_the_shard_of_its_keyspace_id(
    cluster: DevCluster, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    run_load(cluster.manifest_path, cluster.secrets_dir, ledger, LoadOptions(rate=800, duration=2))
    user_of: dict[int, int] = {}
    for shard in ("-80", "80-"):
        key_range = KeyRange.parse(shard)
        with cluster.connect(shard, "admin", sample_schema.DATABASE) as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM users")
            ids = [row[0] for row in cur.fetchall()]
            cur.execute("SELECT order_id, user_id FROM orders")
            user_of |= dict(cur.fetchall())
        for uid in ids:
            assert key_range.contains(ksid_of("users", {"id": uid}))
    for order_id, user_id in user_of.items():
        ksid = ksid_of("orders", {"order_id": order_id, "user_id": user_id})
        assert cluster.serving_map().shard_for(ksid).contains(ksid)
    checked = 0
    for entry in read_ledger(ledger):
        pk = json.loads(entry.pk)
        assert KeyRange.parse(entry.shard).contains(bytes.fromhex(entry.keyspace_id))
        if entry.table == "orders":
            if pk["order_id"] not in user_of:
                continue  # deleted since: its user is not known here
            pk["user_id"] = user_of[pk["order_id"]]
        assert ksid_of(entry.table, pk).hex() == entry.keyspace_id
        checked += 1
    assert checked > 500


def test_the_rate_is_kept_and_a_stop_ends_the_run(cluster: DevCluster, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    paced = run_load(
        cluster.manifest_path, cluster.secrets_dir, ledger, LoadOptions(rate=500, duration=4)
    )
    assert 300 <= paced.figures.committed_rows_per_s <= 700
    load = Load(cluster.manifest_path, cluster.secrets_dir, tmp_path / "open.jsonl",
                LoadOptions(rate=200, duration=0)).start()  # fmt: skip
    stopped = load.stop(timeout=30)
    assert stopped.figures.rows == len(stopped.ledger)


def test_a_wrong_password_is_a_typed_error(cluster: DevCluster, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    app = sample_schema.secret_name(cluster.keyspace_name, "app")
    (secrets / app).mkdir(parents=True)
    (secrets / app / "username").write_text(cluster.credentials("app").username)
    (secrets / app / "password").write_text("not-the-password")
    with pytest.raises(LoadgenError, match="connect"):
        run_load(cluster.manifest_path, secrets, tmp_path / "l.jsonl", LoadOptions(duration=1))
