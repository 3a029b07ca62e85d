"""Certificates for a throwaway local cluster: one CA, a serving cert, client certs.

ECDSA P-256 keys keep generation instant. Kubernetes identifies a client
certificate's user by its CN and its groups by its O fields, so the admin is
``O=system:masters`` and each component gets the name its bootstrap RBAC expects.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertKey",
    "issue_certificate",
    "new_ca",
    "new_private_key",
    "public_key_pem",
]

_VALIDITY = dt.timedelta(days=365)
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class CertKey:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes


def new_private_key() -> bytes:
    """A PEM (PKCS#8) ECDSA P-256 key, also usable as the service-account signing key."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key_pem: bytes) -> bytes:
    """The PEM public key of a private key: what verifies service-account tokens."""
    return (
        _load_key(key_pem)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _load_key(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def new_ca(common_name: str, now: dt.datetime) -> CertKey:
    """A self-signed CA that signs every other certificate of the cluster."""
    key_pem = new_private_key()
    key = _load_key(key_pem)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .sign(key, hashes.SHA256())
    )
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def issue_certificate(
    ca: CertKey,
    common_name: str,
    now: dt.datetime,
    *,
    organizations: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
) -> CertKey:
    """A leaf certificate signed by ``ca``: a serving cert when it has SANs, else a client cert."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    key_pem = new_private_key()
    serving = bool(dns_names or ip_addresses)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if serving else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(_load_key(key_pem).public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if serving:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(_load_key(ca.key_pem), hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), key_pem)
