"""Table-driven tests of the vindex kinds and their registry."""

from __future__ import annotations

import hashlib
import pickle
import threading
from collections.abc import Mapping
from decimal import Decimal

import pytest
import xxhash
from Crypto.Cipher import DES
from hypothesis import given, settings
from hypothesis import strategies as st

from updatestream.core.errors import UpdateStreamError
from updatestream.core.vindexes import (
    HashVindex,
    LookupStore,
    LookupUniqueVindex,
    Reversible,
    Vindex,
    VindexError,
    VindexRegistry,
    create_vindex,
    functional_types,
    known_types,
    register,
)
from updatestream.core.vindexes.hash import hash_blocks, hash_uint64, unhash_uint64


class DictLookupStore:
    """An in-memory lookup table: a complete LookupStore, not a stand-in for one."""

    def __init__(self) -> None:
        self.rows: dict[object, bytes] = {}

    def lookup(self, value: object) -> bytes | None:
        return self.rows.get(value)

    def create(self, value: object, keyspace_id: bytes) -> None:
        self.rows[value] = keyspace_id


def test_builtin_types_are_registered() -> None:
    assert known_types() == ("binary_md5", "hash", "lookup_unique", "numeric", "xxhash")
    assert functional_types() == ("binary_md5", "hash", "numeric", "xxhash")


@pytest.mark.parametrize(
    ("value", "keyspace_id"),
    [
        (1, "166b40b44aba4bd6"),
        (2, "06e7ea22ce92708f"),
        (3, "4eb190c9a2fa169c"),
        (4, "d2fd8867d50d2dfe"),
        (5, "70bb023c810ca87a"),
        (6, "f098480ac4c4be71"),
        (Decimal("6"), "f098480ac4c4be71"),
        (Decimal("6.000"), "f098480ac4c4be71"),
    ],
)
def test_hash_matches_vitess(value: object, keyspace_id: str) -> None:
    vindex = create_vindex("user_hash", "hash", {})
    mapped = vindex.map(value)
    assert mapped is not None
    assert mapped.hex() == keyspace_id
    assert isinstance(vindex, Reversible)
    assert vindex.reverse_map(mapped) == int(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [0, 1, 255, 2**32, 2**63, 2**64 - 1])
def test_uint64_kinds_round_trip(value: int) -> None:
    for type_name in ("hash", "numeric"):
        vindex = create_vindex("v", type_name)
        mapped = vindex.map(value)
        assert mapped is not None and len(mapped) == 8
        assert isinstance(vindex, Reversible)
        assert vindex.reverse_map(mapped) == value
        # A normalised keyspace id (trailing zeros stripped) reverses to the same value.
        assert vindex.reverse_map(mapped.rstrip(b"\x00")) == value


@pytest.mark.parametrize(
    ("value", "keyspace_id"),
    [(0, "0000000000000000"), (1, "0000000000000001"), (2**64 - 1, "ffffffffffffffff")],
)
def test_numeric_is_big_endian(value: int, keyspace_id: str) -> None:
    mapped = create_vindex("n", "numeric").map(value)
    assert mapped is not None and mapped.hex() == keyspace_id


def test_numeric_keeps_order() -> None:
    vindex = create_vindex("n", "numeric")
    ids = [vindex.map(v) for v in (0, 1, 255, 256, 2**40, 2**64 - 1)]
    assert ids == sorted(ids)  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("type_name", "value", "fragment"),
    [
        ("hash", "12", "not str"),
        ("hash", b"12", "not bytes"),
        ("hash", 1.0, "not float"),
        ("hash", True, "not a boolean"),
        ("hash", -1, "negative"),
        ("hash", 2**64, "above 2**64-1"),
        ("hash", Decimal("1.5"), "fractional"),
        ("hash", Decimal("NaN"), "non-finite"),
        ("numeric", "x", "not str"),
        ("numeric", -5, "negative"),
        ("numeric", 2**64, "above 2**64-1"),
        ("xxhash", 1.5, "not float"),
        ("xxhash", True, "not bool"),
        ("binary_md5", [1], "not list"),
    ],
)
def test_bad_values_name_vindex_and_value(type_name: str, value: object, fragment: str) -> None:
    vindex = create_vindex("my_vdx", type_name)
    with pytest.raises(VindexError) as info:
        vindex.map(value)
    message = str(info.value)
    assert f"vindex 'my_vdx' (type {type_name})" in message
    assert repr(value) in message
    assert fragment in message
    assert isinstance(info.value, UpdateStreamError)


