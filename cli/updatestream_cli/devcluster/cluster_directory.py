"""The directory of a local cluster, laid out alike for the development cluster and the local
Vitess cluster: the Keyspace manifest, the Secrets as files, the recorded state and a lock; and
the cluster's run for the length of a `with` block."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Self

from updatestream.core.errors import UpdateStreamError


class ClusterDirectory:
    """Paths, state and lock of one cluster directory; a subclass names its state error and
    what to do when the state cannot be read, and starts and stops the cluster."""

    state_error: ClassVar[type[UpdateStreamError]]
    unreadable_hint: ClassVar[str]

    def __init__(self, directory: Path | str) -> None:
        self.dir = Path(directory).absolute()
        self.manifest_path = self.dir / "keyspace.yaml"
        self.secrets_dir = self.dir / "secrets"  # a folder per Secret, as Kubernetes mounts one
        self.state_path = self.dir / "state.json"

    def exists(self) -> bool:
        return self.state_path.exists()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock on the directory while the cluster's processes, state or manifest
        change."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / ".lock").open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _read_state(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            raise self.state_error(
                f"cluster state {self.state_path} is unreadable ({exc}); {self.unreadable_hint}"
            ) from None
        return data

    def up(self, shards: str | None = None) -> object:
        """Start (or restart) the cluster, with `shards` serving when it is a new one."""
        raise NotImplementedError

    def down(self) -> object:
        """Stop what the directory records as started."""
        raise NotImplementedError

    @contextlib.contextmanager
    def running(self, shards: str | None = None) -> Iterator[Self]:
        """`up(shards)` for the length of a `with` block, then `down()`, however it ends."""
        try:
            self.up(shards)
            yield self
        finally:
            self.down()
