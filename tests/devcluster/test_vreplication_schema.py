"""`_vt.vreplication` of an existing datadir gets `start_pos`, once, without a binlog event."""

from __future__ import annotations

from typing import Any

from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.copy import upgrade_vreplication

from tests.conftest import MariaDBFixture, MariaDBServerFactory

START_POS_LINE = "  start_pos VARBINARY(10000) NOT NULL DEFAULT '',\n"


def _columns(fixture: MariaDBFixture, database: str) -> list[tuple[Any, ...]]:
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT column_name, column_type, is_nullable, column_default FROM "
            "information_schema.columns WHERE table_schema = %s AND table_name = 'vreplication' "
            "ORDER BY ordinal_position",
            (database,),
        )
        return list(cur.fetchall())


def test_upgrade_adds_start_pos_from_the_recorded_snapshots(
    mariadb_server_factory: MariaDBServerFactory,
) -> None:
    fixture = mariadb_server_factory.start("vreplication-upgrade")
    old_ddl = sample_schema.VREPLICATION_DDL.replace(START_POS_LINE, "")
    assert old_ddl != sample_schema.VREPLICATION_DDL
    with fixture.connect() as conn, conn.cursor() as cur:
        for database, ddl in (("_vt", old_ddl), ("vt_fresh", sample_schema.VREPLICATION_DDL)):
            cur.execute(f"CREATE DATABASE `{database}`")
            cur.execute(f"USE `{database}`")
            cur.execute(ddl)
        cur.execute(
            "INSERT INTO `_vt`.`vreplication` (id, workflow, source_shard, pos, state, copy_done) "
            "VALUES (101, 'w', '-80', '1-1-9', 'Running', 1), (102, 'w', '80-', '2-2-3', "
            "'Copying', 0), (201, 'other', '-80', '1-1-2', 'Stopped', 1)"
        )
    logged = fixture.server.gtid_position()

    with fixture.connect() as conn:
        upgrade_vreplication(conn, "w", {"-80": "1-1-5", "80-": "2-2-1"})
    assert _columns(fixture, "_vt") == _columns(fixture, "vt_fresh")
    # The finished copy started replication at its snapshot; an unfinished one has no start
    # yet, and rows of other workflows are not this workflow's to fill.
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT id, start_pos FROM `_vt`.`vreplication` ORDER BY id")
        assert [(i, bytes(p).decode()) for i, p in cur.fetchall()] == [
            (101, "1-1-5"),
            (102, ""),
            (201, ""),
        ]

    with fixture.connect() as conn:  # the column exists now: nothing changes
        upgrade_vreplication(conn, "w", {"-80": "1-1-7"})
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT start_pos FROM `_vt`.`vreplication` WHERE id = 101")
        assert cur.fetchone() == (b"1-1-5",)
    assert fixture.server.gtid_position() == logged  # bookkeeping, not in the binlog
