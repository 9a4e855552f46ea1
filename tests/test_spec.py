"""The Keyspace and UpdateStream spec models: what they accept, and what they say when not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from updatestream.core.keyrange import KeyRange
from updatestream.spec import (
    SecretRef,
    SpecError,
    dump_keyspace,
    load_keyspace,
    parse_keyspace,
    parse_update_stream,
    read_credentials,
)


def manifest(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def keyspace_doc(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "shards": [
            {
                "name": "-80",
                "mysql": {"host": "127.0.0.1", "port": 33061},
                "credentialsSecret": {"name": "reader"},
            },
            {
                "name": "80-",
                "mysql": {"host": "127.0.0.1", "port": 33062},
                "credentialsSecret": {"name": "reader"},
            },
        ],
        "vschema": {"sharded": True, "vindexes": {}, "tables": {}},
        "servingShards": ["-80", "80-"],
    }
    return manifest("Keyspace", "commerce", {**spec, **spec_overrides})


def stream_doc(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"keyspace": "commerce", "sinks": [{"type": "cdcv2", "path": "/x"}]}
    return manifest("UpdateStream", "s1", {**spec, **spec_overrides})


def test_keyspace_round_trips_through_yaml(tmp_path: Path) -> None:
    keyspace = parse_keyspace(keyspace_doc())
    path = tmp_path / "keyspace.yaml"
    path.write_text(dump_keyspace(keyspace))
    again = load_keyspace(path)
    assert again == keyspace
    assert again.spec.shard("80-").mysql.port == 33062
    assert "credentialsSecret" in path.read_text()


@pytest.mark.parametrize(
    ("spelling", "canonical"), [("0000-8000", "-80"), ("00-80", "-80"), ("8000-", "80-")]
)
def test_equivalent_shard_names_are_refused_with_the_canonical_one(
    spelling: str, canonical: str
) -> None:
    doc = keyspace_doc()
    doc["spec"]["shards"][0]["name"] = spelling
    with pytest.raises(SpecError, match=r"spec\.shards\.0\.name") as err:
        parse_keyspace(doc)
    assert f"write {spelling} as {canonical}" in str(err.value)


def test_key_ranges_are_values_written_back_as_their_canonical_names() -> None:
    stream = parse_update_stream(stream_doc(keyRanges=["-80", "80-"]))
    assert stream.spec.key_ranges == [KeyRange.parse("-80"), KeyRange.parse("80-")]
    assert stream.model_dump(mode="json", by_alias=True)["spec"]["keyRanges"] == ["-80", "80-"]
    with pytest.raises(SpecError, match=r"spec\.keyRanges\.0: .*write 0000-8000 as -80"):
        parse_update_stream(stream_doc(keyRanges=["0000-8000"]))
    with pytest.raises(SpecError, match=r"spec\.keyRanges\.0: .*must be a key range"):
        parse_update_stream(stream_doc(keyRanges=[80]))


def test_bad_shard_name_names_the_field() -> None:
    doc = keyspace_doc()
    doc["spec"]["shards"][1]["name"] = "80-zz"
    with pytest.raises(SpecError, match=r"spec\.shards\.1\.name") as err:
        parse_keyspace(doc, source="keyspace.yaml")
    assert "keyspace.yaml" in str(err.value)


def test_inline_password_is_refused() -> None:
    doc = keyspace_doc()
    doc["spec"]["shards"][0]["password"] = "hunter2"
    with pytest.raises(SpecError, match=r"spec\.shards\.0\.password") as err:
        parse_keyspace(doc)
    assert "hunter2" not in str(err.value)


def test_unknown_shard_lookup_lists_the_declared_ones() -> None:
    keyspace = parse_keyspace(keyspace_doc())
    with pytest.raises(SpecError, match=r"'40-80' is not declared .*-80, 80-"):
        keyspace.spec.shard("40-80")


def test_update_stream_defaults() -> None:
    stream = parse_update_stream(stream_doc())
    assert stream.spec.key_ranges == [KeyRange.parse("-")]
    assert stream.spec.start.mode == "now"
    assert stream.spec.suspend is False


def test_update_stream_sink_type_is_checked() -> None:
    with pytest.raises(SpecError, match=r"spec\.sinks\.0"):
        parse_update_stream(stream_doc(sinks=[{"type": "kafka"}]))


def test_the_removed_spark_operator_launcher_is_refused_saying_what_to_use() -> None:
    with pytest.raises(SpecError) as err:
        parse_update_stream(stream_doc(spark={"launcher": "spark-operator"}))
    message = str(err.value)
    assert "spec.spark.launcher: the spark-operator launcher was removed" in message
    assert "use spark-submit" in message
    assert parse_update_stream(stream_doc(spark={"launcher": "spark-submit"})).spec.spark.launcher


def test_an_unknown_launcher_lists_the_supported_ones() -> None:
    with pytest.raises(SpecError, match=r"spec\.spark\.launcher: .*'spark-submit' or 'local'"):
        parse_update_stream(stream_doc(spark={"launcher": "yarn"}))


def test_update_stream_memcached_sink_needs_servers() -> None:
    with pytest.raises(SpecError, match=r"servers"):
        parse_update_stream(stream_doc(sinks=[{"type": "memcached", "servers": []}]))


def test_credentials_are_read_from_mounted_secret_files(tmp_path: Path) -> None:
    (tmp_path / "reader").mkdir()
    (tmp_path / "reader" / "username").write_text("reader\n")
    (tmp_path / "reader" / "password").write_text("s3cret-value")
    creds = read_credentials(tmp_path, SecretRef(name="reader"))
    assert (creds.username, creds.password) == ("reader", "s3cret-value")
    assert "s3cret-value" not in str(creds)
    assert "s3cret-value" not in repr(creds)


def test_missing_secret_key_says_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "reader").mkdir()
    (tmp_path / "reader" / "username").write_text("reader")
    with pytest.raises(SpecError, match=r"Secret 'reader' has no readable key 'password'"):
        read_credentials(tmp_path, SecretRef(name="reader"))
