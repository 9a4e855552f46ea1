"""One TLS rule for every MySQL connection: what each spec mode checks."""

import datetime as dt
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from updatestream.mysql import tls_arguments, tls_context
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
