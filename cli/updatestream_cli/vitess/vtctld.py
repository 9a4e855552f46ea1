"""vtctld, the cluster's control service, which `vtctldclient` talks to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from updatestream.local_ports import free_port
from updatestream_cli.vitess.environment import ClusterEnv
from updatestream_cli.vitess.vitess_service import VitessService


@dataclass
class Vtctld(VitessService):
    program: ClassVar[str] = "vtctld"
    http_port: int
    grpc_port: int
    pid: int | None = None

    @classmethod
    def new(cls) -> Vtctld:
        return cls(free_port(), free_port())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, env: ClusterEnv, timeout: float = 120.0) -> None:
        flags = [
            *env.common_flags(),
            "--service-map", "grpc-vtctl,grpc-vtctld",
            "--bind-address", "127.0.0.1",
            "--grpc-bind-address", "127.0.0.1",
            "--port", str(self.http_port),
            "--grpc-port", str(self.grpc_port),
        ]  # fmt: skip
        self.launch(env, flags, port=self.grpc_port, timeout=timeout)
