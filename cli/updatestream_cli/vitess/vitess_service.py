"""What vtctld and vtgate share: a pid kept in the cluster's state, a detached start as the
service user that waits for the status page and the service's port, a stop by pid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Self

from updatestream_cli.vitess import processes
from updatestream_cli.vitess.environment import ClusterEnv


class VitessService:
    """Base of a dataclass with the service's ports and its `pid`."""

    program: ClassVar[str]
    http_port: int
    pid: int | None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))  # the dataclass's fields: its ports and pid

    def is_running(self, env: ClusterEnv) -> bool:
        return processes.owns(self.pid, str(env.dir))

    def launch(self, env: ClusterEnv, flags: Sequence[str], *, port: int, timeout: float) -> None:
        """Start the program with `flags` and its pid file unless it runs; return once its status
        page and `port` answer (its log is `<program>.log` in the cluster's logs)."""
        if self.is_running(env):
            return
        argv = [
            env.runtime.program(self.program),
            *flags,
            "--pid-file",
            str(env.dir / f"{self.program}.pid"),
        ]
        log = env.logs / f"{self.program}.log"
        self.pid = processes.spawn(
            argv, log_path=log, user=env.user, env=env.environ(), cwd=env.dir
        )
        processes.wait_for(
            lambda: (
                processes.http_ok(f"http://127.0.0.1:{self.http_port}/debug/status")
                and processes.tcp_open(port)
            ),
            what=self.program,
            pid=self.pid,
            log_path=log,
            timeout=timeout,
        )

    def stop(self, env: ClusterEnv) -> bool:
        stopped = processes.stop(self.pid, str(env.dir))
        self.pid = None
        return stopped
