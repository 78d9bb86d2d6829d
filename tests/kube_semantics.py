"""What the kube-apiserver answers where kmock's emulator has no rule of its own, computed from
state rather than scripted (test I/O, on loopback): the Eviction subresource from the
PodDisruptionBudget objects, and one object under optimistic concurrency (resourceVersion, 409).

Evictions. What the API server's eviction REST handler does (`pkg/registry/core/pod/storage/eviction.go`):
a pod that does not exist is 404; the PDBs in its namespace whose selector matches its labels are
found (an empty selector matches every pod, a missing one none); more than one is 500; one whose
`status.disruptionsAllowed` is below 1 refuses with 429 TooManyRequests; otherwise the budget's
`disruptionsAllowed` goes down by one and the pod is deleted (201). The disruption controller,
which recomputes the budget from the pods' readiness, is not modelled: the status stands as set.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import kmock


def status(code: int, reason: str, message: str) -> kmock.Response:
    return kmock.Response(status=code, payload={"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                                "code": code, "reason": reason, "message": message})


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or ():
        key, operator, values = term["key"], term["operator"], term.get("values") or []
        if not {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[operator]:
            return False
    return True


def _live(emulator: Any, plural: str, namespace: str) -> dict[str, Any]:
    return {name: obj for (resource, ns, name), obj in emulator.objects.items()
            if resource.plural == plural and ns == namespace and not obj.deleted}


def evict(emulator: Any, namespace: str, name: str) -> kmock.Response:
    """The API server's answer to an Eviction of `namespace/name`, with its effects applied."""
    pod = _live(emulator, "pods", namespace).get(name)
    if pod is None:
        return status(404, "NotFound", f'pods "{name}" not found')
    labels = (pod.raw.get("metadata") or {}).get("labels") or {}
    budgets = [obj for obj in _live(emulator, "poddisruptionbudgets", namespace).values()
               if _matches((obj.raw.get("spec") or {}).get("selector"), labels)]
    if len(budgets) > 1:
        return status(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the eviction "
                                            "subresource does not support.")
    if budgets:
        budget = budgets[0]
        allowed = int((budget.raw.get("status") or {}).get("disruptionsAllowed", 0))
        if allowed < 1:
            return status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        budget.patch({"status": {"disruptionsAllowed": allowed - 1}})
    pod.delete()
    return kmock.Response(status=201, payload={"apiVersion": "v1", "kind": "Status", "status": "Success"})


def serve_evictions(emulator: Any, namespace: str, pods: list[str]) -> None:
    """Answer every Eviction of these pods as the API server would, from the emulator's objects."""
    for name in pods:
        emulator[f"post /api/v1/namespaces/{namespace}/pods/{name}/eviction"] << (
            lambda request, name=name: evict(emulator, namespace, name))


class GuardedObject:
    """One namespaced object (a ConfigMap) served as the API server serves it, apart from kmock's
    store: every write bumps its resourceVersion; a write that names an older resourceVersion is
    409 Conflict and changes nothing; a create of an existing object is 409 AlreadyExists; GET is
    404 until it exists. Patches are JSON merge patches (what `patch_namespaced_config_map` with
    a dict sends), so a write naming no resourceVersion overwrites, as the real server lets it."""

    def __init__(self, emulator: Any, *, namespace: str, plural: str, name: str, kind: str) -> None:
        self.body: dict[str, Any] | None = None
        self.version = 0
        self.writes = 0
        self._lock = threading.Lock()
        self._kind = kind
        path = f"/api/v1/namespaces/{namespace}/{plural}"
        emulator[f"get {path}/{name}"] << self._get
        emulator[f"patch {path}/{name}"] << self._patch
        emulator[f"post {path}"] << self._create

    def _get(self, request: Any) -> kmock.Response:
        with self._lock:
            if self.body is None:
                return status(404, "NotFound", f"{self._kind} not found")
            return kmock.Response(status=200, payload=copy.deepcopy(self.body))

    def _create(self, request: Any) -> kmock.Response:
        with self._lock:
            if self.body is not None:
                return status(409, "AlreadyExists", f"{self._kind} already exists")
            return self._store(_body(request), created=True)

    def _patch(self, request: Any) -> kmock.Response:
        with self._lock:
            if self.body is None:
                return status(404, "NotFound", f"{self._kind} not found")
            patch = _body(request)
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != self.body["metadata"]["resourceVersion"]:
                return status(409, "Conflict", "Operation cannot be fulfilled: the object has been modified; "
                                               "please apply your changes to the latest version and try again")
            return self._store(_merged(self.body, patch))

    def _store(self, body: dict[str, Any], created: bool = False) -> kmock.Response:
        self.version += 1
        self.writes += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        body.setdefault("kind", self._kind)
        body.setdefault("apiVersion", "v1")
        self.body = body
        return kmock.Response(status=201 if created else 200, payload=copy.deepcopy(body))


def _body(request: Any) -> dict[str, Any]:
    data = request.data
    return copy.deepcopy(data if isinstance(data, dict) else json.loads(data or "{}"))


def _merged(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
