"""The ``lookup_unique`` vindex: reads the keyspace id of a value from a lookup table.

The table (``params``: ``table``, ``from``, ``to``) is reached through an injected
:class:`~updatestream.core.vindexes.vindex.LookupStore`; the SQL implementation lives outside the
core. A value without a row maps to None (no destination), as in Vitess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from updatestream.core.vindexes.vindex import LookupStore, VindexError, describe

TYPE_NAME = "lookup_unique"
REQUIRED_PARAMS = ("table", "from", "to")


@dataclass(frozen=True)
class LookupUniqueVindex:
    """Keyspace id = the ``to`` column of the ``table`` row whose ``from`` column is the value."""

    name: str
    table: str
    from_columns: tuple[str, ...]
    to_column: str
    store: LookupStore = field(repr=False, compare=False)
    type_name: str = field(default=TYPE_NAME, init=False)
    cost: int = field(default=10, init=False)
    is_unique: bool = field(default=True, init=False)

    def map(self, value: object) -> bytes | None:
        if value is None:
            return None
        found = self.store.lookup(value)
        if found is None or isinstance(found, bytes):
            return found
        raise VindexError(
            f"{describe(self.name, self.type_name)}: lookup table {self.table} returned "
            f"{found!r} for {value!r}; its {self.to_column} column must hold keyspace ids (bytes)"
        )

    def create(self, value: object, keyspace_id: bytes) -> None:
        """Record ``value -> keyspace_id`` in the lookup table."""
        if value is None:
            raise VindexError(
                f"{describe(self.name, self.type_name)} cannot record NULL in lookup table "
                f"{self.table}; give a value"
            )
        self.store.create(value, bytes(keyspace_id))


def create(
    name: str, params: Mapping[str, str], lookup_store: LookupStore | None
) -> LookupUniqueVindex:
    who = describe(name, TYPE_NAME)
    missing = [key for key in REQUIRED_PARAMS if not params.get(key)]
    if missing:
        raise VindexError(
            f"{who} is missing params {', '.join(missing)}; give the lookup table as "
            '"params": {"table": "ks.name_lookup", "from": "name", "to": "keyspace_id"}'
        )
    if lookup_store is None:
        raise VindexError(
            f"{who} needs a lookup store to read table {params['table']}; "
            "pass lookup_store= when building the vindex or VSchema"
        )
    from_columns = tuple(column.strip() for column in params["from"].split(","))
    return LookupUniqueVindex(
        name=name,
        table=params["table"],
        from_columns=from_columns,
        to_column=params["to"],
        store=lookup_store,
    )
