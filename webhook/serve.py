"""Run the webhook: policy, telemetry cache, app, and uvicorn over TLS with certificate reload (I/O)."""

from __future__ import annotations

import gc
import logging
import socket
import sys
from typing import Any

import uvicorn

from scoring.policy import BalancerPolicy
from webhook.app import create_app
from webhook.cache import SnapshotCache
from webhook.cluster_watch import cluster_watch_from_environment
from webhook.ledger import SteeringLedger
from webhook.metrics import WebhookMetrics, create_metrics
from webhook.refresher import ChildProcessReader
from webhook.tls import CertificateReloader, server_context


def tune_process_for_latency() -> None:
    """Call once the app is built, before serving. Hands the GIL over every millisecond (default
    5 ms), so the telemetry refresh thread delays an admission by about a millisecond at a time;
    and moves everything alive now (modules, classes, the app: never garbage) out of the
    collector's sight. A full collection here walks ~70,000 such objects in ~65 ms, stalling every
    admission in flight; frozen, it walks only the ledger's and the snapshot's data."""
    sys.setswitchinterval(0.001)
    gc.collect()
    gc.freeze()


def tls_server(app: Any, *, tls_cert: str, tls_key: str, host: str, port: int, log_level: str = "info",
               metrics: WebhookMetrics | None = None) -> tuple[uvicorn.Server, CertificateReloader]:
    """uvicorn serving `app` over TLS 1.2+, with a reloader for the certificate files."""
    config = uvicorn.Config(app, host=host, port=port, ssl_certfile=tls_cert, ssl_keyfile=tls_key,
                            log_level=log_level, access_log=False, timeout_graceful_shutdown=5)
    config.load()
    # Replace uvicorn's context with ours: TLS 1.2 at least, and one whose handshakes the
    # reloader can switch to a newer certificate.
    config.ssl = server_context(tls_cert, tls_key)
    reloader = CertificateReloader(config.ssl, tls_cert, tls_key)
    if metrics is not None:
        reloader.on_swap, reloader.on_reject = metrics.certificate_swaps.inc, metrics.certificate_rejections.inc
    return uvicorn.Server(config), reloader


def build_server(policy: BalancerPolicy, *, tls_cert: str, tls_key: str, host: str, port: int,
                 log_level: str = "info") -> tuple[uvicorn.Server, CertificateReloader]:
    metrics = create_metrics()
    ledger = SteeringLedger(policy.placement.settle_seconds, replica=f"{socket.gethostname()}-")
    cluster = cluster_watch_from_environment(policy.placement, on_binding=ledger.bind, on_release=ledger.unbind,
                                             on_state=lambda state: metrics.cluster_view_states.labels(state).inc())
    reader = ChildProcessReader(policy, on_restart=lambda reason: metrics.reader_restarts.labels(reason).inc())
    cache = SnapshotCache(reader, policy, on_error=lambda _error: metrics.telemetry_errors.inc(), on_stop=reader.close)
    limit = policy.telemetry.staleness_limit_seconds

    def liveness() -> str | None:
        failing = reader.failing_seconds()
        if failing > limit:
            return f"the telemetry reader has not answered for {failing:.0f}s (limit {limit:g}s)"
        return None

    app = create_app(policy, cache, metrics=metrics, liveness=liveness, ledger=ledger, cluster=cluster)
    try:
        return tls_server(app, tls_cert=tls_cert, tls_key=tls_key, host=host, port=port, log_level=log_level,
                          metrics=metrics)
    except BaseException:
        reader.close()  # a server that cannot start must not leave its reader process behind
        raise


def serve(policy: BalancerPolicy, *, tls_cert: str, tls_key: str, host: str = "0.0.0.0", port: int = 8443) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server, reloader = build_server(policy, tls_cert=tls_cert, tls_key=tls_key, host=host, port=port)
    tune_process_for_latency()
    reloader.start()
    try:
        server.run()
    finally:
        reloader.stop()
    return 0
