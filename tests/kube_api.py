"""A stateful stand-in for the kube-apiserver's list/watch of Namespaces, Nodes and Pods, of DRA's
ResourceSlices, ResourceClaims and ResourceClaimTemplates (`resource.k8s.io/v1`), and of
HorizontalPodAutoscalers (`autoscaling/v2`), on loopback (test I/O).

What the cluster view relies on, served the API server's way: resourceVersions from one counter,
paginated lists (`limit`/`continue`) whose continue token expires (410, reason Expired) once the
history it was cut from is compacted, watches from a resourceVersion with BOOKMARK events, 410
Gone for a version older than the compacted history (as an ERROR event in a 200 stream, or, as
some API servers and proxies do, as the HTTP status), field selectors of the `a=b` / `a!=b` kind
with ADDED for an object entering the selector and DELETED for one leaving it, 429 Too Many
Requests with Retry-After (API priority and fairness), and, for tests, 403 for everything, 404
for the DRA API (a cluster without it) or a watch that drops mid-stream.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

DRA = "/apis/resource.k8s.io/v1/"
PATHS = {"/api/v1/namespaces": "namespaces", "/api/v1/nodes": "nodes", "/api/v1/pods": "pods", DRA + "resourceslices": "resourceslices",
         DRA + "resourceclaims": "resourceclaims", DRA + "resourceclaimtemplates": "resourceclaimtemplates",
         "/apis/autoscaling/v2/horizontalpodautoscalers": "horizontalpodautoscalers"}
CLUSTER_SCOPED = ("namespaces", "nodes", "resourceslices")
KINDS = {"namespaces": "Namespace", "nodes": "Node", "pods": "Pod", "resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim",
         "resourceclaimtemplates": "ResourceClaimTemplate", "horizontalpodautoscalers": "HorizontalPodAutoscaler"}


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _selected(obj: dict[str, Any], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key) == value:
                return False
        else:
            key, value = term.split("=", 1)
            if _field(obj, key.rstrip("=")) != value:
                return False
    return True


class KubeApi:
    """Objects and their event history; every change bumps the one resourceVersion counter."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in PATHS.values()}
        self.serves_dra = True
        """False: the DRA paths answer 404, as on a cluster that does not serve resource.k8s.io/v1."""
        self.serves_autoscaling = True
        """False: the HPA path answers 404 (as a role without the grant would answer 403)."""
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self.version = 100
        self.compacted = 0
        self.forbidden = False
        self.drop_watch_after: int | None = None
        """Close the next watch stream after this many events, without ending it cleanly."""
        self.gone_as_status = False
        """True: a watch from a compacted version answers HTTP 410, not an ERROR event."""
        self.throttle_next = 0
        """Answer this many of the next requests 429 Too Many Requests, with `Retry-After`."""
        self.retry_after_seconds = 1
        self.compact_before_next_page = False
        """Compact once, just before answering the next list page asked with a continue token."""
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.requests_at: list[float] = []
        """`time.monotonic()` of each request, beside `requests`."""
        self.changed = threading.Condition()
        self.generation = 0

    def _key(self, kind: str, obj: dict[str, Any]) -> str:
        metadata = obj["metadata"]
        return metadata["name"] if kind in CLUSTER_SCOPED else f"{metadata.get('namespace', 'default')}/{metadata['name']}"

    def put(self, kind: str, obj: dict[str, Any]) -> None:
        with self.changed:
            self.version += 1
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
            key = self._key(kind, obj)
            event = "MODIFIED" if key in self.objects[kind] else "ADDED"
            self.objects[kind][key] = obj
            self.history.append((self.version, kind, event, obj))
            self.changed.notify_all()

    def delete(self, kind: str, key: str) -> None:
        with self.changed:
            self.version += 1
            obj = copy.deepcopy(self.objects[kind].pop(key))
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.history.append((self.version, kind, "DELETED", obj))
            self.changed.notify_all()

    def compact(self) -> None:
        """Forget the history so far and end open watches, as if they had fallen behind a
        compaction: a watch resumed from any version up to now gets 410 Gone."""
        with self.changed:
            # etcd compacts at a revision: older ones are gone, a list made now is served from it.
            self.version += 1
            self.compacted = self.version
            self.history.clear()
            self.generation += 1
            self.changed.notify_all()

    def bookmark(self) -> None:
        """Advance the version without a change, so open watches send a BOOKMARK."""
        with self.changed:
            self.version += 1
            self.history.append((self.version, "*", "BOOKMARK", {}))
            self.changed.notify_all()


