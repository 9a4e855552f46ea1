"""Typed errors of the local Vitess cluster; each says what went wrong and what to do."""

from __future__ import annotations

from updatestream.core.errors import UpdateStreamError


class VitessError(UpdateStreamError):
    """Base of the local Vitess cluster's errors."""


class VitessToolsMissing(VitessError):
    """A Vitess program, MySQL or etcd is not installed where the cluster looks for it."""


class ServiceUserError(VitessError):
    """The unprivileged user that runs the Vitess processes cannot be created or used."""


class ProcessStartError(VitessError):
    """A Vitess process, mysqld or etcd exited or did not answer during start-up."""


class VtctldCommandError(VitessError):
    """A `vtctldclient` command failed; the message holds its output."""


class VitessStateError(VitessError):
    """The cluster directory is missing, or its state does not match what is asked."""


class ReshardError(VitessError):
    """A Reshard workflow could not be created, did not converge, or could not switch."""
