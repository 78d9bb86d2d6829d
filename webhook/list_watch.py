"""A generic list/watch of Kubernetes collections, kept apart from what is made of the objects
(does I/O: the API server, through the `kubernetes` client).

One thread per collection lists it in pages (`limit`/`continue`), hands the whole list over at
once, then watches from the list's resourceVersion with bookmarks and hands over each event. It
resumes from the last version seen when a stream ends or drops; relists on 410 Gone, whether it
comes as an ERROR event in the stream, as the HTTP status, or as a list's expired continue token;
waits as a 429's Retry-After says; and backs off on other errors, telling its owner when a
collection starts and stops failing. A collection marked optional that is not served (404) or not
granted (403) is handed over as absent and asked about again every `optional_retry_seconds`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from scoring.cluster.objects import as_dict, as_list

log = logging.getLogger("gpu_balancer.webhook.cluster")

MAX_RETRY_AFTER_SECONDS = 60.0
"""The longest a Retry-After is honoured: a longer one (or a date) waits this long."""

Lister = Callable[..., Any]
"""A `kubernetes` client list call (`list_node`, …) taking `_preload_content=False` and its kwargs."""


class Gone(Exception):
    """The resourceVersion is too old (410): relist."""


class Owner(Protocol):
    """What a list/watch hands its objects and its troubles to (called from its threads)."""

    def on_list(self, kind: str, objects: list[dict[str, Any]]) -> None:
        """A full list: the collection is these objects now."""

    def on_event(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED event."""

    def on_failing(self, kind: str, error: Exception | None) -> None:
        """The collection could not be read (`error`), or can again (None)."""

    def on_absent(self, kind: str, why: str) -> None:
        """An optional collection this cluster does not serve or grant."""


def retry_after(error: ApiException, fallback: float) -> float:
    """The seconds a 429's Retry-After asks for (at most `MAX_RETRY_AFTER_SECONDS`), else `fallback`."""
    value = (getattr(error, "headers", None) or {}).get("Retry-After", "")
    try:
        return min(MAX_RETRY_AFTER_SECONDS, max(0.0, float(value)))
    except (TypeError, ValueError):
        return fallback if not value else MAX_RETRY_AFTER_SECONDS


class ListWatch:
    def __init__(self, listers: dict[str, Lister], owner: Owner, *, optional: Sequence[str] = (),
                 shape: Callable[[dict[str, Any]], dict[str, Any]] = lambda obj: obj, page_size: int = 500,
                 watch_seconds: int = 300, request_timeout: float = 30.0, backoff: tuple[float, float] = (0.5, 30.0),
                 optional_retry_seconds: float = 300.0) -> None:
        self._listers, self._owner, self._optional, self._shape = listers, owner, set(optional), shape
        self._page, self._watch_seconds, self._timeout = page_size, watch_seconds, request_timeout
        self._backoff, self._optional_retry = backoff, optional_retry_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.relists = Counter(dict.fromkeys(listers, 0))
        """Lists made, by kind: the first, and one after each 410 Gone (keys fixed: read by /metrics)."""

    def start(self) -> None:
        for kind in self._listers:
            thread = threading.Thread(target=self._run, args=(kind,), name=f"watch-{kind}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _run(self, kind: str) -> None:
        delay = self._backoff[0]
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list(kind)
                    self._owner.on_failing(kind, None)
                version = self._watch(kind, version)
                delay = self._backoff[0]
            except Exception as error:  # noqa: BLE001 - any failure: back off and resume, never die
                status = error.status if isinstance(error, ApiException) else None
                if isinstance(error, Gone) or status == 410:
                    log.info("%s watch: resourceVersion %s expired (410 Gone): relisting", kind, version)
                    version = None
                    continue
                if status == 429:
                    # API priority and fairness: wait as told, then go on from where it stood.
                    wait = retry_after(error, delay)
                    log.info("%s: the API server asks to slow down (429); retrying in %.0f s", kind, wait)
                    self._stop.wait(wait)
                    delay = min(self._backoff[1], delay * 2)
                    continue
                if kind in self._optional and status in (403, 404):
                    self._owner.on_absent(kind, "not served by this cluster" if status == 404 else "not granted")
                    version = None
                    self._stop.wait(self._optional_retry)
                    continue
                self._owner.on_failing(kind, error)
                self._stop.wait(delay)
                delay = min(self._backoff[1], delay * 2)

    def _call(self, kind: str, **kwargs: Any) -> Any:
        return self._listers[kind](_preload_content=False, **kwargs)

    def _list(self, kind: str) -> str:
        """List every page, then hand the whole list over at once; returns the list's version."""
        token: str | None = None
        objects: list[dict[str, Any]] = []
        while True:
            response = self._call(kind, limit=self._page, _continue=token, _request_timeout=self._timeout)
            try:
                document = json.loads(response.data)
            except ValueError:
                raise RuntimeError(f"{kind} list: the API answered something that is not JSON") from None
            # Shaped page by page: one page of whole objects is held at a time, not the list.
            objects.extend(self._shape(o) for o in as_list(document.get("items")) if isinstance(o, dict))
            metadata = as_dict(document.get("metadata"))
            token = metadata.get("continue") or None
            if token is None:
                version = str(metadata.get("resourceVersion", ""))
                break
        self._owner.on_list(kind, objects)
        self.relists[kind] += 1
        return version

    def _watch(self, kind: str, version: str) -> str:
        response = self._call(kind, watch=True, resource_version=version, allow_watch_bookmarks=True,
                              timeout_seconds=self._watch_seconds,
                              _request_timeout=(self._timeout, self._watch_seconds + self._timeout))
        self._owner.on_failing(kind, None)
        try:
            for event in _events(response):
                if self._stop.is_set():
                    break
                kind_of_event = event.get("type")
                obj = self._shape(as_dict(event.get("object")))
                if kind_of_event == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"{kind} watch error: {str(obj.get('message', obj))[:200]}")
                version = str(as_dict(obj.get("metadata")).get("resourceVersion", version))
                if kind_of_event != "BOOKMARK":
                    self._owner.on_event(kind, str(kind_of_event), obj)
        finally:
            response.release_conn()
        return version


def _events(response: Any) -> Iterator[dict[str, Any]]:
    for line in iter_resp_lines(response):
        try:
            event = json.loads(line)
        except ValueError:
            raise RuntimeError("watch stream sent a line that is not JSON") from None
        if isinstance(event, dict):
            yield event
