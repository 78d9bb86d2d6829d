"""TLS for the webhook: a TLS 1.2+ server context whose handshakes switch to a new certificate
when its files change, without a failed handshake.

Does file I/O. A new pair is loaded into a fresh context and checked (key matches, certificate
valid now) before any handshake sees it; the served context's `sni_callback` then hands each new
handshake the current context, so the switch is one reference assignment. The context being served
is never reloaded in place: between setting its certificate and its key, or when a torn rotation
leaves a certificate beside the old key, it would briefly hold a certificate without its key.
A Secret volume rotates files by swapping a symlink, so the watcher compares the resolved files'
identity (inode, size, mtime) rather than trusting a single mtime.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from cryptography import x509

log = logging.getLogger("gpu_balancer.webhook.tls")

FileIdentity = tuple[tuple[int, int, int], ...]


class CertificateRejected(ValueError):
    """The files do not form a pair that may serve: key and certificate differ, or it is not valid now."""


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def checked_context(cert_file: str, key_file: str, *, now: datetime) -> ssl.SSLContext:
    """A fresh server context for the pair, or `CertificateRejected` saying why it may not serve."""
    try:
        certificate = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
    except (OSError, ValueError) as error:
        raise CertificateRejected(f"cannot read certificate {cert_file}: {error}") from None
    if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
        raise CertificateRejected(f"certificate {cert_file} is valid only from {certificate.not_valid_before_utc} "
                                  f"to {certificate.not_valid_after_utc}")
    try:
        return server_context(cert_file, key_file)
    except (ssl.SSLError, OSError) as error:
        raise CertificateRejected(f"certificate {cert_file} and key {key_file} do not form a pair: {error}") from None


def _identity(path: str) -> tuple[int, int, int]:
    info = os.stat(path)  # follows symlinks: the ..data swap of a Secret volume changes this
    return info.st_ino, info.st_size, info.st_mtime_ns


class CertificateReloader:
    """Watches `cert_file`/`key_file` and switches new handshakes on `context` to each new pair
    that checks out; a pair that does not is ignored (logged once, counted) until it does, and the
    previous one keeps serving. Connections already open keep theirs."""

    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str, *, interval: float = 2.0,
                 on_swap: Callable[[], None] = lambda: None, on_reject: Callable[[], None] = lambda: None,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.cert_file, self.key_file, self.interval = cert_file, key_file, interval
        self.on_swap, self.on_reject, self._clock = on_swap, on_reject, clock
        self.current = context
        """The context new handshakes get; replaced whole, never changed in place."""
        context.sni_callback = self._choose
        self._seen = self._files_identity()
        self._rejected: FileIdentity | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reloads = 0
        self.rejections = 0

    def _choose(self, connection: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None,
                served: ssl.SSLContext) -> None:
        # Runs for every ClientHello, with or without SNI, before the certificate is chosen.
        current = self.current
        if current is not served:
            connection.context = current

    def _files_identity(self) -> FileIdentity | None:
        try:
            return _identity(self.cert_file), _identity(self.key_file)
        except OSError:
            return None

    def check_once(self) -> bool:
        """Switch to the files' pair if they changed and it checks out; True when it switched."""
        current = self._files_identity()
        if current is None or current == self._seen:
            return False
        try:
            context = checked_context(self.cert_file, self.key_file, now=self._clock())
        except CertificateRejected as error:
            # Mid-rotation the pair may not match yet: keep serving the old one, retry next tick.
            if current != self._rejected:
                self._rejected = current
                self.rejections += 1
                self.on_reject()
                log.warning("certificate files changed but are not taken (yet): %s", error)
            return False
        self.current = context
        self._seen, self._rejected = current, None
        self.reloads += 1
        self.on_swap()
        log.info("serving the new certificate from %s", self.cert_file)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.check_once()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cert-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
