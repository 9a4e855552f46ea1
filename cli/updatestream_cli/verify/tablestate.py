"""Table state: the rows a sink holds equal the shards' rows in the stream's key range.

After a snapshot there is no ledger of every change a sink received (the rows existed before the
stream began), so `updatestream verify --table-state` compares states instead: the shards'
current rows in the key range (read through the Keyspace manifest; keyspace ids from the
VSchema) against the state the sink holds -- the Version Stream's last version per entity, or
the CDCv2 collection accumulated over every batch -- key by key and, by digest of the row image
with its columns in table order, column by column. Run it once the stream has caught up with
the shards (no traffic, the job's status at the shards' positions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema
from updatestream_cli.devcluster.ledger import RowKey, binlog_image, pk_json, row_digest
from updatestream_cli.verify.compare import Delivered, FinalRow
from updatestream_cli.verify.sinks import shard_rows

_COUNTS = ("shard_rows", "sink_rows", "missing", "extra", "differing", "multiplicity")


@dataclass
class StateReport:
    """What the comparison of a sink's state with the shards' rows found."""

    shard_rows: int = 0
    sink_rows: int = 0
    missing: int = 0  # rows on the shards the sink does not hold
    extra: int = 0  # rows the sink holds that the shards do not (deleted rows kept)
    differing: int = 0  # rows both hold with different column values
    multiplicity: int = 0  # CDCv2 rows whose accumulated multiplicity is not 1
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.differing or self.multiplicity)

    def note(self, finding: str, key: RowKey, limit: int = 5) -> None:
        found = self.examples.setdefault(finding, [])
        if len(found) < limit:
            found.append(f"{key[0]}:{key[1]}")

    def to_json(self) -> dict[str, Any]:
        counts = {name: getattr(self, name) for name in _COUNTS}
        return {**counts, "ok": self.ok, "examples": self.examples}


def shard_state(
    keyspace: spec.Keyspace,
    secrets_dir: Path,
    secret: str,
    database: str,
    tables: Sequence[str],
    key_range: str,
) -> dict[RowKey, str]:
    """Digest per row of `tables` on the serving shards whose keyspace id lies in `key_range`."""
    vschema = VSchema.from_dict(keyspace.spec.vschema, keyspace=keyspace.metadata.name)
    wanted = KeyRange.parse(key_range)
    shards = [s for s in keyspace.spec.serving_shards if KeyRange.parse(s).intersects(wanted)]
    state: dict[RowKey, str] = {}
    for table, row in shard_rows(keyspace, secrets_dir, secret, database, tables, shards):
        image = binlog_image(table, row)
        ksid = vschema.keyspace_id_for(table, image)
        if ksid is not None and wanted.contains(ksid):
            state[(table, pk_json(table, row))] = row_digest(image)
    return state


def versionstream_state(records: Iterable[Delivered]) -> dict[RowKey, str]:
    """The last version of every entity (in version order); deleted entities are absent."""
    last: dict[RowKey, str | None] = {}
    for record in records:
        last[record.key] = record.digest
    return {key: digest for key, digest in last.items() if digest is not None}


def cdcv2_state(rows: Iterable[FinalRow], report: StateReport) -> dict[RowKey, str]:
    """The accumulated CDCv2 collection; a multiplicity other than 1 is a finding."""
    state: dict[RowKey, str] = {}
    for row in rows:
        key = (row.table, row.pk)
        if row.count != 1:
            report.multiplicity += 1
            report.note("multiplicity", key)
        state[key] = row.digest
    return state


def compare_state(
    expected: Mapping[RowKey, str], actual: Mapping[RowKey, str], report: StateReport
) -> StateReport:
    report.shard_rows = len(expected)
    report.sink_rows = len(actual)
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        if got is None:
            report.missing += 1
            report.note("missing", key)
        elif want is None:
            report.extra += 1
            report.note("extra", key)
        elif want != got:
            report.differing += 1
            report.note("differing", key)
    return report
