"""Database accounts for the tests and benchmarks: an account on a server, and its Secret.

A Secret is what the job, the sinks and the tools read credentials from,
`<secrets dir>/<name>/username` and `password`, as Kubernetes mounts one in a pod.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

ALL_PRIVILEGES = "GRANT ALL PRIVILEGES ON *.* TO {user}"


class AccountServer(Protocol):
    """A local database server that creates accounts (MariaDB or MySQL)."""

    def create_account(self, user: str, password: str, grants: Sequence[str]) -> None: ...


def write_secret(secrets_dir: Path, name: str, username: str, password: str) -> str:
    """The Secret `name` under `secrets_dir`; returns its name."""
    folder = secrets_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "username").write_text(username)
    (folder / "password").write_text(password)
    return name


def account_with_secret(
    server: AccountServer, secrets_dir: Path, name: str, username: str, password: str = ""
) -> str:
    """An account with every privilege on `server` and its Secret `name`; returns the password
    (a random one unless given)."""
    password = password or secrets.token_urlsafe(16)
    server.create_account(username, password, [ALL_PRIVILEGES])
    write_secret(secrets_dir, name, username, password)
    return password
