"""`vtctldclient`, the command-line client of vtctld, run as the service user."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatestream_cli.vitess import processes
from updatestream_cli.vitess.errors import VtctldCommandError
from updatestream_cli.vitess.runtime import Runtime, ServiceUser


@dataclass
class Vtctldclient:
    """Runs `vtctldclient --server <vtctld> <command> ...` and returns its output."""

    runtime: Runtime
    user: ServiceUser
    server: str  # host:port of vtctld's gRPC service
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None

    def run(self, *args: str, timeout: float = 120.0) -> str:
        argv = [self.runtime.program("vtctldclient"), "--server", self.server, *args]
        proc = processes.run(
            argv,
            user=self.user,
            env=self.env,
            cwd=self.cwd,
            timeout=timeout,
            log_path=self.log_path,
        )
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout).strip()
            raise VtctldCommandError(
                f"`vtctldclient {' '.join(_shorten(args))}` failed (exit {proc.returncode}): "
                f"{output[-3000:]}"
            )
        return proc.stdout

    def json(self, *args: str, timeout: float = 120.0) -> Any:
        """A command whose output is JSON (most read commands, or `--format json`)."""
        out = self.run(*args, timeout=timeout)
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            raise VtctldCommandError(
                f"`vtctldclient {' '.join(_shorten(args))}` printed no JSON: {out[:500]!r}"
            ) from None


def _shorten(args: tuple[str, ...]) -> list[str]:
    """Arguments for an error message: long SQL or JSON values cut short."""
    return [a if len(a) <= 80 else a[:77] + "..." for a in args]
