"""Reshards with a replay window: the destination binlogs also cover source transactions committed
before the copy's snapshot, exactly once each, and `start_pos` says from where."""

from __future__ import annotations

import json
import logging
import math
import time

import pymysql
import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.replay import ReplayWindow
from updatestream_cli.devcluster.reshard import (
    QuietReporter,
    ReshardOptions,
    ReshardWorkflow,
    plan_reshard,
)
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.devcluster.verify import check_ledger

from tests.devcluster.binlog_reader import read_transactions
from tests.devcluster.checks import (
    assert_filtered_replication_exact,
    assert_rows_on_their_shard,
    replicated_transactions,
    source_transactions_for,
    vreplication_rows,
)
from tests.devcluster.processes import run_reshard_and_kill
from updatestream.core.gtid import MariaDBGTID, MariaDBPosition

SPLIT = "x-80.to.x-40+40-80"


class _Recorder(QuietReporter):
    def __init__(self) -> None:
        self.windows: list[ReplayWindow] = []

    def replay(self, window: ReplayWindow) -> None:
        self.windows.append(window)


def _replaying(cluster: DevCluster) -> bool:
    """Replication has applied part of the replay window of some destination, not all of it."""
    path = cluster.workflows_dir / f"{SPLIT}.json"
    if not path.exists():
        return False
    state = json.loads(path.read_text())
    if state["phase"] != "replicate":
        return False
    for target, copies in state.get("copy_positions", {}).items():
        try:
            rows = vreplication_rows(cluster, target, SPLIT)
        except pymysql.err.MySQLError:
            continue
        for source, snapshot in copies.items():
            row = rows.get(source)
            if not row or not row["copy_done"] or not row["transaction_timestamp"]:
                continue
            pos = MariaDBPosition.parse(row["pos"])
            if pos != MariaDBPosition.parse(row["start_pos"]) and not pos.contains(
                MariaDBPosition.parse(snapshot)
            ):
                return True
    return False


def _wait_rows(gen: TrafficGenerator, more: int) -> None:
    target = gen.stats.rows + more
    while gen.stats.rows < target and gen.error is None:
        time.sleep(0.05)


def test_replay_window_killed_midway_then_resumed(cluster: DevCluster) -> None:
    ledger = cluster.dir / "ledger.jsonl"
    options = TrafficOptions(rate=0, duration=3.0, seed=31, max_tx_rows=2)
    gen = TrafficGenerator(cluster.manifest_path, cluster.secrets_dir, ledger, options)
    gen.preload(600, batch=200)
    time.sleep(6)  # a quiet gap the window does not reach back to
    burst = time.time()
    gen.run()  # unthrottled: many transactions before the snapshot, inside the window
    gen.options.rate, gen.options.duration, gen.options.max_tx_rows = 200.0, None, 5
    gen.start()
    log = cluster.dir / "reshard.log"
    replay = math.ceil(time.time() - burst) + 3
    try:
        # kill -9 while replication re-applies the window over the copied rows
        args = ["--from=-80", "--to=-40,40-80", f"--replay-seconds={replay}"]
        run_reshard_and_kill(
            cluster, [*args, "--min-replicate-seconds=60"], lambda: _replaying(cluster), log
        )
        reporter = _Recorder()
        plan = plan_reshard(cluster, "-80", "-40,40-80")
        state = ReshardWorkflow(
            cluster, plan, ReshardOptions(replay_seconds=replay), reporter
        ).run()
        assert reporter.windows == []  # the copies were done: resumed from pos, no new window
        _wait_rows(gen, 100)
    finally:
        gen.stop()

    assert cluster.keyspace().spec.serving_shards == ["-40", "40-80", "80-"]
    report = check_ledger(cluster, ledger)
    assert report.ok, report
    assert_rows_on_their_shard(cluster, ["-40", "40-80", "80-"])

    window = state["replay"]["-80"]
    assert window["oldest_time"] is None and window["since"] == window["snapshot_time"] - replay
    assert window["transactions"] > 50
    assert f"replay -80: {window['transactions']} source transactions" in log.read_text()
    start = MariaDBPosition.parse(window["start_pos"])
    snapshot = MariaDBPosition.parse(window["snapshot_pos"])
    assert snapshot.contains(start) and start != snapshot and not start.is_empty()
    # start_pos is just before the first source transaction stamped at or after `since`.
    source = cluster.server("-80")
    history = read_transactions(source.host, source.port or 0, cluster.credentials("reader"))
    before = [tx for tx in history if tx.timestamp < window["since"]]
    first = next(tx for tx in history if tx.timestamp >= window["since"])
    assert history.index(first) == len(before)
    last = MariaDBGTID.parse(before[-1].gtid)
    assert start.domain_seq(last.domain) == last.seq

    for target in ("-40", "40-80"):
        rows = vreplication_rows(cluster, target, SPLIT)
        assert rows["-80"]["start_pos"] == window["start_pos"]
        assert state["copy_positions"][target]["-80"] == window["snapshot_pos"]
        assert state["start_positions"][target]["-80"] == window["start_pos"]
        # Every source transaction after start_pos with rows here, exactly once, in order ...
        assert assert_filtered_replication_exact(cluster, state, target, same_images=True) > 50
        # ... including those of the window, applied with provenance at or before the snapshot.
        in_window = [
            stx.gtid
            for stx, owned in source_transactions_for(cluster, "-80", target, window["start_pos"])
            if owned and snapshot.contains(MariaDBPosition([MariaDBGTID.parse(stx.gtid)]))
        ]
        domain = last.domain
        covered: set[int] = set()  # source sequence numbers the copies' groups cover
        for tx, vrep in replicated_transactions(cluster, target, SPLIT):
            low, high = (
                MariaDBPosition.parse(vrep[key]).domain_seq(domain) or 0
                for key in ("before_pos", "pos")
            )
            if len(tx.rows) > 1:
                covered |= set(range(low + 1, high + 1))
        window_seqs = {MariaDBGTID.parse(gtid).seq for gtid in in_window}
        assert window_seqs <= covered and len(window_seqs) > 10  # replayed over the copied rows


