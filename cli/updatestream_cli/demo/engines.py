"""The keyspace a demo streams, on one of two engines, behind one small interface.

- `devcluster`: the development cluster's MariaDB or MySQL 8 shards, resharded by its own
  filtered replication (a live split with a few seconds of copies before the cut-over);
- `vitess`: a real local Vitess v24 (etcd, vtctld, vtgate, one primary tablet on MySQL 8 per
  shard), traffic written through vtgate, resharded by Vitess's own `Reshard` (create, copy,
  SwitchTraffic, complete).

Either way the Keyspace manifest in the cluster's directory is what the operator follows: the
development cluster's reshard rewrites it at the cut-over, the Vitess one syncs it from vtctld
after SwitchTraffic. Nothing about the split is told to the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from updatestream import spec
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import ServerFlavor
from updatestream_cli.devcluster.reporting import QuietReporter
from updatestream_cli.devcluster.reshard import ReshardOptions, ReshardWorkflow, plan_reshard
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

Engine = Literal["devcluster", "vitess"]
ENGINES: tuple[Engine, ...] = ("devcluster", "vitess")
PhaseListener = Callable[[str], None]  # shown as the split's current phase


class DemoKeyspace(Protocol):
    """What the demo does with its keyspace, whatever runs it."""

    manifest_path: Path
    secrets_dir: Path

    @property
    def keyspace_name(self) -> str: ...

    def start(self, shards: str) -> str: ...  # starts it; returns what runs, in words

    def positions(self) -> dict[str, str]: ...  # serving shard -> its GTID position now

    def traffic(self, ledger: Path, options: TrafficOptions) -> TrafficGenerator: ...

    def reshard(self, sources: str, targets: str, phase: PhaseListener) -> None: ...

    def exists(self) -> bool: ...

    def down(self) -> list[str]: ...  # what it stopped


def demo_keyspace(directory: Path, engine: Engine, flavor: ServerFlavor) -> DemoKeyspace:
    if engine == "vitess":
        return VitessKeyspace(directory / "vitess")
    return DevKeyspace(directory / "cluster", flavor)


class DevKeyspace:
    """The development cluster (`<dir>/cluster`)."""

    def __init__(self, directory: Path, flavor: ServerFlavor, replicate_seconds: float = 5.0):
        self.cluster = DevCluster(directory, flavor=flavor)
        self.manifest_path = self.cluster.manifest_path
        self.secrets_dir = self.cluster.secrets_dir
        self.replicate_seconds = replicate_seconds  # filtered replication before the cut-over

    @property
    def keyspace_name(self) -> str:
        return self.cluster.keyspace_name

    def start(self, shards: str) -> str:
        self.cluster.up(shards)
        ports = (f"{s.name} ({s.mysql.port})" for s in self.cluster.keyspace().spec.shards)
        return f"development cluster: {self.cluster.flavor} shards {', '.join(ports)}"

    def positions(self) -> dict[str, str]:
        serving = self.cluster.keyspace().spec.serving_shards
        return {s: self.cluster.server(s).gtid_position() for s in serving}

    def traffic(self, ledger: Path, options: TrafficOptions) -> TrafficGenerator:
        return TrafficGenerator(self.manifest_path, self.secrets_dir, ledger, options)

    def reshard(self, sources: str, targets: str, phase: PhaseListener) -> None:
        class Phases(QuietReporter):
            def phase(self, name: str, detail: str = "") -> None:
                phase(f"{name} {detail}".strip())

        plan = plan_reshard(self.cluster, sources, targets)
        options = ReshardOptions(min_replicate_seconds=self.replicate_seconds)
        ReshardWorkflow(self.cluster, plan, options, Phases()).run()

    def exists(self) -> bool:
        return self.cluster.exists()

    def down(self) -> list[str]:
        return [f"shard {name}" for name in self.cluster.down()]


class VitessKeyspace:
    """A real local Vitess (`<dir>/vitess`); needs `make vitess-tools` and `make mysql`."""

    def __init__(self, directory: Path) -> None:
        from updatestream_cli.vitess.cluster import VitessCluster

        self.cluster = VitessCluster(directory)
        self.manifest_path = self.cluster.manifest_path
        self.secrets_dir = self.cluster.secrets_dir

    @property
    def keyspace_name(self) -> str:
        return self.cluster.keyspace

    def start(self, shards: str) -> str:
        self.cluster.up(shards)
        tablets = ", ".join(f"{t.shard} (mysqld {t.mysql_port})" for t in self.cluster.tablets())
        return f"Vitess: vtgate MySQL port {self.cluster.vtgate.mysql_port}, tablets {tablets}"

    def positions(self) -> dict[str, str]:
        serving = spec.load_keyspace(self.manifest_path).spec.serving_shards
        return {shard: self.cluster.gtid_executed(shard) for shard in serving}

    def traffic(self, ledger: Path, options: TrafficOptions) -> TrafficGenerator:
        from updatestream_cli.vitess.gateway import VtgateGateway

        gateway = VtgateGateway(
            "127.0.0.1", self.cluster.vtgate.mysql_port, self.manifest_path, self.secrets_dir
        )
        return TrafficGenerator(
            self.manifest_path, self.secrets_dir, ledger, options, gateway=gateway
        )

    def reshard(self, sources: str, targets: str, phase: PhaseListener) -> None:
        from updatestream_cli.vitess.reshard import (
            QuietReshardReporter,
            VitessReshard,
            plan_reshard,
        )

        class Phases(QuietReshardReporter):
            def phase(self, name: str, detail: str) -> None:
                phase(f"{name} {detail}".strip())

        serving = spec.load_keyspace(self.manifest_path).spec.serving_shards
        plan = plan_reshard(serving, sources, targets)
        VitessReshard(self.cluster, plan, Phases(), max_lag_seconds=5.0).run()

    def exists(self) -> bool:
        return self.cluster.exists()

    def down(self) -> list[str]:
        return self.cluster.down(purge=False)
