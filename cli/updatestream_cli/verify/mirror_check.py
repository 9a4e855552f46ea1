"""`verify --sink mirror`: the mirror's live rows against the serving shards' rows.

For every table of the keyspace's VSchema, the rows the serving shards hold whose keyspace id
lies in the stream's key range are compared, key by key and column by column, with the rows of
the mirror's ``<prefix><table>_live`` view (tombstones hidden). Values are compared as the
driver reads them from the two servers (the mirror's columns have the source's types). A
table without a mirror table counts as empty there.

Findings: ``missing`` (on a shard, not in the mirror), ``extra`` (in the mirror, on no shard in
the range), ``different`` (both, some column differs; the column is named in the examples).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from updatestream import spec
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema
from updatestream.mysql_connections import connection_arguments
from updatestream_cli.verify.inputs import VerifyInputError

Rows = dict[tuple[Any, ...], dict[str, Any]]


# what `to_json` reports, in this order, before the dropped duplicates by cause
_COUNTS = (
    "tables",
    "source_rows",
    "mirror_rows",
    "missing",
    "extra",
    "different",
    "duplicates_dropped",
)


@dataclass
class MirrorReport:
    tables: int = 0
    source_rows: int = 0
    mirror_rows: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    # what the CLI sets on every report (the job's dropped duplicates) and reads back
    duplicates_dropped: int = 0
    duplicates_dropped_by_cause: dict[str, int] = field(default_factory=dict)
    unexpected: int = 0

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.different == 0

    def to_json(self) -> dict[str, Any]:
        counts = {name: getattr(self, name) for name in _COUNTS}
        by_cause = dict(sorted(self.duplicates_dropped_by_cause.items()))
        return {**counts, "duplicates_dropped_by_cause": by_cause}

    def note(self, finding: str, text: str, limit: int = 5) -> None:
        found = self.examples.setdefault(finding, [])
        if len(found) < limit:
            found.append(text)


@dataclass(frozen=True)
class MirrorTarget:
    endpoint: spec.MySQLEndpoint
    secret: str
    database: str
    prefix: str = ""


def _connect(
    endpoint: spec.MySQLEndpoint, secrets_dir: Path, secret: str, database: str, where: str
) -> Any:
    try:
        settings = connection_arguments(
            endpoint, secrets_dir, spec.SecretRef(name=secret), database=database
        )
        return pymysql.connect(**settings)
    except (pymysql.err.MySQLError, OSError, UpdateStreamError) as exc:
        raise VerifyInputError(
            f"cannot read {where} ({endpoint.host}:{endpoint.port}/{database}, Secret "
            f"{secret!r}): {type(exc).__name__}: {exc.args[-1] if exc.args else exc}"
        ) from None


def _primary_key(cur: Any, database: str, table: str) -> list[str]:
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (database, table),
    )
    return [str(row[0]) for row in cur.fetchall()]


def _select(cur: Any, sql: str) -> Iterator[dict[str, Any]]:
    cur.execute(sql)
    names = [d[0] for d in cur.description]
    for row in cur.fetchall():
        yield dict(zip(names, row, strict=True))


def read_shards(
    keyspace: spec.Keyspace, secrets_dir: Path, database: str, key_range: KeyRange
) -> dict[str, Rows]:
    """Table -> primary key -> row, over the serving shards, within ``key_range``."""
    vschema = VSchema.from_dict(keyspace.spec.vschema, keyspace=keyspace.metadata.name)
    tables: dict[str, Rows] = {table: {} for table in sorted(vschema.tables)}
    for name in keyspace.spec.serving_shards:
        shard = keyspace.spec.shard(name)
        where = f"shard {name}"
        with (
            _connect(shard.mysql, secrets_dir, shard.credentials_secret.name, database, where) as c,
            c.cursor() as cur,
        ):
            for table, rows in tables.items():
                pk = _primary_key(cur, database, table)
                for row in _select(cur, f"SELECT * FROM `{table}`"):
                    if vschema.sharded:
                        kid = vschema.keyspace_id_for(table, row)
                        if kid is None or not key_range.contains(kid):
                            continue
                    rows[tuple(row[c] for c in pk)] = row
    return tables


def read_mirror(target: MirrorTarget, secrets_dir: Path, tables: list[str]) -> dict[str, Rows]:
    """Table -> primary key -> live row of the mirror (tombstones hidden)."""
    found: dict[str, Rows] = {}
    conn = _connect(target.endpoint, secrets_dir, target.secret, target.database, "the mirror")
    with conn, conn.cursor() as cur:
        for table in tables:
            mirror = f"{target.prefix}{table}"
            pk = _primary_key(cur, target.database, mirror)
            if not pk:
                found[table] = {}
                continue
            rows = _select(cur, f"SELECT * FROM `{mirror}_live`")
            found[table] = {tuple(row[c] for c in pk): row for row in rows}
    return found


def compare(source: dict[str, Rows], mirror: dict[str, Rows]) -> MirrorReport:
    report = MirrorReport(tables=len(source))
    for table, rows in source.items():
        copy = mirror.get(table, {})
        report.source_rows += len(rows)
        report.mirror_rows += len(copy)
        for key, row in rows.items():
            held = copy.get(key)
            if held is None:
                report.missing += 1
                report.note("missing", f"{table}:{list(key)}")
                continue
            columns = [c for c in row if c not in held or row[c] != held[c]]
            if columns:
                report.different += 1
                report.note("different", f"{table}:{list(key)} ({', '.join(columns)})")
        for key in copy.keys() - rows.keys():
            report.extra += 1
            report.note("extra", f"{table}:{list(key)}")
    return report


def verify_mirror(
    keyspace: spec.Keyspace,
    target: MirrorTarget,
    secrets_dir: Path,
    key_range: str,
    source_database: str | None = None,
) -> MirrorReport:
    try:
        wanted = KeyRange.parse(key_range)
    except UpdateStreamError as exc:
        raise VerifyInputError(f"--key-range {key_range!r}: {exc}") from None
    database = source_database or keyspace.metadata.name
    source = read_shards(keyspace, secrets_dir, database, wanted)
    mirror = read_mirror(target, secrets_dir, sorted(source))
    return compare(source, mirror)
