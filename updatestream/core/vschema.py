"""The VSchema of a keyspace, in Vitess JSON: its vindexes and each table's column vindexes.

::

    {"sharded": true,
     "vindexes": {"hash": {"type": "hash"}},
     "tables": {"users": {"column_vindexes": [{"column": "id", "name": "hash"}]}}}

The first column vindex of a table is its primary vindex: it gives every row its keyspace id,
so it must be unique. Keys this module does not interpret (``owner``, a table's ``type`` or
``auto_increment``, top-level options) are kept and written back by :meth:`VSchema.to_dict`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from updatestream.core.errors import UpdateStreamError
from updatestream.core.vindexes import (
    DEFAULT_REGISTRY,
    LookupStore,
    Vindex,
    VindexError,
    VindexRegistry,
)

__all__ = ["ColumnVindex", "VSchema", "VSchemaError"]

# Tables that hold the same rows on every shard and need no primary vindex.
_UNROUTED_TABLE_TYPES = frozenset({"reference", "sequence"})


class VSchemaError(UpdateStreamError):
    """A VSchema that does not validate, or a table/row it cannot route."""


@dataclass(frozen=True)
class ColumnVindex:
    """A vindex bound to a table's column(s)."""

    columns: tuple[str, ...]
    vindex_name: str
    vindex: Vindex

    @property
    def column(self) -> str:
        """The first (usually the only) column."""
        return self.columns[0]


@dataclass(frozen=True)
class _VindexDef:
    type_name: str
    params: Mapping[str, str]
    extra: Mapping[str, object]


@dataclass(frozen=True)
class _TableDef:
    column_keys: tuple[str, ...]  # "column" or "columns", as written, per column vindex
    extra: Mapping[str, object]


def _where(keyspace: str) -> str:
    return f"VSchema of keyspace {keyspace!r}" if keyspace else "VSchema"


