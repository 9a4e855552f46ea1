"""Bad input: a distinct exit status and a one-line message, JSON on stdout with --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from updatestream_cli.devcluster.ledger import LedgerError, read_ledger
from updatestream_cli.verify.inputs import VerifyInputError, read_duplicates

from tests.verify.streams import verify

LINE = {
    "order": 1, "tx": 1, "table": "users", "pk": '{"id":1}', "op": "insert", "digest": "ab",
    "shard": "-80", "keyspace_id": "16", "gtid": "1-1-1", "commit_time": 1.5,
}  # fmt: skip


def test_missing_ledger(tmp_path: Path) -> None:
    result = verify(
        "--ledger", tmp_path / "nope.jsonl", "--sink", "cdcv2", "--path", tmp_path, "--json"
    )
    assert result.returncode == 2
    assert "nope.jsonl does not exist" in json.loads(result.stdout)["error"]
    assert len(result.stderr.strip().splitlines()) == 1
    human = verify("--ledger", tmp_path / "nope.jsonl", "--sink", "cdcv2", "--path", tmp_path)
    assert human.returncode == 2 and human.stdout == ""
    assert human.stderr.startswith("error: ledger")


def test_unreadable_cdcv2_path(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(json.dumps(LINE) + "\n")
    result = verify("--ledger", ledger, "--sink", "cdcv2", "--path", tmp_path / "none", "--json")
    assert result.returncode == 2
    assert "is not a directory" in json.loads(result.stdout)["error"]
    empty = tmp_path / "empty"
    empty.mkdir()
    result = verify("--ledger", ledger, "--sink", "cdcv2", "--path", empty, "--json")
    assert result.returncode == 2
    assert "holds no batch files" in json.loads(result.stdout)["error"]


def test_missing_options(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(json.dumps(LINE) + "\n")
    result = verify("--ledger", ledger, "--sink", "versionstream", "--json")
    assert result.returncode == 2
    assert "--keyspace-manifest is needed" in json.loads(result.stdout)["error"]


def test_ledger_reading(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(json.dumps(LINE) + "\n\n" + json.dumps({**LINE, "order": 2}) + "\n")
    assert [c.order for c in read_ledger(ledger)] == [1, 2]
    ledger.write_text(json.dumps(LINE) + "\n{not json\n")
    with pytest.raises(LedgerError, match="line 2 is not JSON"):
        read_ledger(ledger)
    ledger.write_text(json.dumps({"order": 1}) + "\n")
    with pytest.raises(LedgerError, match="lacks tx, table"):
        read_ledger(ledger)
    ledger.write_text(json.dumps({**LINE, "op": "delete"}) + "\n")
    with pytest.raises(LedgerError, match="line 1: a delete must not have a digest"):
        read_ledger(ledger)
    ledger.write_text(json.dumps({**LINE, "order": "1"}) + "\n")
    with pytest.raises(LedgerError, match="wrong type in order"):
        read_ledger(ledger)


def test_status_file_reading(tmp_path: Path) -> None:
    assert read_duplicates(None) == (0, {})
    status = tmp_path / "status.json"
    status.write_text('{"duplicates": {"hop": 7, "unknown": 2}}')
    assert read_duplicates(status) == (7, {"hop": 7, "unknown": 2})  # unknown ones delivered
    status.write_text('{"duplicates": {"hop": "x"}}')
    with pytest.raises(VerifyInputError, match=r"status.json: duplicates\.hop"):
        read_duplicates(status)
    status.write_text("{half")
    with pytest.raises(VerifyInputError, match="is not JSON"):
        read_duplicates(status)
    with pytest.raises(VerifyInputError, match="does not exist"):
        read_duplicates(tmp_path / "missing.json")


def test_the_ledger_is_needed_by_every_sink_but_the_mirror(tmp_path: Path) -> None:
    result = verify("--sink", "cdcv2", "--path", tmp_path, "--json")
    assert result.returncode == 2
    assert json.loads(result.stdout)["error"].startswith("--ledger is needed")
    mirror = verify("--sink", "mirror", "--json")  # no ledger asked for: its own options are
    assert mirror.returncode == 2
    assert "--keyspace-manifest is needed for --sink mirror" in json.loads(mirror.stdout)["error"]
