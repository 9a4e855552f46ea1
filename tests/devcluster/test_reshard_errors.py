"""Bad reshard requests: each a typed error, and nothing changed."""

from __future__ import annotations

import fcntl
import subprocess
import sys

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.errors import (
    ReshardInProgressError,
    ReshardInputError,
    ShardNotServingError,
)
from updatestream_cli.devcluster.reshard import (
    QuietReporter,
    ReshardOptions,
    ReshardWorkflow,
    plan_reshard,
)


def _snapshot(cluster: DevCluster) -> tuple[bytes, bytes, list[str]]:
    folder = cluster.workflows_dir
    workflows = sorted(p.name for p in folder.glob("*")) if folder.exists() else []
    return cluster.manifest_path.read_bytes(), cluster.state_path.read_bytes(), workflows


@pytest.mark.parametrize(
    ("sources", "targets", "error", "message"),
    [
        ("-80", "-40", ReshardInputError, "do not exactly cover"),
        ("-80", "-40,40-c0", ReshardInputError, "do not exactly cover"),
        ("-80", "-20,40-80", ReshardInputError, "do not exactly cover"),
        ("-80", "-40,20-80", ReshardInputError, "overlap"),
        ("-40", "-20,20-40", ShardNotServingError, "not serving"),
        ("-80", "-80", ReshardInputError, "nothing to reshard"),
        ("-80", "zz-80", ReshardInputError, "not hex"),
    ],
)
def test_bad_input_is_a_typed_error_and_changes_nothing(
    cluster: DevCluster, sources: str, targets: str, error: type[Exception], message: str
) -> None:
    before = _snapshot(cluster)
    with pytest.raises(error, match=message):
        plan = plan_reshard(cluster, sources, targets)
        ReshardWorkflow(cluster, plan).run()
    assert _snapshot(cluster) == before
    assert cluster.shard_names() == ["-80", "80-"]


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_bad_replay_seconds_is_a_typed_error_and_changes_nothing(
    cluster: DevCluster, value: float
) -> None:
    before = _snapshot(cluster)
    with pytest.raises(ReshardInputError, match="--replay-seconds"):
        ReshardOptions(replay_seconds=value)
    options = ReshardOptions()
    options.replay_seconds = value  # set after construction: run() checks again
    with pytest.raises(ReshardInputError, match="--replay-seconds"):
        ReshardWorkflow(cluster, plan_reshard(cluster, "-80", "-40,40-80"), options).run()
    assert _snapshot(cluster) == before
    assert cluster.shard_names() == ["-80", "80-"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--from=-80", "--to=-40"], "error: target shards -40 do not exactly cover"),
        (
            ["--from=-80", "--to=-40,40-80", "--replay-seconds=-5"],
            "error: --replay-seconds is -5.0; give 0",
        ),
    ],
)
def test_cli_reports_bad_input_on_one_line(
    cluster: DevCluster, arguments: list[str], message: str
) -> None:
    before = _snapshot(cluster)
    proc = subprocess.run(
        [sys.executable, "-m", "updatestream_cli", "devcluster", "reshard",
         "--dir", str(cluster.dir), *arguments],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith(message)
    assert len(proc.stderr.strip().splitlines()) == 1
    assert _snapshot(cluster) == before


class _Interrupt(Exception):
    pass


class _StopAtReplicate(QuietReporter):
    def phase(self, name: str, detail: str = "") -> None:
        if name == "replicate":
            raise _Interrupt


def test_second_reshard_of_a_resharding_shard_is_refused(cluster: DevCluster) -> None:
    plan = plan_reshard(cluster, "-80", "-40,40-80")
    with pytest.raises(_Interrupt):
        ReshardWorkflow(cluster, plan, reporter=_StopAtReplicate()).run()
    before = _snapshot(cluster)
    for sources, targets in [("-80", "-20,20-80"), ("-80,80-", "-")]:
        with pytest.raises(ReshardInProgressError, match=r"unfinished workflow x-80\.to"):
            ReshardWorkflow(cluster, plan_reshard(cluster, sources, targets)).run()
    assert _snapshot(cluster) == before
    # The same workflow while another process runs it: refused too.
    lock = cluster.workflows_dir / f"{plan.name}.lock"
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with pytest.raises(ReshardInProgressError, match="running in another process"):
            ReshardWorkflow(cluster, plan_reshard(cluster, "-80", "-40,40-80")).run()
    assert cluster.keyspace().spec.serving_shards == ["-80", "80-"]