@pytest.mark.parametrize("type_name", ["hash", "numeric", "xxhash", "binary_md5"])
def test_null_has_no_destination(type_name: str) -> None:
    assert create_vindex("v", type_name).map(None) is None


def test_reverse_map_refuses_long_keyspace_ids() -> None:
    vindex = HashVindex("h")
    with pytest.raises(VindexError, match="longer than 8 bytes"):
        vindex.reverse_map(bytes(9))


@pytest.mark.parametrize(
    ("value", "data"),
    [
        ("test1", b"test1"),
        ("ünïcode", "ünïcode".encode()),
        (b"\x00\xff", b"\x00\xff"),
        (bytearray(b"ab"), b"ab"),
        (100, b"100"),
        (Decimal("12.50"), b"12.50"),
        ("", b""),
    ],
)
def test_hashing_kinds_hash_the_value_bytes(value: object, data: bytes) -> None:
    md5 = create_vindex("m", "binary_md5").map(value)
    xx = create_vindex("x", "xxhash").map(value)
    assert md5 == hashlib.md5(data).digest()
    # Vitess stores the XXH64 digest little-endian.
    assert xx == xxhash.xxh64_intdigest(data).to_bytes(8, "little")


def test_known_values() -> None:
    assert create_vindex("m", "binary_md5").map("test1") == bytes.fromhex(
        "5a105e8b9d40e1329780d62ea2265d8a"
    )
    # Vitess's own xxhash vector for the id 1.
    assert create_vindex("x", "xxhash").map(1) == b"\xd4d\x056v\x12\xb4\xb7"
    assert create_vindex("x", "xxhash").map(1) == create_vindex("x", "xxhash").map("1")


@pytest.mark.parametrize(
    ("type_name", "cost", "vindex_class"),
    [("numeric", 0, None), ("hash", 1, HashVindex), ("xxhash", 1, None), ("binary_md5", 1, None)],
)
def test_protocol_attributes(type_name: str, cost: int, vindex_class: type | None) -> None:
    vindex = create_vindex("name_x", type_name)
    assert isinstance(vindex, Vindex)
    assert (vindex.name, vindex.type_name, vindex.cost, vindex.is_unique) == (
        "name_x",
        type_name,
        cost,
        True,
    )
    if vindex_class is not None:
        assert isinstance(vindex, vindex_class)


def test_lookup_unique_reads_and_writes_the_store() -> None:
    store = DictLookupStore()
    assert isinstance(store, LookupStore)
    params = {"table": "user_ks.name_lookup", "from": "name", "to": "keyspace_id"}
    vindex = create_vindex("name_lookup", "lookup_unique", params, lookup_store=store)
    assert isinstance(vindex, LookupUniqueVindex)
    assert (vindex.cost, vindex.is_unique, vindex.type_name) == (10, True, "lookup_unique")
    assert vindex.map("alice") is None
    vindex.create("alice", bytes.fromhex("166b40b44aba4bd6"))
    assert store.rows == {"alice": bytes.fromhex("166b40b44aba4bd6")}
    assert vindex.map("alice") == bytes.fromhex("166b40b44aba4bd6")
    assert vindex.map(None) is None
    with pytest.raises(VindexError, match="cannot record NULL"):
        vindex.create(None, b"\x01")
    store.rows["bob"] = "not bytes"  # type: ignore[assignment]
    with pytest.raises(VindexError, match="must hold keyspace ids"):
        vindex.map("bob")


