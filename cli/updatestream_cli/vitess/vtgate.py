"""vtgate: the keyspace's MySQL-protocol endpoint on loopback, with static users.

Applications (the traffic generator) connect with the keyspace's `app` credentials; vtgate
routes each statement by the VSchema and the serving shards. `--transaction-mode SINGLE` makes
a transaction that would touch two shards fail instead of committing on each separately, so
every committed transaction belongs to exactly one shard. Buffering holds writes while a
Reshard's SwitchTraffic moves the primaries. vtgate looks for new tablets every second (the
default is a minute, which would leave a Reshard's new shards without a healthy primary in
vtgate's eyes for up to a minute after SwitchTraffic).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from updatestream.local_ports import free_port
from updatestream.spec import Credentials
from updatestream_cli.vitess.environment import ClusterEnv
from updatestream_cli.vitess.vitess_service import VitessService


@dataclass
class Vtgate(VitessService):
    program: ClassVar[str] = "vtgate"
    http_port: int
    grpc_port: int
    mysql_port: int
    pid: int | None = None

    @classmethod
    def new(cls) -> Vtgate:
        return cls(free_port(), free_port(), free_port())

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @staticmethod
    def auth_file(env: ClusterEnv) -> Path:
        return env.dir / "vtgate-users.json"

    def write_users(self, env: ClusterEnv, users: list[Credentials]) -> None:
        """The static user file (readable by the service user only; it holds passwords)."""
        path = self.auth_file(env)
        data = {c.username: [{"Password": c.password, "UserData": c.username}] for c in users}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        env.user.chown(path)

    def start(self, env: ClusterEnv, timeout: float = 120.0) -> None:
        flags = [
            *env.common_flags(),
            "--cell", env.cell,
            "--cells-to-watch", env.cell,
            "--tablet-types-to-wait", "PRIMARY",
            "--service-map", "grpc-vtgateservice",
            "--bind-address", "127.0.0.1",
            "--grpc-bind-address", "127.0.0.1",
            "--port", str(self.http_port),
            "--grpc-port", str(self.grpc_port),
            "--mysql-server-port", str(self.mysql_port),
            "--mysql-server-bind-address", "127.0.0.1",
            "--mysql-auth-server-impl", "static",
            "--mysql-auth-server-static-file", str(self.auth_file(env)),
            "--transaction-mode", "SINGLE",
            "--enable-buffer",
            # a Reshard's new tablets are found within a second, not at the next minute
            "--tablet-refresh-interval", "1s",
        ]  # fmt: skip
        self.launch(env, flags, port=self.mysql_port, timeout=timeout)
