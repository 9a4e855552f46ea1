"""Setting the keyspace up through vtctld: cell, keyspace, primaries, schema, VSchema, accounts.

The sample keyspace's tables and VSchema are the development cluster's own
(`updatestream_cli.devcluster.sample_schema`), applied with `vtctldclient ApplySchema` and
`ApplyVSchema`. Each shard's single tablet becomes its primary with `PlannedReparentShard`,
which v24 accepts on a shard that has no primary yet.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable

import pymysql

from updatestream.spec import Credentials
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.vitess.environment import ClusterEnv
from updatestream_cli.vitess.errors import ProcessStartError, VtctldCommandError
from updatestream_cli.vitess.tablets import Tablet
from updatestream_cli.vitess.topology import cell_root
from updatestream_cli.vitess.vtctldclient import Vtctldclient


def ensure_cell(env: ClusterEnv, vtctl: Vtctldclient) -> None:
    names = vtctl.run("GetCellInfoNames").split()
    if env.cell not in names:
        vtctl.run(
            "AddCellInfo",
            "--root", cell_root(env.cell),
            "--server-address", env.etcd.address,
            env.cell,
        )  # fmt: skip


def ensure_keyspace(env: ClusterEnv, vtctl: Vtctldclient) -> None:
    try:
        vtctl.run("GetKeyspace", env.keyspace)
    except VtctldCommandError:
        vtctl.run("CreateKeyspace", "--durability-policy", "none", env.keyspace)


def primary_alias(vtctl: Vtctldclient, keyspace: str, shard: str) -> str | None:
    """The shard record's primary, `cell-uid`, or None while it has none."""
    data = vtctl.json("GetShard", f"{keyspace}/{shard}")
    alias = (data.get("shard") or {}).get("primary_alias")
    if not alias:
        return None
    return f"{alias['cell']}-{int(alias['uid']):010d}"


def elect_primary(env: ClusterEnv, vtctl: Vtctldclient, tablet: Tablet) -> None:
    """Make `tablet` its shard's primary (PlannedReparentShard), or writable again.

    A primary whose mysqld restarted comes back with `super_read_only` on (Vitess's my.cnf) and
    its vttablet leaves it so; without VTOrc to repair that, `SetWritable` does.
    """
    alias = tablet.alias(env.cell)
    if primary_alias(vtctl, env.keyspace, tablet.shard) == alias:
        vtctl.run("SetWritable", alias, "true")
        return
    vtctl.run(
        "PlannedReparentShard",
        "--new-primary", alias,
        f"{env.keyspace}/{tablet.shard}",
        timeout=180.0,
    )  # fmt: skip


def apply_sample_schema(env: ClusterEnv, vtctl: Vtctldclient) -> None:
    """Create the sample tables (idempotent DDL) and apply the sample VSchema."""
    names = set(vtctl.run("GetSchema", "--table-names-only", _any_primary(vtctl, env)).split())
    missing = [ddl.strip() for table, ddl in sample_schema.TABLE_DDL.items() if table not in names]
    if missing:
        vtctl.run("ApplySchema", "--sql", ";\n".join(missing), env.keyspace, timeout=300.0)
    vtctl.run("ApplyVSchema", "--vschema", json.dumps(sample_schema.VSCHEMA), env.keyspace)


def _any_primary(vtctl: Vtctldclient, env: ClusterEnv) -> str:
    out = vtctl.run("GetTablets", "--keyspace", env.keyspace, "--tablet-type", "primary")
    for line in out.splitlines():
        fields = line.split()
        if fields:
            return fields[0]
    raise VtctldCommandError(
        f"keyspace {env.keyspace} has no primary tablet yet; elect one before applying schema"
    )


def create_account(
    env: ClusterEnv, tablet: Tablet, role: sample_schema.Role, password: str
) -> None:
    """Create (or reset) one of the keyspace's accounts on a tablet's mysqld, for loopback
    clients, with the grants the development cluster gives it on MySQL, around the binlog.

    `sql_log_bin = 0`: a binlog would keep the account's password hash for every reader of it.
    """
    spec = sample_schema.user_specs(env.keyspace, "mysql")[role]
    account = f"'{spec.username}'@'127.0.0.1'"
    with tablet.dba_connect(env) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY %s", (password,))
        cur.execute(f"ALTER USER {account} IDENTIFIED BY %s", (password,))
        for grant in spec.grants:
            cur.execute(grant.format(user=account))


def wait_writable(env: ClusterEnv, tablets: Iterable[Tablet], timeout: float = 120.0) -> None:
    """Wait until each tablet is its shard's primary and its mysqld accepts writes.

    A restarted primary's mysqld starts with `super_read_only` (Vitess's my.cnf) until its
    vttablet has taken the primary role again.
    """
    pending = {t.uid: t for t in tablets}
    deadline = time.monotonic() + timeout
    while pending:
        for uid, tablet in list(pending.items()):
            with contextlib.suppress(pymysql.err.MySQLError, OSError):
                with tablet.dba_connect(env) as conn, conn.cursor() as cur:
                    cur.execute("SELECT @@global.super_read_only, @@global.read_only")
                    row = cur.fetchone()
                if row is not None and int(row[0]) == 0 and int(row[1]) == 0:
                    del pending[uid]
        if pending and time.monotonic() > deadline:
            shards = ", ".join(sorted(t.shard for t in pending.values()))
            raise ProcessStartError(
                f"the primaries of shards {shards} of {env.keyspace} are still read-only after "
                f"{timeout:.0f}s; see the vttablet logs in {env.logs}"
            )
        if pending:
            time.sleep(0.3)


def query_through(host: str, port: int, user: Credentials, sql: str, database: str) -> None:
    """Run one statement through a MySQL-protocol endpoint (vtgate) and discard its rows."""
    conn = pymysql.connect(
        host=host,
        port=port,
        user=user.username,
        password=user.password,
        database=database,
        connect_timeout=5,
        read_timeout=30,
    )
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            cur.fetchall()
    finally:
        conn.close()
