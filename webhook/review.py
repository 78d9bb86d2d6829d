"""AdmissionReview (admission.k8s.io/v1) decoding and response building. Pure, no I/O.

Errors: `ReviewError` (the request body is not a usable AdmissionReview); the app maps it to a
4xx at the edge. A decoded review is always answered `allowed: true`: this webhook never denies.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import jsonpatch
import orjson

API_VERSION = "admission.k8s.io/v1"
MAX_BODY_BYTES = 3 * 1024 * 1024
"""The API server's own request limit is ~3 MB; anything larger is not from it."""
MAX_WARNING_CHARS = 120


class ReviewError(ValueError):
    """The body is not an AdmissionReview we can answer; the message says why (HTTP 400)."""


class BodyTooLarge(ReviewError):
    """The body exceeds `MAX_BODY_BYTES` (HTTP 413)."""


class ResponseStatus(TypedDict, total=False):
    code: int
    message: str


class AdmissionResponse(TypedDict, total=False):
    uid: str
    allowed: bool
    patchType: Literal["JSONPatch"]
    patch: str
    warnings: list[str]
    status: ResponseStatus


class AdmissionReviewOut(TypedDict):
    apiVersion: str
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    uid: str
    kind: str
    """The object's kind, e.g. "Pod"."""
    operation: str
    namespace: str
    obj: dict[str, Any] | None
    dry_run: bool


def dump_json(value: Any) -> bytes:
    """Compact JSON, by orjson on the hot path; the standard library for what orjson cannot
    encode (integers beyond 64 bits, which only the lenient decode below lets in)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def _decode_leniently(body: bytes) -> Any:
    """A body orjson refuses (NaN, Infinity, numbers beyond a double's range) that the standard
    library still reads: it decides, so nothing this webhook accepted before is turned away.
    An API server never sends such numbers; only hand-made reviews do."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:
        raise ReviewError(f"body is not valid JSON: {str(error)[:200]}") from None


def decode_review(body: bytes) -> AdmissionRequest:
    """Parse and check an AdmissionReview body."""
    if len(body) > MAX_BODY_BYTES:
        raise BodyTooLarge(f"body of {len(body)} bytes exceeds the {MAX_BODY_BYTES}-byte limit")
    try:
        review = orjson.loads(body)  # the hot path: several times faster than json.loads
    except orjson.JSONDecodeError:
        review = _decode_leniently(body)
    if not isinstance(review, dict):
        raise ReviewError("body must be a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected apiVersion {API_VERSION} and kind AdmissionReview")
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request: missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: missing or not a non-empty string")
    kind = request.get("kind", {})
    if not isinstance(kind, dict) or not isinstance(kind.get("kind", ""), str):
        raise ReviewError("request.kind: must be an object with a string kind")
    operation = request.get("operation", "")
    namespace = request.get("namespace", "")
    obj = request.get("object")
    if not isinstance(operation, str) or not isinstance(namespace, str):
        raise ReviewError("request.operation and request.namespace must be strings")
    if obj is not None and not isinstance(obj, dict):
        raise ReviewError("request.object: must be an object")
    return AdmissionRequest(uid=uid, kind=kind.get("kind", ""), operation=operation, namespace=namespace,
                            obj=obj, dry_run=request.get("dryRun") is True)


def pod_review(pod: dict[str, Any], *, uid: str | None = None) -> dict[str, Any]:
    """The AdmissionReview an API server sends for creating `pod` (for the simulator, `explain`
    and the demo, which put pods through the webhook as a cluster would)."""
    metadata = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": {
        "uid": uid or str(metadata.get("name", "pod")), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": str(metadata.get("namespace", "default")), "operation": "CREATE", "object": pod}}


def patched(obj: dict[str, Any], review: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` with the review's JSONPatch applied, as the API server applies it (a new object)."""
    patch = review.get("response", {}).get("patch")
    if not patch:
        return obj
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(patch)))


def build_response(uid: str, patch: list[dict] | None = None, warnings: tuple[str, ...] = ()) -> AdmissionReviewOut:
    """`allowed: true`, with the JSONPatch when there is one."""
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(dump_json(patch)).decode()
    if warnings:
        response["warnings"] = [w[:MAX_WARNING_CHARS] for w in warnings]
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
