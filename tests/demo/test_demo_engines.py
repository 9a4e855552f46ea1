"""`updatestream demo --engine`: the option's checks, before anything starts."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from updatestream_cli.demo.cli import demo
from updatestream_cli.demo.engines import DevKeyspace, VitessKeyspace, demo_keyspace


def test_vitess_shards_are_mysql_only(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        demo, ["--engine", "vitess", "--flavor", "mariadb", "--dir", str(tmp_path / "d")]
    )
    assert result.exit_code == 2
    assert "MySQL 8 only" in result.output and "--sink-flavor mariadb" in result.output
    assert not (tmp_path / "d").exists()  # refused before anything started


def test_each_engine_keeps_its_cluster_in_its_own_folder(tmp_path: Path) -> None:
    dev = demo_keyspace(tmp_path, "devcluster", "mysql")
    vitess = demo_keyspace(tmp_path, "vitess", "mysql")
    assert isinstance(dev, DevKeyspace) and dev.manifest_path.parent == tmp_path / "cluster"
    assert isinstance(vitess, VitessKeyspace)
    assert vitess.manifest_path.parent == tmp_path / "vitess"
    assert not dev.exists() and not vitess.exists()
