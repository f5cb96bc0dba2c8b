"""A throwaway certificate authority for TLS tests against real servers.

Real-server fixtures mint a fresh CA, a server certificate for the loopback address and a
client certificate every time they start a TLS variant, so no key material is ever checked in
and nothing outlives the test's temporary directory.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TestPKI", "make_test_pki"]


@attrs.frozen
class TestPKI:
    """Paths of a freshly minted CA and the certificates it signed (PEM files)."""

    __test__ = False  # a value class, not a pytest test class

    ca_cert: Path
    """The CA certificate clients and servers trust."""
    server_cert: Path
    """Certificate for ``127.0.0.1`` / ``localhost``, usable for server and client auth."""
    server_key: Path
    """Private key of ``server_cert``."""
    client_cert: Path
    """A client certificate signed by the CA."""
    client_key: Path
    """Private key of ``client_cert``."""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _organization(name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _issue(
    subject: str,
    public_key: ec.EllipticCurvePublicKey,
    ca_name: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    usages: list[x509.ObjectIdentifier],
    *,
    loopback: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_organization(subject))
        .issuer_name(ca_name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if loopback:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256())


def make_test_pki(directory: Path, *, ca_name: str = "spate test CA") -> TestPKI:
    """Mint a CA, a loopback server certificate and a client certificate into ``directory``.

    The server certificate also carries the client-auth usage because etcd's HTTP gateway
    dials its own gRPC port with it when client-cert auth is on. Neither leaf certificate has
    a common name (only an organization): with authentication enabled, etcd refuses gateway
    requests whose client certificate names a user it cannot honour through the gateway.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        "spate test server",
        server_key.public_key(),
        ca.subject,
        ca_key,
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        loopback=True,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(
        "spate test client",
        client_key.public_key(),
        ca.subject,
        ca_key,
        [ExtendedKeyUsageOID.CLIENT_AUTH],
        loopback=False,
    )
    pki = TestPKI(
        ca_cert=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server-key.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
    )
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pki.client_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, pki.server_key)
    _write_key(client_key, pki.client_key)
    return pki
