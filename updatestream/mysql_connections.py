"""Every MySQL/MariaDB connection the project opens: its arguments, credentials and TLS.

`connection_arguments` builds the `pymysql.connect` arguments for an endpoint of the spec and
its Secret. TLS follows one rule for the spec's modes:

- `disabled`: no TLS.
- `preferred`, `required`: encrypted, the server's certificate is not checked (PyMySQL cannot fall
  back to plain text, so `preferred` behaves as `required`).
- `verify-ca`: the certificate must chain to the CA in the Secret's `ca.crt` (the system's CAs
  when the Secret has none).
- `verify-identity`: as `verify-ca`, and the certificate must name the host.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pymysql

from updatestream.core.errors import UpdateStreamError
from updatestream.spec import MySQLEndpoint, SecretRef, read_credentials


def tls_context(
    endpoint: MySQLEndpoint, secrets_dir: Path, secret: SecretRef
) -> ssl.SSLContext | None:
    """The `ssl` argument for `pymysql.connect` to `endpoint`; None when TLS is disabled."""
    if endpoint.tls == "disabled":
        return None
    context = ssl.create_default_context()
    ca = secrets_dir / secret.name / "ca.crt"
    if ca.is_file():
        context.load_verify_locations(cafile=str(ca))
    context.check_hostname = endpoint.tls == "verify-identity"
    if endpoint.tls not in ("verify-ca", "verify-identity"):
        context.verify_mode = ssl.CERT_NONE
    return context


def tls_arguments(endpoint: MySQLEndpoint, secrets_dir: Path, secret: SecretRef) -> dict[str, Any]:
    """`pymysql.connect` keyword arguments for the endpoint's TLS mode. For `disabled` they say
    so explicitly: without it PyMySQL builds a TLS context for every connection and encrypts
    whenever the server offers TLS (tens of milliseconds per connection)."""
    context = tls_context(endpoint, secrets_dir, secret)
    return {"ssl_disabled": True} if context is None else {"ssl": context}


def connection_arguments(
    endpoint: MySQLEndpoint,
    secrets_dir: Path,
    secret: SecretRef,
    *,
    database: str | None = None,
    connect_timeout: float = 5,
    read_timeout: float = 60,
    **extra: Any,
) -> dict[str, Any]:
    """`pymysql.connect` keyword arguments for `endpoint` with the credentials of the Secret
    `secret` (mounted under `secrets_dir`) and the endpoint's TLS mode. They hold the password:
    never log them. `extra` adds or overrides arguments (`autocommit`, `write_timeout`)."""
    credentials = read_credentials(secrets_dir, secret)
    arguments: dict[str, Any] = {
        "host": endpoint.host,
        "port": endpoint.port,
        "user": credentials.username,
        "password": credentials.password,
        "charset": "utf8mb4",
        "connect_timeout": connect_timeout,
        "read_timeout": read_timeout,
        "write_timeout": read_timeout,
        **tls_arguments(endpoint, secrets_dir, secret),
    }
    if database is not None:
        arguments["database"] = database
    arguments.update(extra)
    return arguments


def describe_error(exc: BaseException) -> str:
    """An error as a message says it: a typed error's own text, a server's error as its code and
    text, anything else with its type."""
    if isinstance(exc, UpdateStreamError):
        return str(exc)
    if isinstance(exc, pymysql.err.MySQLError) and len(exc.args) >= 2:
        return f"MySQL error {exc.args[0]}: {exc.args[1]}"
    return f"{type(exc).__name__}: {exc}"
