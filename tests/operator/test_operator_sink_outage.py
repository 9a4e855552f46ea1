"""End to end through the operator: a sink server down under traffic, then back.

Real components: a kube-apiserver on etcd with the CRDs, the operator under kopf's KopfRunner
with the local launcher (an `updatestream run` process, Spark in local mode), a development
cluster of two mariadbd shards under traffic with a ledger, and an UpdateStream into a Version
Stream (spec.sinks[0]) and a mirror (spec.sinks[1]) on a MariaDB server of their own, and CDCv2
files. That server is stopped by its pid and started again on the same port and data
directory after OUTAGE_SECONDS. Meanwhile the stream is `Degraded=True`, reason
`SinkUnavailable`, its message naming the Version Stream sink and its address, with a Warning
Event; the job is neither ended nor relaunched. Once the server is back the stream is Ready
again by itself (a Normal Event `SinkAvailable`), and `updatestream verify` finds nothing lost
and no duplicate delivered, the mirror equal to the shards.

The outage lasts 25 s rather than a minute: the job waits the same way at any length below its
15 minute limit, and its pause between attempts has reached its 15 s cap within 25 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.verify.mirror_check import MirrorTarget, verify_mirror

from harness.kube import KubeApi
from harness.operator import (
    StreamWatch,
    apply,
    condition_of,
    kopf_operator,
    prepare_operator,
    wait_for,
)
from harness.stream_job import read_status
from harness.verify_command import verify_sink
from tests.conftest import MariaDBFixture, MariaDBServerFactory
from tests.jobs.test_sink_outage import named_sink
from tests.operator.test_operator_e2e import operator_secrets
from updatestream import spec

NS = "us-outage"
STREAM = "orders-outage"
SINK_SECRET = "outage-sinks"
VS_DATABASE = "us_outage_operator_vs"
MIRROR_DATABASE = "us_outage_operator_mirror"
OUTAGE_SECONDS = 25.0
SHARDS = ["-80", "80-"]


@dataclass
class Outage:
    api: KubeApi
    cluster: DevCluster
    sinks: MariaDBFixture
    workdir: Path
    state_dir: Path
    secrets_dir: Path

    @property
    def streams(self) -> StreamWatch:
        return StreamWatch(self.api, NS)

    def status(self) -> dict[str, Any]:
        return self.streams.status(STREAM)

    def status_file(self) -> Path:
        (job,) = [d for d in (self.state_dir / NS).iterdir() if d.is_dir()]
        return job / "launch-1" / "status.json"

    def verify(self, ledger: Path) -> dict[str, dict[str, Any]]:
        vs = ["--mysql", f"{self.sinks.host}:{self.sinks.port}", "--secret", SINK_SECRET,
              "--secrets-dir", str(self.secrets_dir), "--database", VS_DATABASE]  # fmt: skip
        return {
            name: verify_sink(ledger, name, *extra, "--status-file", str(self.status_file()))
            for name, extra in {"versionstream": vs, "cdcv2": ["--path", str(self.cdc)]}.items()
        }

    @property
    def cdc(self) -> Path:
        return self.workdir / "cdc"


@pytest.fixture
def outage(
    kube_api: KubeApi,
    mariadb_server_factory: MariaDBServerFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Outage]:
    workdir = tmp_path_factory.mktemp("outage-e2e")
    sinks = mariadb_server_factory.start("operator-outage-sinks")
    try:
        with DevCluster(workdir / "cluster").running("-80,80-") as cluster:
            w = Outage(kube_api, cluster, sinks, workdir, workdir / "state", workdir / "secrets")
            kubeconfig = prepare_operator(kube_api, workdir, NS)
            operator_secrets(kube_api, NS, cluster, sinks, SINK_SECRET, w.secrets_dir)
            with kopf_operator(kube_api, NS, kubeconfig, verbose=False, state_dir=w.state_dir):
                yield w
    finally:
        sinks.server.stop()


def stream_manifest(w: Outage) -> dict[str, Any]:
    start = {s: w.cluster.server(s).gtid_position() for s in SHARDS}
    sinks = [
        manifests.database_sink(
            "versionStream", w.sinks.host, w.sinks.port, VS_DATABASE, SINK_SECRET
        ),
        manifests.database_sink("mirror", w.sinks.host, w.sinks.port, MIRROR_DATABASE, SINK_SECRET),
        {"type": "cdcv2", "path": str(w.cdc), "allowedLatenessSeconds": 1},
    ]
    return manifests.update_stream(STREAM, "commerce", {"mode": "gtid", "gtid": start}, sinks)


def test_a_sink_server_down_degrades_the_stream_which_recovers_by_itself(outage: Outage) -> None:
    w = outage
    address = f"{w.sinks.host}:{w.sinks.port}"
    apply(w.api, NS, yaml.safe_load(w.cluster.manifest_path.read_text()))
    apply(w.api, NS, stream_manifest(w))
    ready = ("True", "Streaming")
    wait_for(lambda: condition_of(w.status(), "Ready") == ready, "Ready", timeout=300)
    ledger = w.workdir / "ledger.jsonl"
    traffic = TrafficGenerator(
        w.cluster.manifest_path, w.cluster.secrets_dir, ledger, TrafficOptions(rate=200, seed=71)
    ).start()
    try:
        time.sleep(4)
        w.sinks.server.stop()  # SIGTERM to its pid, waits until it is gone
        down_at = time.monotonic()

        def degraded() -> dict[str, Any] | None:
            status = w.status()
            wanted = ("True", "SinkUnavailable")
            return status if condition_of(status, "Degraded") == wanted else None

        status = wait_for(degraded, "Degraded: SinkUnavailable", timeout=120)
        (condition,) = [c for c in status["conditions"] if c["type"] == "Degraded"]
        message = condition["message"].removeprefix("key range -: ")
        assert named_sink(message, address), condition
        assert "check that the server runs" in condition["message"]
        assert condition_of(status, "Ready") == ("False", "SinkUnavailable")
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
        assert condition_of(w.status(), "Degraded") == ("True", "SinkUnavailable")
        w.sinks.server.start()  # same port, same data directory
        wait_for(lambda: condition_of(w.status(), "Ready") == ready, "Ready again", timeout=180)
        assert condition_of(w.status(), "Degraded") == ("False", "AsExpected")
        time.sleep(3)
    finally:
        stats = traffic.stop()
    want = {s: w.cluster.server(s).gtid_position() for s in SHARDS}
    after = time.time() + 3

    def caught_up() -> bool:
        shards = read_status(w.status_file()).get("shards", {})
        return all(
            shards.get(s, {}).get("position") == want[s]
            and (shards[s].get("heartbeatTimestamp") or 0) >= after
            for s in SHARDS
        )

    wait_for(caught_up, f"the job at {want}", timeout=300)
    streams = w.streams
    reasons = streams.reasons(STREAM)
    # a server shutting down may still take a batch between two that fail, so the stream may
    # flap once at the start of the outage; it ends delivering, by itself
    sink_events = [r for r in reasons if r in ("SinkUnavailable", "SinkAvailable")]
    assert sink_events[0] == "SinkUnavailable" and sink_events[-1] == "SinkAvailable", reasons
    assert not {"JobFailed", "Relaunched"} & set(reasons), reasons  # the job rode it out
    assert not (w.status_file().parent.parent / "launch-2").exists()
    warning = next(e for e in streams.events(STREAM) if e["reason"] == "SinkUnavailable")
    assert warning["type"] == "Warning" and address in warning["message"]
    streams.status(STREAM)
    secrets = [p.read_text() for p in w.secrets_dir.glob("*/password")]
    assert not [s for s in secrets if any(s in seen for seen in streams.seen)]
    for sink, verdict in w.verify(ledger).items():
        assert verdict["lost"] == 0 and verdict["duplicates_delivered"] == 0, (sink, verdict)
        assert verdict["committed"] == stats.rows, (sink, verdict)
    target = MirrorTarget(
        endpoint=spec.MySQLEndpoint(host=w.sinks.host, port=w.sinks.port),
        secret=SINK_SECRET,
        database=MIRROR_DATABASE,
    )
    mirror = verify_mirror(w.cluster.keyspace(), target, w.secrets_dir, "-")
    assert mirror.ok, mirror.examples
    assert mirror.source_rows == mirror.mirror_rows > 0
