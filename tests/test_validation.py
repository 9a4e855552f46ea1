"""The checks shared by the operator's reconcile, its admission webhook and the job.

The whole corpus runs against the real API server in tests/operator/test_admission.py; here
the places that call the checks: the Keyspace status, a stream's Degraded reasons, and
`updatestream run` refusing to start.
"""

from __future__ import annotations

import copy
import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_operator.reconciler.models import StreamRef
from updatestream_operator.reconciler.spec_checks import keyspace_status, validate

from updatestream.spec import parse_keyspace, parse_update_stream
from updatestream.validation import keyspace_problems, stream_problems

NOW = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
KEYSPACE: dict[str, Any] = {
    "metadata": {"name": "commerce", "namespace": "ns"},
    "spec": {
        "shards": [
            {"name": n, "mysql": {"host": "db"}, "credentialsSecret": {"name": "reader"}}
            for n in ("-80", "80-")
        ],
        "vschema": {
            "sharded": True,
            "vindexes": {"hash": {"type": "md5hash"}},
            "tables": {"orders": {"column_vindexes": [{"column": "id", "name": "hash"}]}},
        },
        "servingShards": ["-80", "80-"],
    },
}
STREAM: dict[str, Any] = {
    "metadata": {"name": "orders"},
    "spec": {"keyspace": "commerce", "tables": ["orders"], "sinks": [{"type": "console"}]},
}


def _keyspace(vindex_type: str = "md5hash") -> dict[str, Any]:
    data = copy.deepcopy(KEYSPACE)
    data["spec"]["vschema"]["vindexes"]["hash"]["type"] = vindex_type
    return data


def test_a_keyspace_whose_vschema_does_not_build_is_not_ready() -> None:
    status = keyspace_status(parse_keyspace(_keyspace()), None, NOW, generation=4)
    (ready,) = status["conditions"]  # type: ignore[misc]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidVSchema")
    assert "spec.vschema: " in ready["message"]
    assert "unknown vindex type 'md5hash'; known types: binary_md5, hash" in ready["message"]
    good = keyspace_status(parse_keyspace(_keyspace("hash")), status, NOW, generation=5)
    (ready,) = good["conditions"]  # type: ignore[misc]
    assert (ready["status"], ready["reason"]) == ("True", "ShardMapValid")


def test_a_stream_on_such_a_keyspace_is_degraded_naming_the_keyspaces_problem() -> None:
    spec = parse_update_stream(STREAM).spec
    ref = StreamRef(namespace="ns", name="orders", uid="u", generation=1)
    (problem,) = validate(ref, spec, parse_keyspace(_keyspace()))
    assert problem.reason == "InvalidVSchema"
    assert problem.message.startswith("Keyspace commerce: spec.vschema: ")


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"keyRanges": ["-80", "40-"]}, "spec.keyRanges", "-80 and 40- overlap"),
        (
            {"sinks": [{"type": "memcached", "servers": ["mc-0:99999"]}]},
            "spec.sinks[0].servers[0]",
            "write it like mc-0:11211",
        ),
        (
            {"start": {"mode": "gtid", "gtid": {"-80": "3e11fa47-71ca-11e1-9e33-c80aa9429562:0"}}},
            "spec.start.gtid[-80]",
            "interval '0' needs 1 <= N <= M",
        ),
        ({"tables": ["orders", "nope"]}, "spec.tables", "tables nope are not in the VSchema"),
    ],
)
def test_stream_problems_name_the_field_and_what_to_write(
    change: dict[str, Any], field: str, words: str
) -> None:
    data = copy.deepcopy(STREAM)
    data["spec"].update(change)
    problems = stream_problems(parse_update_stream(data).spec, parse_keyspace(_keyspace("hash")))
    assert [p.field for p in problems] == [field]
    assert words in problems[0].message


def _memcached(key_template: dict[str, str]) -> dict[str, Any]:
    return {"sinks": [{"type": "memcached", "servers": ["mc:11211"], "keyTemplate": key_template}]}


def test_key_template_columns_are_checked_where_the_vschema_lists_them_authoritatively() -> None:
    """A VSchema table may list its columns (`columns`, `column_list_authoritative`); only
    then can admission tell a column typo. Elsewhere the job checks at its start."""
    keyspace = _keyspace("hash")
    keyspace["spec"]["vschema"]["tables"]["orders"].update(
        {"columns": [{"name": "id"}, {"name": "email"}], "column_list_authoritative": True}
    )
    data = copy.deepcopy(STREAM)
    data["spec"].update(_memcached({"orders": "order:{emial}:{id}"}))
    (problem,) = stream_problems(parse_update_stream(data).spec, parse_keyspace(keyspace))
    assert (problem.field, problem.reason) == ("spec.sinks[0].keyTemplate.orders", "UnknownColumn")
    assert "names 'emial', not a column of table orders" in problem.message
    assert "(columns: email, id)" in problem.message
    data["spec"].update(_memcached({"orders": "order:{email}"}))
    assert stream_problems(parse_update_stream(data).spec, parse_keyspace(keyspace)) == []
    # the same typo with a column list that is not authoritative: left to the job
    keyspace["spec"]["vschema"]["tables"]["orders"]["column_list_authoritative"] = False
    data["spec"].update(_memcached({"orders": "order:{emial}"}))
    assert stream_problems(parse_update_stream(data).spec, parse_keyspace(keyspace)) == []


def test_key_templates_name_tables_the_stream_reads() -> None:
    data = copy.deepcopy(STREAM)
    data["spec"].update(_memcached({"users": "user:{id}"}))
    (problem,) = stream_problems(parse_update_stream(data).spec, parse_keyspace(_keyspace("hash")))
    assert (problem.field, problem.reason) == ("spec.sinks[0].keyTemplate.users", "UnknownTable")
    assert "'users' is not in the VSchema of Keyspace commerce (tables there: orders)" in (
        problem.message
    )


def test_the_unsharded_keyspace_serves_one_shard() -> None:
    data = _keyspace("hash")
    data["spec"]["vschema"]["sharded"] = False
    (problem,) = keyspace_problems(parse_keyspace(data))
    assert (problem.field, problem.reason) == ("spec.servingShards", "InvalidShardMap")


def test_the_job_refuses_to_start_with_what_the_operator_refuses(tmp_path: Path) -> None:
    keyspace, stream = tmp_path / "keyspace.yaml", tmp_path / "stream.yaml"
    keyspace.write_text(yaml.safe_dump(_keyspace()))
    stream.write_text(yaml.safe_dump(STREAM))
    command = [str(Path(sys.executable).parent / "updatestream"), "run", "--stream", str(stream)]
    command += ["--keyspace", str(keyspace), "--secrets-dir", str(tmp_path)]
    command += ["--checkpoint", str(tmp_path / "checkpoint")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"error: invalid Keyspace in {keyspace}: spec.vschema: VSchema of keyspace 'commerce': "
        "vindex 'hash' (type md5hash): unknown vindex type 'md5hash'; known types: "
        "binary_md5, hash, lookup_unique, numeric, xxhash"
    ]
    assert not (tmp_path / "checkpoint").exists()  # nothing started
