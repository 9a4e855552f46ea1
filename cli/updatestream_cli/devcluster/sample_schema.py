"""The sample keyspace: tables, VSchema, `_vt.vreplication`, and the three users per keyspace.

Every shard has the same schema. The tables cover the column types the binlog source must decode
(INT, BIGINT UNSIGNED, DECIMAL, VARCHAR utf8mb4, TEXT, BLOB, DATETIME(6), JSON, ENUM, SET, NULLs)
and the three vindex situations: a BIGINT primary key hashed (`users`), a hashed column that is not
the primary key (`orders.user_id`), and a VARCHAR key with `xxhash` (`events`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from updatestream_cli.devcluster.errors import DevClusterError

DATABASE = "commerce"
VT_DATABASE = "_vt"

Role = Literal["reader", "app", "admin"]
ROLES: tuple[Role, ...] = ("reader", "app", "admin")

TABLE_DDL: dict[str, str] = {
    "users": """
CREATE TABLE IF NOT EXISTS users (
  id BIGINT NOT NULL,
  name VARCHAR(100) CHARACTER SET utf8mb4 NOT NULL,
  email VARCHAR(190) CHARACTER SET utf8mb4 NULL,
  balance DECIMAL(14,2) NOT NULL DEFAULT 0.00,
  visits INT NOT NULL DEFAULT 0,
  status ENUM('active','suspended','closed') NOT NULL DEFAULT 'active',
  flags SET('admin','beta','vip') NULL,
  profile JSON NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    "orders": """
CREATE TABLE IF NOT EXISTS orders (
  order_id BIGINT UNSIGNED NOT NULL,
  user_id BIGINT NOT NULL,
  sku VARCHAR(64) CHARACTER SET utf8mb4 NOT NULL,
  quantity INT NOT NULL,
  price DECIMAL(10,2) NOT NULL,
  note TEXT CHARACTER SET utf8mb4 NULL,
  state ENUM('new','paid','shipped','cancelled') NOT NULL DEFAULT 'new',
  placed_at DATETIME(6) NOT NULL,
  PRIMARY KEY (order_id),
  KEY idx_orders_user_id (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    "events": """
CREATE TABLE IF NOT EXISTS events (
  event_key VARCHAR(64) CHARACTER SET utf8mb4 NOT NULL,
  kind VARCHAR(32) CHARACTER SET utf8mb4 NOT NULL,
  seq BIGINT UNSIGNED NOT NULL,
  payload BLOB NULL,
  attrs JSON NULL,
  tags SET('red','green','blue') NULL,
  occurred_at DATETIME(6) NOT NULL,
  PRIMARY KEY (event_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
}

# Columns in table order (the order of a binlog row image).
COLUMNS: dict[str, tuple[str, ...]] = {
    "users": (
        "id", "name", "email", "balance", "visits", "status", "flags", "profile",
        "created_at", "updated_at",
    ),
    "orders": (
        "order_id", "user_id", "sku", "quantity", "price", "note", "state", "placed_at",
    ),
    "events": ("event_key", "kind", "seq", "payload", "attrs", "tags", "occurred_at"),
}  # fmt: skip
SET_COLUMNS: dict[str, frozenset[str]] = {
    "users": frozenset({"flags"}),
    "orders": frozenset(),
    "events": frozenset({"tags"}),
}

# JSON columns: MySQL keeps them in a binary form (its binlog too), MariaDB as text.
JSON_COLUMNS: dict[str, frozenset[str]] = {
    "users": frozenset({"profile"}),
    "orders": frozenset(),
    "events": frozenset({"attrs"}),
}

# Primary-key columns of each table.
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "users": ("id",),
    "orders": ("order_id",),
    "events": ("event_key",),
}

# One row per (workflow, source shard) on each destination shard of a reshard.
# - source_shard: the canonical name of the source shard (`KeyRange.name`: lower-case hex,
#   like -80 or 40-80), as the change stream reads it for provenance.
# - pos: the source GTID position applied so far (the copy's snapshot, then moved by every
#   replicated transaction).
# - start_pos: the source GTID position after which this destination's binlog holds every source
#   transaction touching its key range, each as a replicated transaction. Written once with the
#   row that marks copy_done (again if the copy is redone), never by replication. It is the
#   snapshot position, or earlier with a replay window (`reshard --replay-seconds`).
VREPLICATION_DDL = """
CREATE TABLE IF NOT EXISTS vreplication (
  id INT NOT NULL,
  workflow VARBINARY(1000) NOT NULL,
  source_shard VARBINARY(255) NOT NULL,
  pos VARBINARY(10000) NOT NULL,
  start_pos VARBINARY(10000) NOT NULL DEFAULT '',
  transaction_timestamp BIGINT NOT NULL DEFAULT 0,
  time_updated BIGINT NOT NULL DEFAULT 0,
  state VARBINARY(100) NOT NULL,
  message VARBINARY(1000) NOT NULL DEFAULT '',
  rows_copied BIGINT NOT NULL DEFAULT 0,
  copy_done TINYINT NOT NULL DEFAULT 0,
  PRIMARY KEY (id)
) ENGINE=InnoDB"""

# Brings a `_vt.vreplication` created by an earlier version up to VREPLICATION_DDL; idempotent.
VREPLICATION_UPGRADES: tuple[str, ...] = (
    "ALTER TABLE `_vt`.`vreplication` ADD COLUMN IF NOT EXISTS "
    "start_pos VARBINARY(10000) NOT NULL DEFAULT '' AFTER pos",
)

VSCHEMA: dict[str, Any] = {
    "sharded": True,
    "vindexes": {
        "hash": {"type": "hash"},
        "xxhash": {"type": "xxhash"},
    },
    "tables": {
        "users": {"column_vindexes": [{"column": "id", "name": "hash"}]},
        "orders": {"column_vindexes": [{"column": "user_id", "name": "hash"}]},
        "events": {"column_vindexes": [{"column": "event_key", "name": "xxhash"}]},
    },
}


@dataclass(frozen=True)
class UserSpec:
    role: Role
    username: str
    grants: tuple[str, ...]


USER_NAME_LIMITS = {"mariadb": 80, "mysql": 32}

# What a change stream's reader needs: the binlog dump, the binlog's files and positions, and
# SELECT (snapshots, the settings check). MariaDB calls the second BINLOG MONITOR, MySQL
# REPLICATION CLIENT.
READER_GRANTS: dict[str, str] = {
    "mariadb": "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO {user}",
    "mysql": "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO {user}",
}


def user_specs(keyspace: str, flavor: str = "mariadb") -> dict[Role, UserSpec]:
    """The three users of a keyspace on servers of `flavor`. Grants use `{user}` for the quoted
    account name.

    The app user gets DML on the keyspace database only: no SUPER, READ_ONLY ADMIN (MariaDB) or
    CONNECTION_ADMIN (MySQL), so `read_only=ON` stops its writes (that is how the workflow
    freezes a source shard).
    """
    longest = USER_NAME_LIMITS[flavor] - len("_reader")
    if len(keyspace) > longest:
        raise DevClusterError(
            f"keyspace name {keyspace!r} is too long for the user names of a {flavor} server "
            f"(at most {USER_NAME_LIMITS[flavor]} characters); use at most {longest} characters"
        )
    return {
        "reader": UserSpec("reader", f"{keyspace}_reader", (READER_GRANTS[flavor],)),
        "app": UserSpec(
            "app",
            f"{keyspace}_app",
            (f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{DATABASE}`.* TO {{user}}",),
        ),
        "admin": UserSpec(
            "admin",
            f"{keyspace}_admin",
            ("GRANT ALL PRIVILEGES ON *.* TO {user} WITH GRANT OPTION",),
        ),
    }


def secret_name(keyspace: str, role: Role) -> str:
    suffix = {"reader": "binlog-reader", "app": "app", "admin": "admin"}[role]
    return f"{keyspace}-{suffix}"


def schema_statements() -> list[str]:
    """DDL that creates the sample schema and `_vt.vreplication` (idempotent)."""
    stmts = [
        f"CREATE DATABASE IF NOT EXISTS `{DATABASE}` CHARACTER SET utf8mb4",
        f"CREATE DATABASE IF NOT EXISTS `{VT_DATABASE}`",
    ]
    stmts += [f"USE `{DATABASE}`", *TABLE_DDL.values()]
    stmts += [f"USE `{VT_DATABASE}`", VREPLICATION_DDL]
    return stmts
