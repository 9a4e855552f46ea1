"""What the binlog library needs to read a shard: where it listens, and how to read it.

`ReaderConfig` is the reader's whole configuration: the keyspace and its VSchema (rows map to
keyspace ids through it), the key range and tables to keep, the database the tables live in,
where the Secrets are mounted, and the retry policy. It is frozen and picklable, because the
Spark source ships it to its workers. The Spark source's own options live with the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from updatestream.spec import Keyspace


@dataclass(frozen=True, slots=True)
class ShardEndpoint:
    """Where one shard's primary listens and which Secret holds its replication user."""

    keyspace: str
    shard: str
    host: str
    port: int
    secret: str
    flavor: Literal["mariadb", "mysql"] = "mariadb"
    tls: str = "disabled"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        return f"shard {self.shard} ({self.address})"


def endpoints_of(keyspace: Keyspace) -> list[ShardEndpoint]:
    """Where each shard the Keyspace declares listens, and its replication user's Secret."""
    return [
        ShardEndpoint(
            keyspace=keyspace.metadata.name,
            shard=spec.name,
            host=spec.mysql.host,
            port=spec.mysql.port,
            secret=spec.credentials_secret.name,
            flavor=spec.flavor,
            tls=spec.mysql.tls,
        )
        for spec in keyspace.spec.shards
    ]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a connection to a shard is retried: bounded attempts, exponential backoff."""

    max_retries: int = 5
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    connect_timeout: int = 10
    read_timeout: int = 60

    def backoff(self, attempt: int) -> float:
        return float(min(self.max_backoff, self.initial_backoff * (2 ** max(0, attempt - 1))))


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """Everything the binlog library reads a shard with (see the module docstring)."""

    keyspace: str
    vschema_json: str
    key_range: str = "-"
    tables: tuple[str, ...] = ()
    database: str | None = None  # None: any non-system database
    secrets_dir: str = "."
    retry: RetryPolicy = field(default_factory=RetryPolicy)
