"""Every MySQL connection: its arguments from the spec and a Secret; one TLS rule per mode."""

import datetime as dt
import ssl
from pathlib import Path
from typing import Any

import pymysql
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from updatestream.mysql_connections import connection_arguments, tls_arguments, tls_context
from updatestream.spec import MySQLEndpoint, SecretRef

SECRET = SecretRef(name="reader")


def write_ca(secrets_dir: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "updatestream-test-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (secrets_dir / SECRET.name).mkdir(parents=True)
    (secrets_dir / SECRET.name / "ca.crt").write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
    )


def endpoint(tls: str) -> MySQLEndpoint:
    return MySQLEndpoint.model_validate({"host": "db.example", "port": 3306, "tls": tls})


def test_disabled_means_no_tls(tmp_path: Path) -> None:
    assert tls_context(endpoint("disabled"), tmp_path, SECRET) is None


@pytest.mark.parametrize(
    ("mode", "verify", "hostname"),
    [
        ("preferred", ssl.CERT_NONE, False),
        ("required", ssl.CERT_NONE, False),
        ("verify-ca", ssl.CERT_REQUIRED, False),
        ("verify-identity", ssl.CERT_REQUIRED, True),
    ],
)
def test_each_mode_checks_what_it_says(
    tmp_path: Path, mode: str, verify: ssl.VerifyMode, hostname: bool
) -> None:
    context = tls_context(endpoint(mode), tmp_path, SECRET)
    assert context is not None
    assert context.verify_mode == verify
    assert context.check_hostname is hostname


def test_the_secrets_ca_is_trusted(tmp_path: Path) -> None:
    write_ca(tmp_path)
    context = tls_context(endpoint("verify-ca"), tmp_path, SECRET)
    assert context is not None
    subjects = [dict(x[0] for x in ca["subject"]) for ca in context.get_ca_certs()]
    assert {"commonName": "updatestream-test-ca"} in subjects


def test_disabled_tls_is_said_explicitly_to_pymysql(tmp_path: Path) -> None:
    """Without `ssl_disabled`, PyMySQL builds a TLS context per connection (tens of ms) and
    encrypts when the server offers TLS, whatever the spec says."""
    assert tls_arguments(endpoint("disabled"), tmp_path, SECRET) == {"ssl_disabled": True}
    arguments = tls_arguments(endpoint("required"), tmp_path, SECRET)
    assert set(arguments) == {"ssl"} and isinstance(arguments["ssl"], ssl.SSLContext)


def test_connection_arguments_read_the_secret_and_connect_to_a_real_server(
    tmp_path: Path, mariadb_server: Any
) -> None:
    folder = tmp_path / SECRET.name
    folder.mkdir()
    (folder / "username").write_text(mariadb_server.admin.username + "\n")
    (folder / "password").write_text(mariadb_server.admin.password + "\n")
    target = MySQLEndpoint(host=mariadb_server.host, port=mariadb_server.port, tls="disabled")
    arguments = connection_arguments(target, tmp_path, SECRET, database="mysql", autocommit=False)
    assert arguments["ssl_disabled"] is True
    assert arguments["database"] == "mysql" and arguments["autocommit"] is False
    assert "database" not in connection_arguments(target, tmp_path, SECRET)
    with pymysql.connect(**arguments) as conn, conn.cursor() as cur:
        cur.execute("SELECT DATABASE(), CURRENT_USER()")
        database, user = cur.fetchone()
    assert database == "mysql" and user.startswith(mariadb_server.admin.username + "@")
