"""build_sinks: one sink per spec of an UpdateStream, named by address, never by credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
from updatestream_jobs.sinks import SinkContext, SinkError, build_sinks
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink
from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.sinks.versionstream_sink import VersionStreamSink

from updatestream import spec


def test_build_sinks_from_an_update_stream(tmp_path: Path) -> None:
    (tmp_path / "vs").mkdir()
    (tmp_path / "vs" / "username").write_text("writer\n")
    (tmp_path / "vs" / "password").write_text("s3cret-pw\n")
    stream = spec.parse_update_stream(
        {
            "metadata": {"name": "feed"},
            "spec": {
                "keyspace": "commerce",
                "sinks": [
                    {
                        "type": "memcached",
                        "servers": ["127.0.0.1:11211", "127.0.0.1:11212"],
                        "keyTemplate": {"users": "user:{id}"},
                        "extraKeys": {"orders": ["orders-of:{user_id}"]},
                    },
                    {
                        "type": "versionStream",
                        "mysql": {"host": "127.0.0.1", "port": 3307},
                        "credentialsSecret": {"name": "vs"},
                        "stream": 3,
                    },
                    {"type": "cdcv2", "path": str(tmp_path / "cdc")},
                ],
            },
        }
    )
    sinks = build_sinks(stream.spec.sinks, SinkContext(keyspace="commerce", secrets_dir=tmp_path))
    assert [type(s) for s in sinks] == [MemcachedSink, VersionStreamSink, CDCv2Sink]
    assert [s.name for s in sinks] == [
        "memcached(127.0.0.1:11211,127.0.0.1:11212)",
        "versionstream(127.0.0.1:3307/updatestream.versionstream stream 3)",
        f"cdcv2({tmp_path / 'cdc'})",
    ]
    memcached = sinks[0]
    assert isinstance(memcached, MemcachedSink)
    assert memcached.templates.key("users", {"id": 5}) == "user:5"
    assert memcached.templates.key("orders", {"order_id": 9}) == "commerce:orders:9"
    assert memcached.templates.extra_keys("orders", {"order_id": 9, "user_id": 4}) == [
        "orders-of:4"
    ]
    assert all("s3cret-pw" not in repr(vars(s)) for s in sinks)


def test_an_unknown_sink_type_names_the_known_ones(tmp_path: Path) -> None:
    class Kafka:
        type = "kafka"

    with pytest.raises(SinkError, match=r"unknown sink type 'kafka'.*known types: memcached, "):
        build_sinks([Kafka()], SinkContext(keyspace="commerce", secrets_dir=tmp_path))
