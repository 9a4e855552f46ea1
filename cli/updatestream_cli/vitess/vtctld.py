"""vtctld, the cluster's control service, which `vtctldclient` talks to."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from updatestream_cli.devcluster.local_server import free_port
from updatestream_cli.vitess import processes
from updatestream_cli.vitess.environment import ClusterEnv


@dataclass
class Vtctld:
    http_port: int
    grpc_port: int
    pid: int | None = None

    @classmethod
    def new(cls) -> Vtctld:
        return cls(free_port(), free_port())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vtctld:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def is_running(self, env: ClusterEnv) -> bool:
        return processes.owns(self.pid, str(env.dir))

    def start(self, env: ClusterEnv, timeout: float = 120.0) -> None:
        if self.is_running(env):
            return
        argv = [
            env.runtime.program("vtctld"),
            *env.common_flags(),
            "--service-map", "grpc-vtctl,grpc-vtctld",
            "--bind-address", "127.0.0.1",
            "--grpc-bind-address", "127.0.0.1",
            "--port", str(self.http_port),
            "--grpc-port", str(self.grpc_port),
            "--pid-file", str(env.dir / "vtctld.pid"),
        ]  # fmt: skip
        log = env.logs / "vtctld.log"
        self.pid = processes.spawn(
            argv, log_path=log, user=env.user, env=env.environ(), cwd=env.dir
        )
        processes.wait_for(
            lambda: (
                processes.http_ok(f"http://127.0.0.1:{self.http_port}/debug/status")
                and processes.tcp_open(self.grpc_port)
            ),
            what="vtctld",
            pid=self.pid,
            log_path=log,
            timeout=timeout,
        )

    def stop(self, env: ClusterEnv) -> bool:
        stopped = processes.stop(self.pid, str(env.dir))
        self.pid = None
        return stopped
