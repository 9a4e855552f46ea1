"""The job's SparkSession: a JVM that closes its accumulator connection mid-read (SIGTERM to the
whole process group, the JVM first out) prints no traceback.

PySpark's accumulator server runs in the driver's Python process; the JVM connects to it once
and sends updates. Here the test connects the way the JVM does (the token first, when the
server asks for one) and hangs up before an update is complete.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest


def _hang_up_mid_read(server: Any) -> None:
    address = server.server_address
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as conn:
        conn.connect(address)
        token = getattr(server, "auth_token", None)
        if token:
            conn.sendall(token.encode() if isinstance(token, str) else token)
            conn.sendall(b"\x00\x00\x00\x01")  # one update follows ...
            time.sleep(0.5)  # ... and never comes: the handler is reading it when we go
        # without a token (a Unix socket), hanging up before the update count is enough


def test_a_connection_closed_mid_read_prints_no_traceback(
    spark: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    server = spark.sparkContext._accumulatorServer
    capfd.readouterr()
    _hang_up_mid_read(server)
    time.sleep(2.5)  # the handler polls once a second
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "EOFError" not in err
