"""Which failures of a sink's MySQL/MariaDB server are an outage the job waits out.

A server that is down, restarting or unreachable shows up as a client error (refused, lost
connection, gone away: MySQL client codes 2000-2999), a server that says it is shutting down or
killed the session, a closed connection (`InterfaceError`) or a socket error. Anything else (a
refused account, a missing privilege, a table that does not fit) is not an outage: waiting would
not change it.
"""

from __future__ import annotations

import pymysql

from updatestream_jobs.sinks.sink import SinkError, SinkUnavailable

# server shutdown in progress, connection killed (MariaDB), idle client disconnected (MySQL 8)
_SERVER_GOING = {1053, 1927, 4031}


def server_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the server does not answer (rather than refuses what was asked)."""
    if isinstance(exc, pymysql.err.InterfaceError | OSError):
        return True
    if isinstance(exc, pymysql.err.OperationalError) and exc.args:
        code = exc.args[0]
        return isinstance(code, int) and (2000 <= code < 3000 or code in _SERVER_GOING)
    return False


def sink_failure(
    exc: BaseException, what: str, *, name: str, kind: str, address: str, cause: str
) -> SinkError:
    """The typed error of sink `name` for `exc` while doing `what`: `SinkUnavailable` when its
    server does not answer, else a plain `SinkError`; both say `<name>: <what>: <cause>`."""
    message = f"{name}: {what}: {cause}"
    if server_unavailable(exc):
        return SinkUnavailable(message, kind=kind, address=address, cause=cause)
    return SinkError(message)
