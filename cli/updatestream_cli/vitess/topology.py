"""The topology server: one Debian `etcd` (v3 API) on loopback, run as the service user.

Vitess keeps its global topology under `/vitess/global` and each cell's under `/vitess/<cell>`
(`--topo-implementation etcd2`). Everything it asks of etcd (keys, leases, watches,
transactions, the election and lock recipes) is in etcd 3.4's v3 API.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from updatestream_cli.vitess import processes
from updatestream_cli.vitess.runtime import ETCD, ServiceUser

GLOBAL_ROOT = "/vitess/global"


def cell_root(cell: str) -> str:
    return f"/vitess/{cell}"


@dataclass
class Etcd:
    """One etcd member with its data directory under the cluster directory."""

    data_dir: Path
    log_path: Path
    client_port: int
    peer_port: int
    pid: int | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def topo_flags(self) -> list[str]:
        """The flags every Vitess program needs to find the global topology."""
        return [
            "--topo-implementation", "etcd2",
            "--topo-global-server-address", self.address,
            "--topo-global-root", GLOBAL_ROOT,
        ]  # fmt: skip

    def argv(self) -> list[str]:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            ETCD,
            "--name", "topo",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"topo={peer}",
            "--listen-metrics-urls", "",
            "--logger", "zap",
        ]  # fmt: skip

    def is_running(self) -> bool:
        return processes.owns(self.pid, str(self.data_dir))

    def start(self, user: ServiceUser, env: dict[str, str], timeout: float = 60.0) -> None:
        if self.is_running():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        user.chown(self.data_dir)
        self.pid = processes.spawn(
            self.argv(), log_path=self.log_path, user=user, env=env, cwd=self.data_dir.parent
        )
        processes.wait_for(
            lambda: processes.http_ok(f"http://{self.address}/health"),
            what=f"etcd on {self.address}",
            pid=self.pid,
            log_path=self.log_path,
            timeout=timeout,
        )

    def stop(self) -> bool:
        stopped = processes.stop(self.pid, str(self.data_dir))
        self.pid = None
        return stopped