def _as_mapping(value: object, what: str, keyspace: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise VSchemaError(
            f"{_where(keyspace)}: {what} must be a JSON object with text keys, got {value!r}"
        )
    return value


class VSchema:
    """The parsed, validated VSchema of one keyspace. Immutable; build with from_dict/from_json."""

    __slots__ = ("_defs", "_extra", "_keyspace", "_sharded", "_tables", "_vindexes")

    def __init__(
        self,
        *,
        keyspace: str,
        sharded: bool,
        vindexes: Mapping[str, Vindex],
        tables: Mapping[str, tuple[ColumnVindex, ...]],
        vindex_defs: Mapping[str, _VindexDef],
        table_defs: Mapping[str, _TableDef],
        extra: Mapping[str, object],
    ) -> None:
        self._keyspace = keyspace
        self._sharded = sharded
        # Plain dicts (picklable, for Spark tasks); the properties hand out read-only views.
        self._vindexes = dict(vindexes)
        self._tables = dict(tables)
        self._defs = (dict(vindex_defs), dict(table_defs))
        self._extra = dict(extra)

    @property
    def keyspace(self) -> str:
        return self._keyspace

    @property
    def sharded(self) -> bool:
        return self._sharded

    @property
    def vindexes(self) -> Mapping[str, Vindex]:
        return MappingProxyType(self._vindexes)

    @property
    def tables(self) -> Mapping[str, tuple[ColumnVindex, ...]]:
        return MappingProxyType(self._tables)

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def from_json(
        cls,
        text: str,
        *,
        keyspace: str = "",
        lookup_store: LookupStore | None = None,
        registry: VindexRegistry | None = None,
    ) -> VSchema:
        """Parse Vitess VSchema JSON text."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as exc:
            raise VSchemaError(f"{_where(keyspace)} is not valid JSON: {exc}") from None
        return cls.from_dict(data, keyspace=keyspace, lookup_store=lookup_store, registry=registry)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, object],
        *,
        keyspace: str = "",
        lookup_store: LookupStore | None = None,
        registry: VindexRegistry | None = None,
    ) -> VSchema:
        """Build and validate a VSchema from its Vitess JSON object."""
        where = _where(keyspace)
        if data is None:
            raise VSchemaError(f"{where} is empty; give a JSON object with 'sharded' and 'tables'")
        top = _as_mapping(data, "the VSchema", keyspace)
        sharded = top.get("sharded", False)
        if not isinstance(sharded, bool):
            raise VSchemaError(f"{where}: 'sharded' must be true or false, got {sharded!r}")
        vindexes, vindex_defs = _build_vindexes(
            top.get("vindexes"), keyspace, lookup_store, registry or DEFAULT_REGISTRY
        )
        tables: dict[str, tuple[ColumnVindex, ...]] = {}
        table_defs: dict[str, _TableDef] = {}
        for table, raw_table in _as_mapping(top.get("tables"), "'tables'", keyspace).items():
            tables[table], table_defs[table] = _build_table(
                table, raw_table, vindexes, sharded, keyspace
            )
        extra = {k: v for k, v in top.items() if k not in ("sharded", "vindexes", "tables")}
        return cls(
            keyspace=keyspace,
            sharded=sharded,
            vindexes=vindexes,
            tables=tables,
            vindex_defs=vindex_defs,
            table_defs=table_defs,
            extra=extra,
        )

    # -- routing ----------------------------------------------------------------------------

    def primary_vindex(self, table: str) -> ColumnVindex:
        """The table's first column vindex, which gives each row its keyspace id."""
        column_vindexes = self._tables.get(table)
        if column_vindexes is None:
            known = ", ".join(sorted(self._tables)) or "none"
            raise VSchemaError(
                f"table {table!r} is not in the {_where(self.keyspace)} (known tables: {known}); "
                "add it under 'tables' with its column_vindexes"
            )
        if not column_vindexes:
            raise VSchemaError(
                f"table {table!r} in the {_where(self.keyspace)} has no primary vindex "
                "(no column_vindexes), so its rows have no keyspace id"
            )
        return column_vindexes[0]

    def keyspace_id_for(self, table: str, row: Mapping[str, object]) -> bytes | None:
        """The keyspace id of ``row`` (column name -> value); None when the value is NULL."""
        primary = self.primary_vindex(table)
        values = tuple(_column_value(table, row, column, primary) for column in primary.columns)
        value: object = values[0] if len(values) == 1 else values
        try:
            return primary.vindex.map(value)
        except VindexError as exc:
            columns = ", ".join(primary.columns)
            raise VindexError(f"table {table!r} column {columns}: {exc}") from None

    # -- writing back -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        """The Vitess JSON object (keys this module does not interpret are kept)."""
        vindex_defs, table_defs = self._defs
        vindexes: dict[str, object] = {}
        for name, vdef in vindex_defs.items():
            entry: dict[str, object] = {"type": vdef.type_name}
            if vdef.params:
                entry["params"] = dict(vdef.params)
            entry.update(vdef.extra)
            vindexes[name] = entry
        tables: dict[str, object] = {}
        for table, column_vindexes in self._tables.items():
            tdef = table_defs[table]
            table_entry: dict[str, object] = dict(tdef.extra)
            if column_vindexes:
                table_entry["column_vindexes"] = [
                    {"columns": list(cv.columns), "name": cv.vindex_name}
                    if key == "columns"
                    else {"column": cv.column, "name": cv.vindex_name}
                    for cv, key in zip(column_vindexes, tdef.column_keys, strict=True)
                ]
            tables[table] = table_entry
        return {"sharded": self.sharded, "vindexes": vindexes, "tables": tables, **self._extra}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VSchema):
            return NotImplemented
        return self.keyspace == other.keyspace and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.keyspace, json.dumps(self.to_dict(), sort_keys=True, default=repr)))

    def __repr__(self) -> str:
        return (
            f"VSchema(keyspace={self.keyspace!r}, sharded={self.sharded}, "
            f"vindexes={sorted(self._vindexes)}, tables={sorted(self._tables)})"
        )


def _build_vindexes(
    raw: object,
    keyspace: str,
    lookup_store: LookupStore | None,
    registry: VindexRegistry,
) -> tuple[dict[str, Vindex], dict[str, _VindexDef]]:
    where = _where(keyspace)
    vindexes: dict[str, Vindex] = {}
    defs: dict[str, _VindexDef] = {}
    for name, raw_def in _as_mapping(raw, "'vindexes'", keyspace).items():
        vdef = _as_mapping(raw_def, f"vindex {name!r}", keyspace)
        type_name = vdef.get("type")
        if not isinstance(type_name, str) or not type_name:
            raise VSchemaError(
                f"{where}: vindex {name!r} has no 'type'; give one of "
                f"{', '.join(registry.known_types())}"
            )
        params = _as_mapping(vdef.get("params"), f"params of vindex {name!r}", keyspace)
        try:
            vindexes[name] = registry.create(name, type_name, params, lookup_store=lookup_store)
        except VindexError as exc:
            raise VSchemaError(f"{where}: {exc}") from None
        extra = {k: v for k, v in vdef.items() if k not in ("type", "params")}
        defs[name] = _VindexDef(type_name=type_name, params=dict(params), extra=extra)
    return vindexes, defs


