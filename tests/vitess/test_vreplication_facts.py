"""What a real Vitess v24 Reshard writes into the shards' binlogs: the facts the reader relies on.

Once per module, under traffic through vtgate, the session cluster splits `-80` into `-40,40-80`
with a real `vtctldclient Reshard`: copy, catch up, a pause of VReplication over a burst of writes
(so that it falls behind, then applies a backlog), SwitchTraffic, more writes (which reverse
replication copies back into `-80`). The binlogs of `-80`, `-40` and `40-80` are then read with
python-mysql-replication and checked transaction by transaction. The module ends by completing
the workflow and merging back into `-80`, so the session cluster serves `-80,80-` again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.reshard import VitessReshard, plan_reshard

from tests.vitess.binlog_transactions import BinlogTransaction, read_transactions
from tests.vitess.conftest import credentials
from tests.vitess.vreplication_rows import (
    POS,
    VSCHEMA,
    by_gtid,
    covered,
    data_rows,
    gtids,
    in_range,
    is_vreplication,
    marker,
    marker_after,
    signature,
)
from tests.vitess.vtgate_writer import VtgateWriter
from updatestream import spec
from updatestream.binlog.config import ReaderConfig, ShardEndpoint
from updatestream.binlog.copy_starts import scan_copy_starts
from updatestream.binlog.session import ShardSession
from updatestream.core.keyrange import KeyRange

WORKFLOW = "facts_split"
PAUSE_SECONDS = 3.0
WRITES_PER_SECOND = 40
FIRST_ID = 10_000_000  # of the rows the module's writer inserts


@dataclass
class SplitRun:
    binlogs: dict[str, list[BinlogTransaction]]  # shard -> every transaction of its binlog
    uuids: dict[str, str]  # shard -> server_uuid of its primary's mysqld
    runner: VitessReshard
    writer: VtgateWriter
    preloaded: int  # the writer's first ids, inserted before the workflow was created

    def copies(self, shard: str) -> list[BinlogTransaction]:
        """Transactions of a target that replicate source transactions (running phase)."""
        return [
            tx
            for tx in self.binlogs[shard]
            if marker(tx) is not None and data_rows(tx) and marker_after(tx)["state"] == b"Running"
        ]


def _source_text(source: str, target: str) -> bytes:
    return (
        f'keyspace:"commerce" shard:"{source}" filter:{{rules:{{match:"/.*" filter:"{target}"}}}}'
    ).encode()


def _in_source(user_id: int) -> bool:
    ksid = VSCHEMA.keyspace_id_for("users", {"id": user_id})
    return ksid is not None and KeyRange.parse("-80").contains(ksid)


def _uuid(cluster: VitessCluster, shard: str) -> str:
    tablet = cluster.tablet(shard)
    with tablet.dba_connect(cluster.env()) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_uuid")
        return str(cur.fetchone()[0])


def _run_split(cluster: VitessCluster, writer: VtgateWriter) -> VitessReshard:
    plan = plan_reshard(cluster.serving_shards_recorded(), "-80", "-40,40-80", WORKFLOW)
    runner = VitessReshard(cluster, plan, max_lag_seconds=5.0)
    runner.create()
    runner.wait_caught_up()
    # VReplication paused over a burst of writes: it resumes with a backlog, fetched in bulk.
    vtctl = cluster.vtctl()
    vtctl.run("Workflow", "--keyspace", cluster.keyspace, "stop", "--workflow", WORKFLOW)
    writer.burst(700)
    # Nothing newer than the burst until the backlog is applied, so each copy of it covers
    # source transactions at least the pause old (with writes going on, a group could end at one
    # committed just before the start).
    writer.stop()
    time.sleep(PAUSE_SECONDS)
    vtctl.run("Workflow", "--keyspace", cluster.keyspace, "start", "--workflow", WORKFLOW)
    runner.wait_caught_up()
    writer.start(per_second=WRITES_PER_SECOND)
    runner.switch_traffic()
    time.sleep(3.0)  # writes on the new shards, copied back into -80 by reverse replication
    return runner


@pytest.fixture(scope="module")
def split(vitess_cluster: VitessCluster) -> Iterator[SplitRun]:
    cluster = vitess_cluster
    writer = VtgateWriter(
        cluster.vtgate.mysql_port, credentials(cluster, "app"), cluster.keyspace, FIRST_ID
    )
    writer.burst(400)  # rows for the copy phase
    before_copy = len(writer.ids)
    writer.start(per_second=WRITES_PER_SECOND)
    try:
        runner = _run_split(cluster, writer)
    finally:
        writer.stop()
    reader = credentials(cluster, "reader")
    shards = ("-80", "-40", "40-80")
    binlogs = {
        s: read_transactions("127.0.0.1", cluster.tablet(s).mysql_port, reader) for s in shards
    }
    yield SplitRun(binlogs, {s: _uuid(cluster, s) for s in shards}, runner, writer, before_copy)
    writer.close()


def test_copied_transactions_end_with_the_vreplication_update(split: SplitRun) -> None:
    for shard in ("-40", "40-80"):
        copies = split.copies(shard)
        copied_rows = sum(len(data_rows(tx)) for tx in copies)
        assert len(copies) >= 5 and copied_rows >= 100, (shard, len(copies), copied_rows)
        for tx in copies:
            *rows, last = tx.rows
            assert is_vreplication(last) and last.op == "update"
            assert all(r.schema == "commerce" for r in rows), tx.tables()


def test_marker_after_image(split: SplitRun) -> None:
    source_uuid = split.uuids["-80"]
    for shard in ("-40", "40-80"):
        for tx in split.copies(shard):
            after = marker_after(tx)
            match = POS.fullmatch(after["pos"])
            assert match and match.group(1).decode() == source_uuid, after["pos"]
            assert after["source"] == _source_text("-80", shard)
            assert after["workflow"] == WORKFLOW.encode()
            assert after["db_name"] == b"commerce"
            assert isinstance(after["transaction_timestamp"], int)
            assert after["transaction_timestamp"] > 1_600_000_000
            assert after["time_updated"] >= after["transaction_timestamp"]


def test_source_commit_time_is_only_in_transaction_timestamp(split: SplitRun) -> None:
    source = by_gtid(split.binlogs["-80"])
    behind = 0
    for shard in ("-40", "40-80"):
        for tx in split.copies(shard):
            assert not tx.queries, tx.queries  # no SET TIMESTAMP (nor any statement)
            after = marker_after(tx)
            last = max(covered(tx), key=lambda g: g[1])
            # the source time is the last covered source transaction's commit time ...
            assert after["transaction_timestamp"] == source[last].xid_timestamp
            # ... while the copy's own events carry the time it was applied
            assert tx.timestamp >= after["transaction_timestamp"]
            assert min(r.timestamp for r in tx.rows) >= after["transaction_timestamp"]
            behind += tx.timestamp - after["transaction_timestamp"] >= PAUSE_SECONDS - 1
    assert behind > 0, "no copy was applied after the pause; the event times prove nothing"


def test_a_copy_applies_exactly_the_source_transactions_its_pos_moved_over(
    split: SplitRun,
) -> None:
    source = by_gtid(split.binlogs["-80"])
    grouped = 0
    for shard in ("-40", "40-80"):
        for tx in split.copies(shard):
            gained = sorted(covered(tx), key=lambda g: g[1])
            assert gained and {uuid for uuid, _ in gained} == {split.uuids["-80"]}
            expected = [
                signature(row)
                for gtid in gained
                for row in data_rows(source[gtid])
                if in_range(row, shard)
            ]
            assert [signature(r) for r in data_rows(tx)] == expected
            contributing = [
                g for g in gained if any(in_range(r, shard) for r in data_rows(source[g]))
            ]
            grouped += len(contributing) > 1
    assert grouped > 0, "no copy grouped several source transactions"


def test_copy_phase_writes_rows_with_copy_state_and_no_position(split: SplitRun) -> None:
    for shard in ("-40", "40-80"):
        batches = [
            tx
            for tx in split.binlogs[shard]
            if data_rows(tx) and any(r.table == "copy_state" for r in tx.rows)
        ]
        assert batches, f"no copy batch on {shard}"
        for tx in batches:
            assert not any(is_vreplication(r) for r in tx.rows)
            assert {r.op for r in data_rows(tx)} == {"insert"}
            (state,) = [r for r in tx.rows if r.table == "copy_state"]
            assert state.op == "insert" and state.after is not None
            assert state.after["table_name"] in (b"users", b"orders", b"events")
            assert re.fullmatch(rb"fields:\{.*\} rows:\{.*\}", state.after["lastpk"])
        assert all(in_range(r, shard) for tx in batches for r in data_rows(tx))
    copied = {r.after["id"] for s in ("-40", "40-80") for tx in split.binlogs[s]
              if any(r.table == "copy_state" for r in tx.rows)
              for r in data_rows(tx) if r.table == "users" and r.after}  # fmt: skip
    before = {i for i in split.writer.ids[: split.preloaded] if _in_source(i)}
    assert before and before <= copied  # every row of -80 written before the copy


def _gno(gtid: str) -> tuple[str, int]:
    uuid, _, number = gtid.partition(":")
    return uuid, int(number)


def _session(cluster: VitessCluster, shard: str) -> ShardSession:
    keyspace = spec.load_keyspace(cluster.manifest_path)
    declared = {s.name: s for s in keyspace.spec.shards}[shard]
    endpoint = ShardEndpoint(
        cluster.keyspace, shard, "127.0.0.1", cluster.tablet(shard).mysql_port,
        declared.credentials_secret.name, flavor="mysql",
    )  # fmt: skip
    reader = ReaderConfig(cluster.keyspace, "{}", secrets_dir=str(cluster.secrets_dir))
    return ShardSession(endpoint, reader)


def test_the_scan_finds_where_each_target_holds_every_later_source_transaction(
    split: SplitRun, vitess_cluster: VitessCluster
) -> None:
    """`scan_copy_starts` on a target: every source transaction after the position it finds
    that wrote rows of the target's range is in one of the target's copies, and no copy
    repeats one at or before it (the copy phase's rows hold those)."""
    source = by_gtid(split.binlogs["-80"])
    own = {g for g, tx in source.items() if marker(tx) is None}  # not a reverse copy
    for shard in ("-40", "40-80"):
        with _session(vitess_cluster, shard) as session:
            starts = scan_copy_starts(session)
        assert set(starts) == {"-80"}, starts
        start = gtids(str(starts["-80"].source))
        assert start, starts
        # the target's own position there: past every copy-phase batch, before every copy
        target = starts["-80"].target
        phase = [
            tx.gtid for tx in split.binlogs[shard] if any(r.table == "copy_state" for r in tx.rows)
        ]
        assert phase and all(target.contains_gtid(*_gno(g)) for g in phase)
        assert not any(target.contains_gtid(*_gno(tx.gtid)) for tx in split.copies(shard))
        gained = {g for tx in split.copies(shard) for g in covered(tx)}
        wanted = {
            g for g in own - start
            if any(in_range(r, shard) for r in data_rows(source[g]))
        }  # fmt: skip
        assert wanted and wanted <= gained, sorted(wanted - gained)[:5]
        assert not gained & start


def test_reverse_replication_marks_its_copies_into_the_old_shard(split: SplitRun) -> None:
    old = split.binlogs["-80"]
    created = [
        r.after
        for tx in old
        for r in tx.rows
        if is_vreplication(r) and r.op == "insert" and r.after is not None
    ]
    reverse = [a for a in created if a["workflow"] == f"{WORKFLOW}_reverse".encode()]
    assert sorted(a["source"] for a in reverse) == sorted(
        [_source_text("-40", "-80"), _source_text("40-80", "-80")]
    )
    copies = [tx for tx in old if marker(tx) is not None and data_rows(tx)]
    copies = [tx for tx in copies if marker_after(tx)["workflow"] == reverse[0]["workflow"]]
    assert copies, "no reverse copy in -80's binlog"
    new_uuids = {split.uuids["-40"], split.uuids["40-80"]}
    for tx in copies:
        assert {uuid for uuid, _ in covered(tx)} <= new_uuids


def test_switch_writes_a_resharding_journal_into_the_old_shard(split: SplitRun) -> None:
    journals = [
        r.after
        for tx in split.binlogs["-80"]
        for r in tx.rows
        if r.schema == "_vt" and r.table == "resharding_journal" and r.op == "insert"
    ]
    assert len(journals) == 1
    journal = journals[0]
    assert journal is not None and journal["db_name"] == b"commerce"
    text = journal["val"].decode()
    assert f"id:{journal['id']} migration_type:SHARDS" in text
    assert re.search(rf'local_position:"MySQL56/{split.uuids["-80"]}:1-\d+"', text)
    assert 'participants:{keyspace:"commerce" shard:"-80"}' in text
    positions = dict(
        re.findall(r'shard_gtids:\{keyspace:"commerce" shard:"([^"]+)" gtid:"([^"]+)"\}', text)
    )
    assert set(positions) == {"-40", "40-80"}
    reverse_starts = {
        r.after["source"]: r.after["pos"]
        for tx in split.binlogs["-80"]
        for r in tx.rows
        if is_vreplication(r)
        and r.op == "insert"
        and r.after is not None
        and r.after["workflow"] == f"{WORKFLOW}_reverse".encode()
    }
    for shard, position in positions.items():
        assert gtids(position) == gtids(reverse_starts[_source_text(shard, "-80")])


def test_complete_then_merge_back(split: SplitRun, vitess_cluster: VitessCluster) -> None:
    cluster = vitess_cluster
    old = cluster.tablet("-80")
    env = cluster.env()
    split.runner.complete()
    assert not old.vttablet_running(env) and not old.mysqld_running(env)
    assert not old.dir(env).exists()
    assert sorted(t.shard for t in cluster.tablets()) == ["-40", "40-80", "80-"]
    split.writer.start(per_second=40)
    try:
        plan = plan_reshard(cluster.serving_shards_recorded(), "-40,40-80", "-80")
        VitessReshard(cluster, plan).run()
    finally:
        split.writer.stop()
    keyspace = spec.load_keyspace(cluster.manifest_path)
    assert keyspace.spec.serving_shards == ["-80", "80-"]
    assert [e.shards for e in keyspace.spec.shard_map_history][-3:] == [
        ["-80", "80-"],
        ["-40", "40-80", "80-"],
        ["-80", "80-"],
    ]
    assert sorted(t.shard for t in cluster.tablets()) == ["-80", "80-"]
    rows = _count_through_vtgate(cluster)
    assert rows == len(split.writer.ids)


def _count_through_vtgate(cluster: VitessCluster) -> int:
    import pymysql

    app = credentials(cluster, "app")
    conn = pymysql.connect(
        host="127.0.0.1", port=cluster.vtgate.mysql_port, user=app.username,
        password=app.password, database=cluster.keyspace,
    )  # fmt: skip
    try:
        with conn.cursor() as cur:
            cur.execute(  # the writer's ids (the traffic generator's are far above)
                "SELECT COUNT(*) FROM users WHERE id BETWEEN %s AND %s",
                (FIRST_ID, FIRST_ID + 10**6),
            )
            (count,) = cur.fetchone() or (0,)
            return int(count)
    finally:
        conn.close()
