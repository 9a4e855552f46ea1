"""The peers benchmark's bookkeeping: the Debezium harness's lines, catch-up rates, lags joined
with a ledger, per-batch phases and medians (no Debezium, no server)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from updatestream_cli.devcluster.ledger import LedgerEntry
from updatestream_jobs.job import BatchPhases

from bench.debezium_peer import debezium_properties, harness_command
from bench.lagtools import BatchRecord, event_lags, summarize
from bench.peers_bench import bench_lag_half_rate
from bench.peers_lag import flat
from bench.peertools import (
    catch_up,
    driver_phases,
    medians,
    parse_lines,
    ratio,
    received_at,
    sink_phases,
)

CATCH_UP = [
    '{"type":"jvm","jvm_start":1000.0,"main":1000.5}',
    "[main] WARN some log line that went to standard output",
    '{"type":"started","t":1001.0}',
    '{"type":"done","count":200000,"batches":98,"first":1002.0,"last":1006.0}',
    '{"type":"stopped","t":1006.5,"count":200000}',
]


def change(t: float, gtid: str | None, op: str = "c") -> str:
    return json.dumps(
        {
            "type": "change",
            "t": t,
            "op": op,
            "table": "users",
            "gtid": gtid,
            "file": "mariadb-bin.000001",
            "pos": 4,
            "row": 0,
            "ts_ms": 1,
        }
    )


def entry(gtid: str, commit_time: float, order: int = 1) -> LedgerEntry:
    return LedgerEntry(order, order, "users", '{"id": 1}', "insert", "d", "-", "00", gtid,
                       commit_time)  # fmt: skip


def test_catch_up_rates_from_first_to_last_and_counting_the_starts() -> None:
    out = parse_lines(CATCH_UP)
    assert out.started_at == 1001.0 and out.stopped == {"type": "stopped", "t": 1006.5,
                                                        "count": 200000}  # fmt: skip
    assert out.other == ["[main] WARN some log line that went to standard output"]
    rates = catch_up(out, 200_000)
    assert rates.first_to_last_rows_per_s == pytest.approx(50_000)
    assert rates.with_engine_start_rows_per_s == pytest.approx(200_000 / 5.5)
    assert rates.with_jvm_start_rows_per_s == pytest.approx(200_000 / 6.0)
    assert rates.engine_start_s == pytest.approx(1.5)


def test_catch_up_refuses_a_wrong_count_an_error_or_no_end() -> None:
    with pytest.raises(ValueError, match="counted 200000 row changes, expected 5"):
        catch_up(parse_lines(CATCH_UP), 5)
    failed = [*CATCH_UP[:1], '{"type":"error","message":"Unable to connect","error":null}']
    with pytest.raises(ValueError, match="Debezium failed: Unable to connect"):
        catch_up(parse_lines(failed), 200_000)
    with pytest.raises(ValueError, match="did not finish"):
        catch_up(parse_lines(CATCH_UP[:3]), 200_000)


def test_lag_is_first_receive_minus_commit_per_ledger_row() -> None:
    out = parse_lines(
        [
            change(10.30, "1-1-7"),
            change(10.40, "1-1-7", "u"),
            change(10.9, "1-1-8"),
            change(11.0, None),
        ]
    )
    assert received_at(out, "-") == {("-", "1-1-7"): 10.30, ("-", "1-1-8"): 10.9}
    ledger = [entry("1-1-7", 10.0), entry("1-1-8", 10.5, 2), entry("1-1-9", 10.6, 3)]
    lags, missing = event_lags(ledger, received_at(out, "-"))
    assert lags == pytest.approx([0.3, 0.4]) and missing == 1
    assert summarize(lags, missing).max_s == pytest.approx(0.4)


def test_medians_skip_missing_values_and_ratio_guards() -> None:
    rounds = [{"a": 1.0, "b": None}, {"a": 3.0, "b": 2.0}, {"a": 2.0}]
    assert medians(rounds) == {"a": 2.0, "b": 2.0}
    assert medians([{"c": None}]) == {"c": None}
    assert ratio(30_000, 20_000) == 1.5
    assert ratio(None, 1.0) is None and ratio(1.0, 0) is None


def record(batch_id: int, started: float, read: float, done: float, rows: int) -> BatchRecord:
    return BatchRecord(batch_id, started, read, done, Counter({("-", f"1-1-{batch_id}"): rows}), {})


def test_sink_phases_in_the_window_per_sink() -> None:
    console = [record(0, 5.0, 5.1, 5.2, 9), record(1, 10.0, 10.01, 10.02, 100),
               record(2, 10.5, 10.52, 10.54, 200)]  # fmt: skip
    vs = [record(0, 5.2, 5.2, 5.3, 9), record(1, 10.02, 10.02, 10.1, 100),
          record(2, 10.54, 10.54, 10.64, 200)]  # fmt: skip
    got = sink_phases({"console": console, "versionstream": vs}, 10.0, 11.0)
    assert got["batches_per_s"] == 2.0
    assert got["median_batch_rows"] == 150.0
    assert got["median_batch_s"] == pytest.approx(0.12)
    assert got["sinks"]["console"] == {"take_s": pytest.approx(0.015), "write_s": 0.015}
    assert got["sinks"]["versionstream"]["write_s"] == pytest.approx(0.09)
    assert sink_phases({}, 0, 1) == {}


def test_driver_phases_name_sinks_in_order() -> None:
    def phases(batch_id: int, started: float, read: float) -> BatchPhases:
        sinks = {"console(/x)": 0.01, "versionstream(db)": 0.05 + read}
        return BatchPhases(batch_id, started, read, sinks, 0.002, read + 0.07)

    got = driver_phases([phases(0, 1.0, 9.0), phases(1, 10.0, 0.2), phases(2, 10.5, 0.4)],
                        ["console", "versionstream"], 10.0, 11.0)  # fmt: skip
    assert got == {"read_s": 0.3, "finish_s": 0.002, "total_s": 0.37,
                   "console_write_s": 0.01, "versionstream_write_s": 0.35}  # fmt: skip
    assert driver_phases([], ["console"], 0, 1) == {}


def test_harness_command_and_properties() -> None:
    props = debezium_properties(3306, "dbz", "pw", "commerce", 5401, "no_data", 10)
    assert props["connector.class"] == "io.debezium.connector.mariadb.MariaDbConnector"
    on_mysql = debezium_properties(3306, "dbz", "pw", "commerce", 5401, "no_data", flavor="mysql")
    assert on_mysql["connector.class"] == "io.debezium.connector.mysql.MySqlConnector"
    assert "connector.adapter" not in props and "connector.adapter" not in on_mysql
    assert props["poll.interval.ms"] == "10"
    assert "poll.interval.ms" not in debezium_properties(1, "u", "p", "d", 1, "never")
    command = harness_command(Path("/cache/dbz"), props, 200_000)
    assert command[:2] == ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
    assert command[3] == "/cache/dbz/debezium-peer.jar:/cache/dbz/lib/*"
    assert command[5:7] == ["--expect", "200000"]
    assert "snapshot.mode=no_data" in command
    assert "--expect" not in harness_command(Path("/d"), props, None)


def test_bench_lag_half_rate_and_flat(tmp_path: Path) -> None:
    path = tmp_path / "lag.json"
    assert bench_lag_half_rate(path) is None
    path.write_text(json.dumps({"loads": {"50%": {"runs": [{"requested_rows_per_s": 818}]}}}))
    assert bench_lag_half_rate(path) == 818
    assert flat({"a": 1, "b": {"c": 2.0, "d": {"e": None}}}) == {"a": 1, "b.c": 2.0, "b.d.e": None}
