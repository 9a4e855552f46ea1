"""A Keyspace that names a Vitess cluster (`spec.vitess`): what it must say, and how what the
operator reads from Vitess becomes its spec (`updatestream.vitess_topology.resolved_keyspace`).
The operator reading a real Vitess is in tests/vitess/test_operator_follows_vitess.py."""

from __future__ import annotations

from typing import Any

import pytest

from updatestream.spec import SpecError, parse_keyspace
from updatestream.validation import keyspace_problems
from updatestream.vitess_topology import TopologyView, resolved_keyspace

VSCHEMA: dict[str, Any] = {
    "sharded": True,
    "vindexes": {"hash": {"type": "hash"}},
    "tables": {"orders": {"column_vindexes": [{"column": "id", "name": "hash"}]}},
}


def _named(**vitess: Any) -> dict[str, Any]:
    given = {"vtctld": "vtctld.vitess:15999", "credentialsSecret": {"name": "reader"}} | vitess
    return {"metadata": {"name": "commerce"}, "spec": {"vitess": given}}


def _view(serving: tuple[str, ...], ports: dict[str, int]) -> TopologyView:
    primaries = {shard: ("127.0.0.1", port) for shard, port in ports.items()}
    return TopologyView("commerce", serving, primaries, VSCHEMA)


def test_a_keyspace_may_name_a_vitess_cluster_instead_of_its_shards() -> None:
    keyspace = parse_keyspace(_named())
    vitess = keyspace.spec.vitess
    assert vitess is not None
    assert (vitess.vtctld, vitess.cell, vitess.keyspace, vitess.sync_seconds) == (
        "vtctld.vitess:15999", "zone1", None, 5.0,
    )  # fmt: skip
    assert keyspace.spec.awaiting_vitess
    # not ready until the operator read it, saying where it reads from
    (problem,) = keyspace_problems(keyspace)
    assert problem.reason == "VitessNotRead"
    assert "keyspace commerce at vtctld.vitess:15999" in problem.message


def test_without_a_vitess_cluster_the_shards_must_be_declared() -> None:
    with pytest.raises(SpecError) as caught:
        parse_keyspace({"metadata": {"name": "commerce"}, "spec": {"vschema": VSCHEMA}})
    message = str(caught.value)
    assert "shards, servingShards missing" in message
    assert "spec.vitess" in message


@pytest.mark.parametrize("address", ["vtctld", "vtctld:", ":15999", "vtctld:99999", "a b:x"])
def test_a_vtctld_address_that_is_not_host_and_port_is_refused(address: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_keyspace(_named(vtctld=address))
    assert "spec.vitess.vtctld" in str(caught.value)
    assert "host:port" in str(caught.value)


def test_the_first_read_fills_the_spec_without_a_history_entry() -> None:
    keyspace = parse_keyspace(_named(keyspace="commerce"))
    view = _view(("-80", "80-"), {"-80": 17100, "80-": 17200})
    read = resolved_keyspace(keyspace, view, secret="reader", at=100.0)
    spec = read.spec
    assert spec.serving_shards == ["-80", "80-"]
    assert [(s.name, s.flavor, s.mysql.port, s.credentials_secret.name) for s in spec.shards] == [
        ("-80", "mysql", 17100, "reader"),
        ("80-", "mysql", 17200, "reader"),
    ]
    assert spec.vschema == VSCHEMA
    assert spec.shard_map_history == []  # the shards served before the first read as well
    assert spec.vitess == keyspace.spec.vitess
    assert keyspace_problems(read) == []


def test_a_switch_traffic_appends_the_shards_serving_from_then_on() -> None:
    first = resolved_keyspace(
        parse_keyspace(_named()), _view(("-80", "80-"), {"-80": 1, "80-": 2}), secret="reader"
    )
    ports = {"-80": 1, "80-": 2, "-40": 3, "40-80": 4}
    split = resolved_keyspace(
        first, _view(("-40", "40-80", "80-"), ports), secret="reader", at=200.0
    )
    assert split.spec.serving_shards == ["-40", "40-80", "80-"]
    assert [s.name for s in split.spec.shards] == ["-40", "-80", "40-80", "80-"]
    ((at, shards),) = [(e.at, e.shards) for e in split.spec.shard_map_history]
    assert (at, shards) == (200.0, ["-40", "40-80", "80-"])
    # read again, unchanged: nothing appended
    again = resolved_keyspace(split, _view(("-40", "40-80", "80-"), ports), secret="reader")
    assert again.spec == split.spec
