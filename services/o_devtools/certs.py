"""Throwaway certificates for TLS on one machine: a CA, a server certificate for
127.0.0.1/localhost and a client certificate, as PEM files in a folder.

For the tests and the benchmark that run NATS and Postgres with TLS (tests/e2e/test_tls.py,
`bench.agent_loop --tls`), never for a deployment: there cert-manager or the operator's own
PKI issues them (docs/operations.md#tls). Made with the `cryptography` package O already
uses; ECDSA P-256 keys, as cert-manager's defaults for a small, fast handshake.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    """A CA and what it signed, in `folder`."""

    folder: Path
    ca: Path
    server: KeyPair
    client: KeyPair


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Postgres refuses a key others can read.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def make_ca(common_name: str = "O test CA") -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        # Key identifiers, which Python 3.13's strict verification (VERIFY_X509_STRICT, on
        # in ssl.create_default_context) requires: "Missing Authority Key Identifier".
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _issue(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName],
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_certificates(folder: Path, ca_name: str = "O test CA") -> Certificates:
    """A fresh CA in `folder`, a server certificate for 127.0.0.1 and localhost, and a client
    certificate (for servers that verify their clients)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = make_ca(ca_name)
    server, server_key = _issue(
        ca,
        ca_key,
        "localhost",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client, client_key = _issue(ca, ca_key, "o-services", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    paths = Certificates(
        folder=folder,
        ca=folder / "ca.crt",
        server=KeyPair(folder / "server.crt", folder / "server.key"),
        client=KeyPair(folder / "client.crt", folder / "client.key"),
    )
    _write_cert(ca, paths.ca)
    _write_cert(server, paths.server.cert)
    _write_key(server_key, paths.server.key)
    _write_cert(client, paths.client.cert)
    _write_key(client_key, paths.client.key)
    return paths
