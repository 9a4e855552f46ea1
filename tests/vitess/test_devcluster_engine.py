"""`updatestream devcluster <command> --engine vitess` runs the real local Vitess cluster's
commands: the session's cluster, through the command line a user types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from updatestream_cli.vitess.cluster import VitessCluster


def _devcluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "updatestream_cli", "devcluster", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_up_is_idempotent_and_status_finds_the_engine_by_its_directory(
    vitess_cluster: VitessCluster,
) -> None:
    where = ("--dir", str(vitess_cluster.dir))
    up = _devcluster("up", "--engine", "vitess", "--flavor", "mysql", *where)
    assert up.returncode == 0, up.stderr
    assert "up in" in up.stderr

    status = _devcluster("status", "--json", *where)  # no --engine: the directory says which
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["vtgate"]["mysql"] == f"127.0.0.1:{vitess_cluster.vtgate.mysql_port}"
    assert report["vtgate"]["running"] is True
    assert sorted(report["serving_shards"]) == ["-80", "80-"]


def test_an_option_of_the_other_engine_is_refused_by_name(vitess_cluster: VitessCluster) -> None:
    where = ("--dir", str(vitess_cluster.dir))
    flavor = _devcluster("up", "--engine", "vitess", "--flavor", "mariadb", *where)
    assert flavor.returncode == 2
    assert "--flavor does not apply to --engine vitess; drop it" in flavor.stderr

    batch = _devcluster(
        "reshard", "--from", "-80", "--to", "-40,40-80", "--copy-batch-size", "10", *where
    )
    assert batch.returncode == 2
    assert "--copy-batch-size does not apply to --engine vitess" in batch.stderr
    assert sorted(vitess_cluster.serving_shards_recorded()) == ["-80", "80-"]


def test_a_command_of_the_development_cluster_alone_refuses_a_vitess_directory(
    vitess_cluster: VitessCluster, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("")
    check = _devcluster("check", "--ledger", str(ledger), "--dir", str(vitess_cluster.dir))
    assert check.returncode == 2
    assert "`devcluster check` works on the development cluster's own shards" in check.stderr
    retire = _devcluster("retire", "--shards", "-80", "--dir", str(vitess_cluster.dir))
    assert retire.returncode == 2
    assert "holds a Vitess cluster" in retire.stderr
    assert sorted(vitess_cluster.serving_shards_recorded()) == ["-80", "80-"]
