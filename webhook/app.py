"""The webhook's ASGI app: HTTP edges only — read the body, call `decide`, map errors to 4xx (does I/O)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scoring.advice.readiness import startup_costs
from scoring.policy import BalancerPolicy
from webhook.admit import decide
from webhook.cache import SnapshotCache
from webhook.cluster_watch import ClusterWatch
from webhook.ledger import SteeringLedger
from webhook.refresh import hand_over
from webhook.metrics import WebhookMetrics, create_metrics, register_cluster_view_lists, register_node_verdicts
from webhook.review import MAX_BODY_BYTES, BodyTooLarge, ReviewError, build_response, decode_review, dump_json

log = logging.getLogger("gpu_balancer.webhook")


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


async def _read_bounded(scope: dict, receive: Callable, limit: int) -> bytes | None:
    """The request body, or None when the client went away; BodyTooLarge past `limit`."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge(f"body of {value.decode()} bytes exceeds the {limit}-byte limit")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body exceeds the {limit}-byte limit")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send: Callable, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})


class AdmissionFront:
    """`POST /mutate` answered in plain ASGI, every other path handed to the FastAPI app (health,
    readiness, metrics, the lifespan). The framework's middleware cost each admission about as
    much as the decision itself: a FastAPI null route serves 4–5k answers/s where a raw ASGI one
    serves 13–16k/s on the same stack (`bench/admission_mix.py`)."""

    def __init__(self, app: FastAPI, answer: Callable[[bytes], tuple[int, bytes]]) -> None:
        self.app = app
        self._answer = answer

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] != "/mutate":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _respond(send, 405, b'{"error": "POST an AdmissionReview"}', ((b"allow", b"POST"),))
            return
        try:
            body = await _read_bounded(scope, receive, MAX_BODY_BYTES)
        except BodyTooLarge as error:
            await _respond(send, 413, dump_json({"error": str(error)}))
            return
        if body is not None:
            await _respond(send, *self._answer(body))


def create_app(policy: BalancerPolicy, cache: SnapshotCache, *, metrics: WebhookMetrics | None = None,
               ledger: SteeringLedger | None = None, clock: Callable[[], datetime] = _utcnow,
               run_cache: bool = True, liveness: Callable[[], str | None] = lambda: None,
               cluster: ClusterWatch | None = None) -> AdmissionFront:
    """The webhook app. `cache` (and `cluster`, the cluster view's watch) are started and stopped
    with the app unless `run_cache` is False. `liveness` names why the process should be
    restarted (`/healthz` fails), or returns None."""
    metrics = metrics or create_metrics()
    ledger = ledger or SteeringLedger(policy.placement.settle_seconds)
    startup = startup_costs(policy)
    view = cluster.freeze if cluster is not None else (lambda: None)
    # Telemetry and the cluster view are taken together, off the request path, once per refresh.
    cache.on_refresh.append(lambda telemetry: hand_over(telemetry, view(), (ledger,)))
    metrics.cluster_view.set_function(lambda: 0.0 if ledger.view is None else 1.0)
    if cluster is not None:
        register_cluster_view_lists(metrics.registry, cluster.relists)

    def snapshot_age() -> float:
        current = cache.current
        return -1.0 if current is None else current.age_seconds(clock())

    metrics.snapshot_age.set_function(snapshot_age)
    register_node_verdicts(metrics.registry, lambda: cache.fresh(clock()))  # stale: no verdicts

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if run_cache:
            if cluster is not None:
                cluster.start()
            cache.start()
        yield
        if run_cache:
            cache.stop()
            if cluster is not None:
                cluster.stop()

    app = FastAPI(title="gpu-balancer webhook", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def answer(body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        try:
            admission = decode_review(body)
        except ReviewError as error:
            metrics.bad_requests.inc()
            return 400, dump_json({"error": str(error)})
        now = clock()
        fresh = cache.fresh(now)
        try:
            decision = decide(admission, index=fresh.index if fresh else None,
                              telemetry_time=fresh.sampled_at if fresh else None,
                              snapshot_age_seconds=fresh.age_seconds(now) if fresh else None,
                              ledger=ledger, policy=policy.placement, now=now,
                              claims=cluster.live_claims if cluster is not None else None, startup=startup)
        except Exception:  # noqa: BLE001 - a bug here must never block a pod
            log.exception("admission %s failed; admitting unchanged", admission.uid)
            metrics.admissions.labels("unchanged", "internal-error").inc()
            return 200, dump_json(build_response(admission.uid))
        metrics.admissions.labels(decision.outcome, decision.reason).inc()
        if fresh is not None and ledger.view is None and decision.outcome == "mutated":
            metrics.without_cluster_view.inc()
        metrics.latency.observe(time.perf_counter() - started)
        if decision.reason == "no-telemetry":
            log.info("admitted %s/%s without node steering: no fresh telemetry", admission.namespace, admission.uid)
        return 200, dump_json(decision.review)

    @app.get("/healthz")
    async def healthz() -> Response:
        # Liveness: only what a restart can mend. Readiness never fails, admissions are always safe.
        problem = liveness()
        return PlainTextResponse("ok") if problem is None else PlainTextResponse(problem, status_code=503)

    @app.get("/readyz")
    async def readyz() -> Response:
        # Ready as soon as admissions can be answered; telemetry only changes what they say.
        state = "fresh" if cache.fresh(clock()) else ("stale" if cache.current else "none")
        return JSONResponse({"ready": True, "telemetry": state, "last_error": cache.last_error})

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return AdmissionFront(app, answer)