@pytest.mark.parametrize(
    ("params", "store", "fragment"),
    [
        ({}, True, "missing params table, from, to"),
        ({"table": "t", "from": "a"}, True, "missing params to"),
        ({"table": "t", "from": "a", "to": ""}, True, "missing params to"),
        ({"table": "t", "from": "a", "to": "k"}, False, "needs a lookup store to read table t"),
    ],
)
def test_lookup_unique_validation(params: Mapping[str, str], store: bool, fragment: str) -> None:
    with pytest.raises(VindexError) as info:
        create_vindex(
            "lk", "lookup_unique", params, lookup_store=DictLookupStore() if store else None
        )
    assert "vindex 'lk' (type lookup_unique)" in str(info.value)
    assert fragment in str(info.value)


def test_unknown_type_lists_known_types() -> None:
    with pytest.raises(VindexError) as info:
        create_vindex("v", "hash_autoinc")
    assert str(info.value) == (
        "vindex 'v' (type hash_autoinc): unknown vindex type 'hash_autoinc'; "
        "known types: binary_md5, hash, lookup_unique, numeric, xxhash"
    )


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("", {}, "vindex name must be non-empty"),
        ("v", {"table": 3}, "param 'table' = 3 must be text"),
    ],
)
def test_create_vindex_validates_name_and_params(
    name: str, params: Mapping[str, object], fragment: str
) -> None:
    with pytest.raises(VindexError, match=fragment):
        create_vindex(name, "hash", params)  # type: ignore[arg-type]


def test_register_refuses_duplicates() -> None:
    with pytest.raises(VindexError, match="'hash' is already registered"):
        register("hash", lambda name, params, store: HashVindex(name))
    registry = VindexRegistry()
    registry.register("my_hash", lambda name, params, store: HashVindex(name))
    assert registry.known_types() == ("my_hash",)
    with pytest.raises(VindexError, match="already registered"):
        registry.register("my_hash", lambda name, params, store: HashVindex(name))
    with pytest.raises(VindexError, match="non-empty text"):
        registry.register("", lambda name, params, store: HashVindex(name))
    assert registry.create("x", "my_hash").map(1) == bytes.fromhex("166b40b44aba4bd6")
    assert "my_hash" not in known_types()


@pytest.mark.parametrize("type_name", ["hash", "numeric", "xxhash", "binary_md5"])
def test_functional_vindexes_pickle_for_spark_tasks(type_name: str) -> None:
    vindex = create_vindex("v", type_name)
    restored = pickle.loads(pickle.dumps(vindex))
    assert restored == vindex
    assert restored.map(7) == vindex.map(7)


@settings(max_examples=300)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=1, max_size=20))
def test_hash_is_single_des_with_a_zero_key_one_id_at_a_time_or_in_blocks(
    values: list[int],
) -> None:
    oracle = DES.new(bytes(8), DES.MODE_ECB)  # another library's DES, the definition
    blocks = b"".join(v.to_bytes(8, "big") for v in values)
    assert hash_blocks(blocks) == oracle.encrypt(blocks)
    assert [hash_uint64(v) for v in values] == [
        oracle.encrypt(v.to_bytes(8, "big")) for v in values
    ]
    assert [unhash_uint64(hash_uint64(v)) for v in values] == values


def test_hash_blocks_refuses_a_partial_block_and_hashes_alike_after() -> None:
    with pytest.raises(ValueError, match="whole 8-byte blocks, not 12 bytes"):
        hash_blocks(bytes(12))
    assert hash_uint64(1).hex() == "166b40b44aba4bd6"


def test_each_thread_hashes_with_its_own_cipher() -> None:
    found: dict[int, str] = {}

    def hash_in_thread(value: int) -> None:
        found[value] = hash_uint64(value).hex()

    threads = [threading.Thread(target=hash_in_thread, args=(v,)) for v in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == {1: "166b40b44aba4bd6", 2: "06e7ea22ce92708f"}
