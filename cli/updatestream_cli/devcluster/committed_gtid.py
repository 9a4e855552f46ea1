"""The GTID of the transaction a session just committed, on either flavor.

- MariaDB: `@@last_gtid`, read in the same round trip as the COMMIT (`COMMIT; SELECT
  @@last_gtid`, with multi-statements on).
- MySQL 8 has no such variable. A session that sets `session_track_gtids = OWN_GTID` and
  declared `CLIENT_SESSION_TRACK` gets the GTIDs it committed in the OK packet of its COMMIT,
  as a session-state change of type `SESSION_TRACK_GTIDS`. PyMySQL keeps the OK packet's bytes
  after the status and warning counts (the `info` text, then the session state) in its
  result's `message`; this module reads the GTID from there. Reading `@@GLOBAL.gtid_executed`
  after the COMMIT instead would be wrong whenever another session commits in between.
"""

from __future__ import annotations

from typing import Any

from pymysql.constants import CLIENT

from updatestream_cli.devcluster.errors import TrafficError
from updatestream_cli.devcluster.local_server import Connection, ServerFlavor

_SESSION_STATE_CHANGED = 0x4000  # SERVER_SESSION_STATE_CHANGED in the OK packet's status
_SESSION_TRACK_GTIDS = 3


def client_flags(flavor: ServerFlavor) -> int:
    """The capabilities a traffic connection declares (beyond PyMySQL's own)."""
    flags = CLIENT.MULTI_STATEMENTS
    return flags | CLIENT.SESSION_TRACK if flavor == "mysql" else flags


def track_own_gtids(conn: Connection, flavor: ServerFlavor) -> None:
    """Ask the server to report every GTID this session commits (MySQL; nothing on MariaDB)."""
    if flavor == "mysql":
        with conn.cursor() as cur:
            cur.execute("SET SESSION session_track_gtids = OWN_GTID")


def commit(conn: Connection, cur: Any, flavor: ServerFlavor) -> str:
    """COMMIT the session's transaction and return its GTID."""
    if flavor == "mariadb":
        cur.execute("COMMIT; SELECT @@last_gtid")
        cur.nextset()
        return str(cur.fetchone()[0])
    cur.execute("COMMIT")
    result = getattr(conn, "_result", None)
    gtids = _tracked_gtids(
        getattr(result, "message", b"") or b"", getattr(result, "server_status", 0) or 0
    )
    if not gtids:
        raise TrafficError(
            "the MySQL server did not report the GTID of a committed transaction; does it run "
            "with gtid_mode=ON, and may the session set session_track_gtids?"
        )
    return gtids


def _length(data: bytes, pos: int) -> tuple[int, int]:
    """A length-encoded integer at `pos`: (value, position after it)."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(data[pos + 1 : pos + 1 + size], "little"), pos + 1 + size


def _tracked_gtids(message: bytes, status: int) -> str:
    """The GTIDs in an OK packet's session state (`""` when there are none)."""
    if not status & _SESSION_STATE_CHANGED or not message:
        return ""
    info, pos = _length(message, 0)
    total, pos = _length(message, pos + info)
    end = pos + total
    while pos < end:
        kind = message[pos]
        size, pos = _length(message, pos + 1)
        body = message[pos : pos + size]
        pos += size
        if kind == _SESSION_TRACK_GTIDS and body:
            length, at = _length(body, 1)  # after the encoding specification byte
            return body[at : at + length].decode("ascii")
    return ""
