"""UpdateStream: a resharding-aware change stream for sharded MySQL/MariaDB keyspaces."""

__version__ = "0.1.0"
