"""Typed errors of the development cluster."""

from __future__ import annotations

from updatestream.core.errors import UpdateStreamError


class DevClusterError(UpdateStreamError):
    """Base of the development cluster's errors."""


class ServerError(DevClusterError):
    """A local server (mariadbd, mysqld, memcached) could not be initialised, started or reached."""


class ClusterStateError(DevClusterError):
    """The cluster directory is missing, or its state does not match what is asked."""


class ReshardError(DevClusterError):
    """A resharding request is invalid or the workflow cannot proceed."""


class ReshardInputError(ReshardError):
    """The shards given to `reshard` do not form a valid split or merge; nothing was changed."""


class ShardNotServingError(ReshardInputError):
    """A source shard of a reshard is not in the serving shard map."""


class ReshardInProgressError(ReshardInputError):
    """A shard is already part of another, unfinished resharding workflow."""


class ReshardFlavorError(ReshardInputError):
    """The cluster's server flavor is one the resharding workflow cannot yet work on."""


class TrafficError(DevClusterError):
    """The traffic generator could not commit a transaction and gave up."""