def _build_table(
    table: str,
    raw_table: object,
    vindexes: Mapping[str, Vindex],
    sharded: bool,
    keyspace: str,
) -> tuple[tuple[ColumnVindex, ...], _TableDef]:
    where = _where(keyspace)
    tdef = _as_mapping(raw_table, f"table {table!r}", keyspace)
    raw_list = tdef.get("column_vindexes") or []
    if not isinstance(raw_list, Sequence) or isinstance(raw_list, str):
        raise VSchemaError(
            f"{where}: table {table!r}: 'column_vindexes' must be a list like "
            '[{"column": "id", "name": "hash"}], got ' + repr(raw_list)
        )
    column_vindexes: list[ColumnVindex] = []
    column_keys: list[str] = []
    for index, raw_cv in enumerate(raw_list):
        cv_where = f"table {table!r} column_vindexes[{index}]"
        entry = _as_mapping(raw_cv, cv_where, keyspace)
        vindex_name = entry.get("name")
        if not isinstance(vindex_name, str) or not vindex_name:
            raise VSchemaError(f"{where}: {cv_where} has no vindex 'name'")
        vindex = vindexes.get(vindex_name)
        if vindex is None:
            known = ", ".join(vindexes) or "none"
            raise VSchemaError(
                f"{where}: {cv_where} uses vindex {vindex_name!r}, which is not defined "
                f"(defined vindexes: {known}); add it under 'vindexes'"
            )
        columns, key = _columns_of(entry, f"{where}: {cv_where}")
        expected = len(getattr(vindex, "from_columns", ("",)))
        if len(columns) != expected:
            raise VSchemaError(
                f"{where}: {cv_where} lists {len(columns)} columns ({', '.join(columns)}) but "
                f"vindex {vindex_name!r} (type {vindex.type_name}) takes {expected}"
            )
        column_vindexes.append(ColumnVindex(columns, vindex_name, vindex))
        column_keys.append(key)
    table_type = tdef.get("type")
    if sharded and not column_vindexes and table_type not in _UNROUTED_TABLE_TYPES:
        raise VSchemaError(
            f"{where}: table {table!r} has no column_vindexes, so it has no primary vindex; "
            'add one like "column_vindexes": [{"column": "id", "name": "hash"}]'
        )
    if column_vindexes and not column_vindexes[0].vindex.is_unique:
        primary = column_vindexes[0]
        raise VSchemaError(
            f"{where}: table {table!r}: primary vindex {primary.vindex_name!r} "
            f"(type {primary.vindex.type_name}) is not unique; list a unique vindex first"
        )
    extra = {k: v for k, v in tdef.items() if k != "column_vindexes"}
    return tuple(column_vindexes), _TableDef(column_keys=tuple(column_keys), extra=extra)


def _columns_of(entry: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], str]:
    # Vitess prints both fields (`vtctldclient GetVSchema`): beside a column, an empty
    # `columns` is an absent one
    if entry.get("column") == "" and "columns" not in entry:
        raise VSchemaError(f"{where}: 'column' must be a column name, got ''")
    has_column = entry.get("column") not in (None, "")
    has_columns = "columns" in entry and not (has_column and entry["columns"] == [])
    if has_column == has_columns:
        raise VSchemaError(f"{where} must give exactly one of 'column' or 'columns'")
    if has_column:
        column = entry["column"]
        if not isinstance(column, str) or not column:
            raise VSchemaError(f"{where}: 'column' must be a column name, got {column!r}")
        return (column,), "column"
    columns = entry["columns"]
    if (
        not isinstance(columns, Sequence)
        or isinstance(columns, str)
        or not columns
        or not all(isinstance(c, str) and c for c in columns)
    ):
        raise VSchemaError(f"{where}: 'columns' must be a non-empty list of names, got {columns!r}")
    return tuple(columns), "columns"


def _column_value(
    table: str, row: Mapping[str, object], column: str, primary: ColumnVindex
) -> object:
    if column in row:
        return row[column]
    # MySQL column names are case-insensitive.
    folded = column.casefold()
    for name, value in row.items():
        if name.casefold() == folded:
            return value
    raise VSchemaError(
        f"row of table {table!r} has no column {column!r}, which primary vindex "
        f"{primary.vindex_name!r} (type {primary.vindex.type_name}) needs; "
        f"the row has {', '.join(row) or 'no columns'} (log full row images: "
        "binlog_row_image=FULL)"
    )
