"""Table-driven tests of VSchema parsing, validation, routing and writing back."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

import pytest

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.vindexes import (
    HashVindex,
    LookupStore,
    VindexError,
    VindexRegistry,
)
from updatestream.core.vschema import ColumnVindex, VSchema, VSchemaError

COMMERCE = {
    "sharded": True,
    "vindexes": {
        "hash": {"type": "hash"},
        "xx": {"type": "xxhash"},
        "md5": {"type": "binary_md5"},
        "num": {"type": "numeric"},
    },
    "tables": {
        "users": {"column_vindexes": [{"column": "id", "name": "hash"}]},
        "orders": {
            "column_vindexes": [
                {"column": "customer_id", "name": "hash"},
                {"column": "sku", "name": "xx"},
            ],
            "auto_increment": {"column": "id", "sequence": "order_seq"},
        },
        "products": {"column_vindexes": [{"columns": ["sku"], "name": "md5"}]},
        "events": {"column_vindexes": [{"column": "seq", "name": "num"}]},
        "countries": {"type": "reference"},
    },
}


class DictLookupStore:
    def __init__(self, rows: Mapping[object, bytes] | None = None) -> None:
        self.rows = dict(rows or {})

    def lookup(self, value: object) -> bytes | None:
        return self.rows.get(value)

    def create(self, value: object, keyspace_id: bytes) -> None:
        self.rows[value] = keyspace_id


def test_parses_vindexes_and_tables() -> None:
    vschema = VSchema.from_dict(COMMERCE, keyspace="commerce")
    assert vschema.sharded is True
    assert vschema.keyspace == "commerce"
    assert list(vschema.vindexes) == ["hash", "xx", "md5", "num"]
    assert vschema.vindexes["xx"].type_name == "xxhash"
    assert set(vschema.tables) == {"users", "orders", "products", "events", "countries"}
    assert vschema.tables["countries"] == ()
    orders = vschema.tables["orders"]
    assert [(cv.columns, cv.vindex_name) for cv in orders] == [
        (("customer_id",), "hash"),
        (("sku",), "xx"),
    ]
    primary = vschema.primary_vindex("orders")
    assert isinstance(primary, ColumnVindex)
    assert primary.column == "customer_id"
    assert primary.vindex is vschema.vindexes["hash"]
    with pytest.raises(AttributeError):
        vschema.sharded = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("table", "row", "keyspace_id"),
    [
        ("users", {"id": 1, "name": "a"}, "166b40b44aba4bd6"),
        ("users", {"ID": 2}, "06e7ea22ce92708f"),
        ("users", {"id": Decimal(3)}, "4eb190c9a2fa169c"),
        ("orders", {"customer_id": 4, "sku": "x"}, "d2fd8867d50d2dfe"),
        ("products", {"sku": "test1"}, "5a105e8b9d40e1329780d62ea2265d8a"),
        ("events", {"seq": 258}, "0000000000000102"),
    ],
)
def test_keyspace_id_for(table: str, row: dict[str, object], keyspace_id: str) -> None:
    vschema = VSchema.from_dict(COMMERCE)
    assert vschema.keyspace_id_for(table, row) == bytes.fromhex(keyspace_id)


def test_keyspace_id_routes_to_a_shard() -> None:
    vschema = VSchema.from_dict(COMMERCE)
    shard_map = ShardMap.parse("-40,40-80,80-c0,c0-")
    kid = vschema.keyspace_id_for("users", {"id": 4})
    assert kid is not None
    assert shard_map.shard_for(kid) == KeyRange.parse("c0-")


def test_null_primary_value_has_no_keyspace_id() -> None:
    assert VSchema.from_dict(COMMERCE).keyspace_id_for("users", {"id": None}) is None


def test_routing_errors() -> None:
    vschema = VSchema.from_dict(COMMERCE, keyspace="commerce")
    with pytest.raises(VSchemaError) as info:
        vschema.primary_vindex("nope")
    assert str(info.value).startswith(
        "table 'nope' is not in the VSchema of keyspace 'commerce' (known tables: countries, "
        "events, orders, products, users)"
    )
    with pytest.raises(VSchemaError, match=r"'countries' .* has no primary vindex"):
        vschema.primary_vindex("countries")
    with pytest.raises(VSchemaError) as info:
        vschema.keyspace_id_for("users", {"name": "a"})
    assert "row of table 'users' has no column 'id'" in str(info.value)
    assert "primary vindex 'hash' (type hash)" in str(info.value)
    with pytest.raises(VindexError) as vinfo:
        vschema.keyspace_id_for("users", {"id": "abc"})
    assert "table 'users' column id: vindex 'hash' (type hash) cannot map 'abc'" in str(vinfo.value)


def _with(path: tuple[str, ...], value: object) -> dict[str, object]:
    data = copy.deepcopy(COMMERCE)
    target: dict[str, object] = data
    for key in path[:-1]:
        target = target[key]  # type: ignore[assignment]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_with(("vindexes", "hash", "type"), "hash_autoinc"), "unknown vindex type 'hash_autoinc'"),
        (_with(("vindexes", "hash", "type"), "hash_autoinc"), "known types: binary_md5, hash"),
        (_with(("vindexes", "hash", "type"), _DELETE), "vindex 'hash' has no 'type'"),
        (
            _with(("tables", "users", "column_vindexes"), [{"column": "id", "name": "h2"}]),
            "uses vindex 'h2', which is not defined (defined vindexes: hash, xx, md5, num)",
        ),
        (
            _with(("tables", "users", "column_vindexes"), []),
            "table 'users' has no column_vindexes, so it has no primary vindex",
        ),
        (
            _with(("tables", "users"), {}),
            "table 'users' has no column_vindexes, so it has no primary vindex",
        ),
        (
            _with(("tables", "users", "column_vindexes"), [{"name": "hash"}]),
            "exactly one of 'column' or 'columns'",
        ),
        (
            _with(
                ("tables", "users", "column_vindexes"),
                [{"column": "id", "columns": ["id"], "name": "hash"}],
            ),
            "exactly one of 'column' or 'columns'",
        ),
        (
            _with(("tables", "users", "column_vindexes"), [{"columns": [], "name": "hash"}]),
            "'columns' must be a non-empty list",
        ),
        (
            _with(
                ("tables", "users", "column_vindexes"), [{"columns": ["a", "b"], "name": "hash"}]
            ),
            "lists 2 columns (a, b) but vindex 'hash' (type hash) takes 1",
        ),
        (
            _with(("tables", "users", "column_vindexes"), [{"column": "id"}]),
            "has no vindex 'name'",
        ),
        (
            _with(("tables", "users", "column_vindexes"), {"column": "id"}),
            "'column_vindexes' must be a list",
        ),
        (_with(("sharded",), "yes"), "'sharded' must be true or false"),
        (_with(("vindexes",), ["hash"]), "'vindexes' must be a JSON object"),
        (_with(("vindexes", "hash", "params"), {"x": 1}), "param 'x' = 1 must be text"),
        (_with(("tables", "users"), "id"), "table 'users' must be a JSON object"),
    ],
)
def test_validation_messages(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(VSchemaError) as info:
        VSchema.from_dict(data, keyspace="commerce")
    assert fragment in str(info.value)
    assert str(info.value).startswith("VSchema of keyspace 'commerce'")
    assert isinstance(info.value, UpdateStreamError)


def test_unsharded_keyspace_needs_no_vindexes() -> None:
    vschema = VSchema.from_dict({"tables": {"lookup": {}, "seq": {"type": "sequence"}}})
    assert vschema.sharded is False
    assert vschema.tables == {"lookup": (), "seq": ()}
    with pytest.raises(VSchemaError, match="no primary vindex"):
        vschema.keyspace_id_for("lookup", {"id": 1})
    assert VSchema.from_dict({}).tables == {}


@dataclass(frozen=True)
class NonUniqueVindex:
    name: str
    type_name: str = field(default="non_unique_test", init=False)
    cost: int = field(default=20, init=False)
    is_unique: bool = field(default=False, init=False)

    def map(self, value: object) -> bytes | None:
        return None


def test_primary_vindex_must_be_unique() -> None:
    registry = VindexRegistry()
    registry.register("hash", lambda name, params, store: HashVindex(name))
    registry.register("non_unique_test", lambda name, params, store: NonUniqueVindex(name))
    data = {
        "sharded": True,
        "vindexes": {"hash": {"type": "hash"}, "nu": {"type": "non_unique_test"}},
        "tables": {
            "ok": {
                "column_vindexes": [{"column": "id", "name": "hash"}, {"column": "x", "name": "nu"}]
            },
            "bad": {"column_vindexes": [{"column": "x", "name": "nu"}]},
        },
    }
    with pytest.raises(VSchemaError) as info:
        VSchema.from_dict(data, registry=registry)
    assert "table 'bad': primary vindex 'nu' (type non_unique_test) is not unique" in str(
        info.value
    )
    del data["tables"]["bad"]  # type: ignore[attr-defined]
    assert VSchema.from_dict(data, registry=registry).primary_vindex("ok").vindex_name == "hash"


LOOKUP_VSCHEMA = {
    "sharded": True,
    "vindexes": {
        "name_lookup": {
            "type": "lookup_unique",
            "params": {"table": "lookup.name_idx", "from": "name", "to": "keyspace_id"},
            "owner": "customers",
        }
    },
    "tables": {"customers": {"column_vindexes": [{"column": "name", "name": "name_lookup"}]}},
}


def test_lookup_vindex_uses_the_injected_store() -> None:
    store = DictLookupStore({"alice": bytes.fromhex("80aa")})
    assert isinstance(store, LookupStore)
    vschema = VSchema.from_dict(LOOKUP_VSCHEMA, lookup_store=store)
    assert vschema.keyspace_id_for("customers", {"name": "alice"}) == bytes.fromhex("80aa")
    assert vschema.keyspace_id_for("customers", {"name": "bob"}) is None
    with pytest.raises(VSchemaError, match="needs a lookup store"):
        VSchema.from_dict(LOOKUP_VSCHEMA)


def test_to_dict_round_trips_and_keeps_unknown_keys() -> None:
    data = copy.deepcopy(COMMERCE)
    data["require_explicit_routing"] = True
    vschema = VSchema.from_dict(data, keyspace="commerce")
    assert vschema.to_dict() == data
    again = VSchema.from_json(json.dumps(vschema.to_dict()), keyspace="commerce")
    assert again == vschema
    assert hash(again) == hash(vschema)
    assert VSchema.from_json(vschema.to_json(), keyspace="commerce") == vschema
    lookup = VSchema.from_dict(LOOKUP_VSCHEMA, lookup_store=DictLookupStore())
    assert lookup.to_dict() == LOOKUP_VSCHEMA
    assert vschema != VSchema.from_dict(data, keyspace="other")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "is not valid JSON"),
        ("null", "is empty"),
        ("[1]", "must be a JSON object"),
    ],
)
def test_from_json_errors(text: str, fragment: str) -> None:
    with pytest.raises(VSchemaError, match=fragment):
        VSchema.from_json(text, keyspace="ks")


def test_pickles_for_spark_tasks() -> None:
    vschema = VSchema.from_dict(COMMERCE, keyspace="commerce")
    restored = pickle.loads(pickle.dumps(vschema))
    assert restored == vschema
    assert restored.keyspace_id_for("users", {"id": 1}) == bytes.fromhex("166b40b44aba4bd6")
    assert restored.tables["countries"] == ()


def test_the_vschema_vtctldclient_prints_builds() -> None:
    """`vtctldclient GetVSchema` prints every field of Vitess's VSchema message: `column` and
    an empty `columns`, empty types and owners, null auto_increment."""
    printed = {
        "sharded": True,
        "vindexes": {"hash": {"type": "hash", "params": {}, "owner": ""}},
        "tables": {
            "users": {
                "type": "",
                "column_vindexes": [{"column": "id", "name": "hash", "columns": []}],
                "auto_increment": None,
                "columns": [],
                "pinned": "",
                "column_list_authoritative": False,
                "source": "",
            }
        },
        "require_explicit_routing": False,
        "foreign_key_mode": 0,
    }
    vschema = VSchema.from_dict(printed, keyspace="commerce")
    assert vschema.primary_vindex("users").columns == ("id",)
    assert vschema.keyspace_id_for("users", {"id": 1}) == bytes.fromhex("166b40b44aba4bd6")
