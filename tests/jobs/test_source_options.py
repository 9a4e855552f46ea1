"""The source's options are declared once: the parser, the defaults and the docs table agree."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import updatestream_jobs.source.options as options_module
from updatestream_cli import manifests
from updatestream_cli.devcluster.sample_schema import VSCHEMA
from updatestream_jobs.source.options import (
    OPTIONS,
    SourceConfig,
    docs_with_table,
    options_table,
    parse_options,
)

from updatestream.binlog.errors import SourceOptionsError
from updatestream.core.start import Start

DOCS = Path(__file__).resolve().parents[2] / "docs" / "source.md"


def test_the_docs_table_is_the_declared_one() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert docs_with_table(text) == text, (
        "docs/source.md's options table is stale; regenerate it with "
        "docs_with_table() from updatestream_jobs.source.options"
    )
    assert options_table() in (options_module.__doc__ or "")


def test_every_option_is_one_field_with_a_doc() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names)) and all(o.doc for o in OPTIONS)
    fields = {f.name for f in dataclasses.fields(SourceConfig) if "option" in f.metadata}
    assert len(fields) == len(OPTIONS)


def minimal(manifest: Path, **extra: str) -> dict[str, str]:
    return {"keyspace": str(manifest), "secretsDir": "/secrets", **extra}


@pytest.fixture
def manifest(tmp_path: Path) -> Path:

    path = tmp_path / "keyspace.json"
    shards = [
        manifests.shard(name, "127.0.0.1", port, "replication")
        for name, port in (("-80", 3306), ("80-", 3307))
    ]
    keyspace = manifests.keyspace(shards, VSCHEMA)
    path.write_text(json.dumps(keyspace))
    return path


def test_defaults_come_from_the_declarations(manifest: Path) -> None:
    config = parse_options(minimal(manifest))
    assert config.tail is True and config.start == Start() and config.max_batch_rows == 20000
    assert [s.shard for s in config.shards] == ["-80", "80-"]
    assert config.reader.retry.max_retries == 5
    narrowed = parse_options(minimal(manifest, keyRange="00-40", TAIL="false"))
    assert narrowed.key_range == "-40" and narrowed.tail is False
    assert [s.shard for s in narrowed.shards] == ["-80"]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"maxPartitionBytes": "100"}, "option 'maxPartitionBytes' must be at least 65536"),
        ({"maxBatchBytes": "-1"}, "option 'maxBatchBytes' must be at least 0, got -1"),
        ({"inlineMaxBytes": "1000"}, "option 'inlineMaxBytes' must be at least 65536"),
        ({"arrowBatchRows": "many"}, "option 'arrowBatchRows' must be an integer, got 'many'"),
        ({"tail": "yes"}, "option 'tail' must be true or false, got 'yes'"),
        ({"keyRange": "80-40"}, "option 'keyRange'"),
        ({"start": "soon"}, "option 'start' is 'soon'"),
        ({"end": "earliest"}, "option 'end' must be now"),
        ({"dedup": "{"}, "option 'dedup' is not a dedup filter"),
        ({"secretsDir": ""}, "option 'secretsDir' is required"),
    ],
)
def test_bad_options_name_the_option(manifest: Path, extra: dict[str, str], says: str) -> None:
    with pytest.raises(SourceOptionsError) as raised:
        parse_options(minimal(manifest, **extra))
    assert says in str(raised.value)


def test_the_keyspace_option_is_required() -> None:
    with pytest.raises(SourceOptionsError, match="option 'keyspace' is required"):
        parse_options({"secretsDir": "/secrets"})