def _purge_binlogs(cluster: DevCluster, shard: str) -> MariaDBPosition:
    """Start a new binlog and purge the older ones; returns the position the binlog now starts
    at. MariaDB keeps a binlog until its crash-recovery checkpoint has passed it (once InnoDB
    flushed), so the purge is retried until it took effect."""
    with cluster.connect(shard, "admin") as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        newest = str(cur.fetchall()[-1][0])
        deadline = time.monotonic() + 30
        while True:
            cur.execute("PURGE BINARY LOGS TO %s", (newest,))
            cur.execute("SHOW BINARY LOGS")
            if str(cur.fetchall()[0][0]) == newest:
                break
            assert time.monotonic() < deadline, f"{shard}: binlogs before {newest} not purged"
            time.sleep(0.2)
        cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (newest,))
        row = cur.fetchone()
    oldest = MariaDBPosition.parse(str(row[0] if row else ""))
    assert not oldest.is_empty()
    return oldest


def test_replay_window_starts_at_the_oldest_binlog_left(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = cluster.dir / "ledger.jsonl"
    options = TrafficOptions(rate=150, seed=32)
    gen = TrafficGenerator(cluster.manifest_path, cluster.secrets_dir, ledger, options)
    gen.adopt_existing_rows()
    gen.start()
    reporter = _Recorder()
    try:
        time.sleep(1.0)
        oldest = _purge_binlogs(cluster, "80-")
        time.sleep(1.0)
        plan = plan_reshard(cluster, "80-", "80-c0,c0-")
        options_ = ReshardOptions(replay_seconds=3600, min_replicate_seconds=1.0)
        with caplog.at_level(logging.WARNING, logger="updatestream_cli.devcluster.replay"):
            state = ReshardWorkflow(cluster, plan, options_, reporter).run()
        _wait_rows(gen, 100)
    finally:
        gen.stop()

    (window,) = reporter.windows
    assert window.truncated and window.oldest_time is not None
    assert window.oldest_time > window.since
    assert MariaDBPosition.parse(window.start_pos) == oldest
    assert "reaches back only to" in caplog.text
    report = check_ledger(cluster, ledger)
    assert report.ok, report
    for target in ("80-c0", "c0-"):
        rows = vreplication_rows(cluster, target, plan.name)
        assert MariaDBPosition.parse(rows["80-"]["start_pos"]) == oldest
        assert assert_filtered_replication_exact(cluster, state, target, same_images=True) > 5
