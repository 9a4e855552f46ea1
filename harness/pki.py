"""A throw-away PKI for one test API server: CA, serving and admin client certs, SA key."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Names the serving certificate answers to: loopback, and the in-cluster names a client that
# reads the `kubernetes` Service would use.
_SERVING_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class KubePki:
    """Paths of the PEM files the API server and its clients are configured with."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_signing_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
    )


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """Signing only: certificates and CRLs for the CA, handshakes for a leaf."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA that signs the server's and the clients' certificates."""
    key = _key()
    name = _name("updatestream-test-ca")
    cert = (
        _builder(name, name, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    san: x509.SubjectAlternativeName | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = (
        _builder(subject, ca.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def write_pki(directory: Path, service_ip: str, admin_user: str = "updatestream-admin") -> KubePki:
    """Write a fresh CA, certificates and service-account key pair under `directory`.

    The admin client certificate carries the group `system:masters`, which the API server
    treats as a superuser regardless of RBAC.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca()
    san = x509.SubjectAlternativeName(
        [x509.DNSName(name) for name in _SERVING_DNS]
        + [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address(service_ip)),
        ]
    )
    serving, serving_key = _leaf(
        ca, ca_key, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, san
    )
    admin, admin_key = _leaf(
        ca, ca_key, _name(admin_user, "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH
    )
    sa_key = _key()

    pki = KubePki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_public_key=directory / "sa.pub",
        sa_signing_key=directory / "sa.key",
    )
    _write_cert(pki.ca_cert, ca)
    _write_cert(pki.serving_cert, serving)
    _write_key(pki.serving_key, serving_key)
    _write_cert(pki.admin_cert, admin)
    _write_key(pki.admin_key, admin_key)
    _write_key(pki.sa_signing_key, sa_key)
    pki.sa_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
