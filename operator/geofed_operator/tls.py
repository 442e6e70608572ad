"""Self-signed TLS for a PS when the Federation names no certificate Secret.

A private CA signs a server certificate for the Service's DNS names (plus any extra names the spec
lists, e.g. a load balancer's). The CA key stays in the operator-owned Secret, so adding a name
re-issues the server certificate under the same CA and sites keep trusting it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY_DAYS = 3650


@dataclass(frozen=True)
class TLSMaterial:
    """PEM-encoded server certificate and key, the CA certificate and (for re-issuing) the CA key."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    ca_key_pem: bytes


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _new_ca(common_name: str, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def issue_self_signed(
    names: list[str],
    *,
    validity_days: int = 365,
    ca_pem: bytes | None = None,
    ca_key_pem: bytes | None = None,
    now: dt.datetime | None = None,
) -> TLSMaterial:
    """A server certificate for `names` (DNS names or IPs; the first is the CN), under a new or given CA."""
    if not names:
        raise ValueError("a server certificate needs at least one DNS name or IP address")
    now = now or dt.datetime.now(dt.UTC)
    if ca_pem and ca_key_pem:
        ca_cert = x509.load_pem_x509_certificate(ca_pem)
        ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise ValueError("the stored CA key is not an EC key; delete the TLS Secret to regenerate it")
    else:
        ca_cert, ca_key = _new_ca(f"geofed CA for {names[0]}", now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=validity_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return TLSMaterial(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_pem_key(key),
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        ca_key_pem=_pem_key(ca_key),
    )


def certificate_names(cert_pem: bytes) -> list[str]:
    """The DNS names and IPs a PEM certificate covers (to decide whether it must be re-issued)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [
        *san.get_values_for_type(x509.DNSName),
        *(str(ip) for ip in san.get_values_for_type(x509.IPAddress)),
    ]


def renewal_due(cert_pem: bytes, *, now: dt.datetime | None = None) -> bool:
    """True once a certificate is in the last third of its lifetime (or expired): re-issue it then.

    cert-manager renews at two thirds by default; the PS rolls once to serve the new certificate, so
    sites never meet an expired one while the old one is still trusted.
    """
    cert = x509.load_pem_x509_certificate(cert_pem)
    now = now or dt.datetime.now(dt.UTC)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= end - (end - start) / 3
