"""The traffic gateway's reader of a shard's record follows the shard to its current mysqld.

A Reshard that merges back into a shard's name (-40,40-80 -> -80) gives that name a new mysqld
on another port, and completing it removes the old one; a reader that kept the first port was
refused for the whole retry window and ended the traffic. Needs no Vitess: one real MySQL 8
server and a manifest rewritten the way a Reshard rewrites it.
"""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest
import yaml
from updatestream_cli import manifests
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.vitess.gateway import _ShardReader

from tests.conftest import MySQLFixture
from updatestream.local_ports import free_port


def _write(manifest: Path, port: int) -> None:
    shard = manifests.shard("-80", "127.0.0.1", port, "reader", flavor="mysql")
    rest = manifests.shard("80-", "127.0.0.1", port, "reader", flavor="mysql")
    manifest.write_text(yaml.safe_dump(manifests.keyspace([shard, rest], sample_schema.VSCHEMA)))


def test_the_reader_opens_the_mysqld_the_manifest_names_now(
    mysql_server: MySQLFixture, tmp_path: Path
) -> None:
    manifest, secrets_dir = tmp_path / "keyspace.yaml", tmp_path / "secrets"
    mysql_server.admin_secret(secrets_dir, "reader")
    gone = free_port()  # the first -80's mysqld, removed when the Reshard completed
    _write(manifest, gone)
    reader = _ShardReader(manifest, secrets_dir, "-80")
    with pytest.raises(pymysql.err.OperationalError):
        reader.query_rows("SELECT @@port")

    _write(manifest, mysql_server.port)  # the merge back's -80
    try:
        assert reader.query_rows("SELECT @@port") == [(mysql_server.port,)]
    finally:
        reader.close()
