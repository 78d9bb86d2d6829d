"""TLS for the webhook: a TLS 1.2+ server context whose certificate reloads when its files change.

Does file I/O. A Secret volume rotates files by swapping a symlink, so the watcher compares the
resolved files' identity (inode, size, mtime) rather than trusting a single mtime.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading

log = logging.getLogger("gpu_balancer.webhook.tls")


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def _identity(path: str) -> tuple[int, int, int]:
    info = os.stat(path)  # follows symlinks: the ..data swap of a Secret volume changes this
    return info.st_ino, info.st_size, info.st_mtime_ns


class CertificateReloader:
    """Re-loads `cert_file`/`key_file` into `context` when they change. New handshakes get the new
    certificate; connections already open keep theirs; no request is dropped."""

    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str, *, interval: float = 2.0) -> None:
        self.context, self.cert_file, self.key_file, self.interval = context, cert_file, key_file, interval
        self._seen = self._files_identity()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reloads = 0

    def _files_identity(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            return _identity(self.cert_file), _identity(self.key_file)
        except OSError:
            return None

    def check_once(self) -> bool:
        """Reload if the files changed and form a valid pair; True when a reload happened."""
        current = self._files_identity()
        if current is None or current == self._seen:
            return False
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as error:
            # Mid-rotation the pair may not match yet: keep serving the old one, retry next tick.
            log.warning("certificate files changed but could not be loaded yet: %s", error)
            return False
        self._seen = current
        self.reloads += 1
        log.info("reloaded serving certificate from %s", self.cert_file)
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
