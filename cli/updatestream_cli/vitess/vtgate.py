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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from updatestream.spec import Credentials
from updatestream_cli.devcluster.local_server import free_port
from updatestream_cli.vitess import processes
from updatestream_cli.vitess.environment import ClusterEnv


@dataclass
class Vtgate:
    http_port: int
    grpc_port: int
    mysql_port: int
    pid: int | None = None

    @classmethod
    def new(cls) -> Vtgate:
        return cls(free_port(), free_port(), free_port())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vtgate:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def is_running(self, env: ClusterEnv) -> bool:
        return processes.owns(self.pid, str(env.dir))

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
        if self.is_running(env):
            return
        argv = [
            env.runtime.program("vtgate"),
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
            "--pid-file", str(env.dir / "vtgate.pid"),
        ]  # fmt: skip
        log = env.logs / "vtgate.log"
        self.pid = processes.spawn(
            argv, log_path=log, user=env.user, env=env.environ(), cwd=env.dir
        )
        processes.wait_for(
            lambda: (
                processes.http_ok(f"http://127.0.0.1:{self.http_port}/debug/status")
                and processes.tcp_open(self.mysql_port)
            ),
            what="vtgate",
            pid=self.pid,
            log_path=log,
            timeout=timeout,
        )

    def stop(self, env: ClusterEnv) -> bool:
        stopped = processes.stop(self.pid, str(env.dir))
        self.pid = None
        return stopped
