"""Decide whether the webhook's CA and serving certificate are kept or renewed. Pure, no I/O.

Renewal happens when less than a third of a certificate's lifetime remains. The CA is kept while
it is valid so that serving certificates it signed keep verifying; when it is replaced, the old
CA stays in the caBundle until it expires, so old and new serving certificates both verify
during the hand-over.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from certs.issue import Issued, issue_ca, issue_serving, service_dns_names

RENEW_WHEN_REMAINING = 1 / 3


@dataclass(frozen=True)
class Bundle:
    ca: Issued
    serving: Issued
    ca_bundle: bytes
    """PEM of the current CA, followed by the previous one while it is still valid."""
    changes: tuple[str, ...]
    """What was renewed, e.g. ("new CA", "new serving certificate"); empty when nothing was."""

    def secret_data(self) -> dict[str, bytes]:
        return {"ca.crt": self.ca.certificate_pem, "ca.key": self.ca.key_pem, "ca-bundle.crt": self.ca_bundle,
                "tls.crt": self.serving.certificate_pem, "tls.key": self.serving.key_pem}


def needs_renewal(certificate: x509.Certificate, now: datetime) -> bool:
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    return certificate.not_valid_after_utc - now < lifetime * RENEW_WHEN_REMAINING


def load_issued(certificate_pem: bytes | None, key_pem: bytes | None) -> Issued | None:
    """A certificate and its key, or None when either is missing, unreadable or they do not match."""
    if not certificate_pem or not key_pem:
        return None
    try:
        certificate = x509.load_pem_x509_certificate(certificate_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError:
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != certificate.public_key():
        return None
    return Issued(certificate, key)


def _signed_by(certificate: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names(certificate: x509.Certificate) -> set[str]:
    try:
        return set(certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                   .get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        return set()


def plan_bundle(existing: dict[str, bytes] | None, *, service: str, namespace: str, now: datetime) -> Bundle:
    existing = existing or {}
    changes: list[str] = []
    ca = load_issued(existing.get("ca.crt"), existing.get("ca.key"))
    previous_ca = ca
    if ca is None or needs_renewal(ca.certificate, now):
        ca = issue_ca(now=now)
        changes.append("new CA")
    serving = load_issued(existing.get("tls.crt"), existing.get("tls.key"))
    wanted = set(service_dns_names(service, namespace))
    if (serving is None or needs_renewal(serving.certificate, now) or not _signed_by(serving.certificate, ca.certificate)
            or not wanted <= _names(serving.certificate)):
        serving = issue_serving(ca, service_dns_names(service, namespace), now=now)
        changes.append("new serving certificate")
    ca_bundle = ca.certificate_pem
    if previous_ca is not None and previous_ca.certificate != ca.certificate \
            and previous_ca.certificate.not_valid_after_utc > now:
        ca_bundle += previous_ca.certificate_pem
    if existing.get("ca-bundle.crt") != ca_bundle and not changes:
        changes.append("caBundle")
    return Bundle(ca, serving, ca_bundle, tuple(changes))
