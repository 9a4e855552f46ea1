"""The operator's `resume` start: per shard its token, else its GTID position, else its timestamp
(the timestamp search); a shard with none of them is a typed error naming it. Read-only on the
session dev cluster, through the pure reading layer (no Spark)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_jobs.source.options import parse_options, start_option
from updatestream_jobs.source.planner import BatchPlanner

from updatestream.binlog.errors import SourceOptionsError, StartPositionError
from updatestream.core.token import EventToken
from updatestream.spec import StartPosition


def resolve(cluster: DevCluster, start: StartPosition | str) -> dict[str, EventToken]:
    text = start if isinstance(start, str) else start_option(start)
    config = parse_options(
        {
            "keyspace": str(cluster.manifest_path),
            "secretsDir": str(cluster.secrets_dir),
            "start": text,
        }
    )
    planner = BatchPlanner(config)
    try:
        return planner.resolve(config.start)
    finally:
        planner.close()


def test_resume_takes_token_else_gtid_else_timestamp_per_shard(devcluster: DevCluster) -> None:
    now = resolve(devcluster, "now")
    later = int(time.time()) + 3600
    by_time = resolve(devcluster, str(later))
    by_first_second = resolve(devcluster, "1")
    token: dict[str, Any] = now["-80"].to_json()

    # -80 from its token, 80- by the timestamp search (the same result as a timestamp start).
    mixed = resolve(
        devcluster,
        StartPosition(mode="resume", tokens={"-80": token}, timestamps={"80-": later}),
    )
    assert mixed["-80"] == now["-80"]
    assert mixed["80-"] == by_time["80-"]
    assert mixed["80-"].timestamp == later

    # A token beats a GTID position beats a timestamp for the same shard.
    gtid_80 = str(now["80-"].position)
    layered = resolve(
        devcluster,
        StartPosition(
            mode="resume",
            tokens={"80-": now["80-"].to_json()},
            gtid={"-80": "", "80-": "0-1-1"},
            timestamps={"-80": later, "80-": 1},
        ),
    )
    assert str(now["-80"].position) != ""  # so the timestamp search would land elsewhere
    assert str(layered["-80"].position) == ""  # the GTID form, not the timestamp search
    assert layered["80-"] == now["80-"]
    assert str(layered["80-"].position) == gtid_80
    # The timestamp form alone: the first transaction at or after it (here: everything).
    early = resolve(devcluster, StartPosition(mode="resume", timestamps={"-80": 1, "80-": 1}))
    assert early == by_first_second


def test_resume_without_a_position_for_a_shard_names_it(devcluster: DevCluster) -> None:
    token = resolve(devcluster, "now")["-80"].to_json()
    with pytest.raises(StartPositionError) as missing:
        resolve(devcluster, StartPosition(mode="resume", tokens={"-80": token}))
    assert missing.value.shard == "80-"
    assert "shard 80-" in str(missing.value) and "timestamp" in str(missing.value)
    with pytest.raises(SourceOptionsError, match="resume"):
        start_option(StartPosition(mode="resume"))
    with pytest.raises(SourceOptionsError, match="seconds"):
        parse_options(
            {
                "keyspace": str(devcluster.manifest_path),
                "secretsDir": str(devcluster.secrets_dir),
                "start": json.dumps({"resume": {"timestamps": {"-80": "soon"}}}),
            }
        )
