"""Certificates carry the identity Kubernetes reads from them and chain to the CA."""

from __future__ import annotations

import datetime as dt
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from specops_lab.cluster._pki import issue_certificate, new_ca, new_private_key, public_key_pem

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _verify_signed_by(cert: x509.Certificate, ca: x509.Certificate) -> None:
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert cert.signature_hash_algorithm is not None
    public.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))


def test_client_cert_names_user_and_groups_and_chains_to_ca() -> None:
    ca = new_ca("test-ca", NOW)
    pair = issue_certificate(ca, "alice", NOW, organizations=("system:masters", "devs"))
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    groups = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert groups == ["system:masters", "devs"]
    assert cert.issuer == ca_cert.subject
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    _verify_signed_by(cert, ca_cert)
    assert cert.not_valid_before_utc < NOW < cert.not_valid_after_utc


def test_serving_cert_has_the_sans() -> None:
    ca = new_ca("test-ca", NOW)
    pair = issue_certificate(
        ca, "kube-apiserver", NOW, dns_names=("kubernetes",), ip_addresses=("127.0.0.1",)
    )
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["kubernetes"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_public_key_matches_private_key() -> None:
    key_pem = new_private_key()
    key = serialization.load_pem_private_key(key_pem, password=None)
    public = serialization.load_pem_public_key(public_key_pem(key_pem))
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.public_numbers() == key.public_key().public_numbers()