def _handler(api: KubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            query = parse_qs(url.query)
            api.requests.append((url.path, query))
            api.requests_at.append(time.monotonic())
            kind = PATHS.get(url.path)
            if kind is None or (url.path.startswith(DRA) and not api.serves_dra) or \
                    (kind == "horizontalpodautoscalers" and not api.serves_autoscaling):
                return self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            with api.changed:
                throttled = api.throttle_next > 0
                api.throttle_next -= throttled
            if throttled:
                return self._send(429, {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                                        "message": "Too many requests, please try again later."},
                                  {"Retry-After": str(api.retry_after_seconds)})
            if api.forbidden:
                return self._send(403, {"kind": "Status", "code": 403, "reason": "Forbidden",
                                        "message": f"{kind} is forbidden: User cannot list resource"})
            selector = query.get("fieldSelector", [""])[0]
            if query.get("watch", [""])[0] in ("true", "1", "True"):
                return self._watch(kind, query, selector)
            return self._list(kind, query, selector)

        def _list(self, kind: str, query: dict[str, list[str]], selector: str) -> None:
            with api.changed:
                items = [o for _, o in sorted(api.objects[kind].items()) if _selected(o, selector)]
                version = api.version
            limit = int(query.get("limit", ["0"])[0] or 0)
            token = query.get("continue", [""])[0]
            if token and api.compact_before_next_page:
                api.compact_before_next_page = False
                api.compact()
            if token and int(token.split(":")[0]) < api.compacted:
                return self._send(410, {"kind": "Status", "code": 410, "reason": "Expired", "message": (
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter.")})
            start = int(token.split(":")[1]) if token else 0
            page = items[start:start + limit] if limit else items[start:]
            metadata: dict[str, Any] = {"resourceVersion": token.split(":")[0] if token else str(version)}
            if limit and start + limit < len(items):
                metadata["continue"] = f"{metadata['resourceVersion']}:{start + limit}"
            self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": page})

        def _watch(self, kind: str, query: dict[str, list[str]], selector: str) -> None:
            since = int(query.get("resourceVersion", ["0"])[0] or 0)
            deadline = time.monotonic() + float(query.get("timeoutSeconds", ["30"])[0])
            bookmarks = query.get("allowWatchBookmarks", [""])[0] in ("true", "True", "1")
            if since < api.compacted and api.gone_as_status:
                return self._send(410, {"kind": "Status", "code": 410, "reason": "Expired",
                                        "message": f"too old resource version: {since}"})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            drop_after, api.drop_watch_after = api.drop_watch_after, None
            sent = 0
            with api.changed:  # objects leaving the selector are sent as DELETED, as the API server does
                visible = {api._key(kind, o) for o in api.objects[kind].values() if _selected(o, selector)}

            def write(event: dict[str, Any]) -> None:
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            generation = api.generation
            if since < api.compacted:
                write({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                   "message": f"too old resource version: {since}"}})
            else:
                while time.monotonic() < deadline and api.generation == generation:
                    with api.changed:
                        events = [e for e in api.history if e[0] > since and e[1] in (kind, "*")]
                        if not events:
                            api.changed.wait(0.05)
                            continue
                    for version, _, event, obj in events:
                        since = version
                        if event == "BOOKMARK":
                            if bookmarks:
                                write({"type": "BOOKMARK", "object": {"kind": KINDS[kind], "metadata": {
                                    "resourceVersion": str(version)}}})
                            continue
                        key = api._key(kind, obj)
                        if not _selected(obj, selector):
                            if key not in visible:
                                continue
                            event = "DELETED"
                        elif key not in visible and event == "MODIFIED":
                            event = "ADDED"  # it entered the selector
                        visible.discard(key) if event == "DELETED" else visible.add(key)
                        write({"type": event, "object": obj})
                        sent += 1
                        if drop_after is not None and sent >= drop_after:
                            self.close_connection = True
                            self.connection.shutdown(2)  # mid-stream: no final chunk
                            return
            self.wfile.write(b"0\r\n\r\n")

    return Handler


def serve(api: KubeApi) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"
