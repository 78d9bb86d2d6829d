"""The webhook's cluster view: Nodes and Pods, DRA's ResourceSlices, ResourceClaims and
ResourceClaimTemplates, and HorizontalPodAutoscalers, kept to what placement needs and frozen into
a `ClusterView` on each refresh (I/O through `webhook.list_watch`, which lists and watches them).

One background thread per kind (`webhook.list_watch.ListWatch`), never on the admission path:
listed in pages, then watched with bookmarks, relisted on 410 Gone, slowed by 429s, backed off on
errors. What it hands over is reduced by `scoring.cluster.cluster_state.ClusterState` (pure), under this
module's lock; this module adds whether the view can be trusted. Pods are listed bound and
non-terminal only (a field selector), so a pod's binding arrives as its first event; each binding
is handed to `on_binding` (the ledger).

Without API access (403, API down) `freeze` returns None and the webhook advises on telemetry
alone; each change of state is logged once and counted. The DRA kinds and HPAs are optional: where
the cluster does not serve `resource.k8s.io/v1` (404) or the role does not grant them (403), they
count as empty, which is logged once, and the view goes on with Nodes and Pods.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scoring.cluster.claims import ClaimBook
from scoring.cluster.cluster_state import ClusterState
from scoring.cluster.images import large_images
from scoring.cluster.objects import as_dict, as_list
from scoring.cluster.view import BOOKING_ANNOTATION, Binding, ClusterView
from scoring.policy import PlacementPolicy
from webhook.list_watch import ListWatch

log = logging.getLogger("gpu_balancer.webhook.cluster")

BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""Pods that hold resources: the scheduler counts a pod from its binding until it ends."""

CORE_KINDS = ("nodes", "pods")
DRA_KINDS = ("resourceslices", "resourceclaims", "resourceclaimtemplates")
"""Optional: a cluster without DRA (or a role without these grants) still has a view."""
OPTIONAL_KINDS = DRA_KINDS + ("horizontalpodautoscalers",)
"""A cluster without HPAs (or a role that cannot read them) still has a view."""
_WITHOUT = {**dict.fromkeys(DRA_KINDS, "DRA pods claiming through them are not counted"),
            "horizontalpodautoscalers": "no pod is judged urgent by its autoscaler"}
"""What each optional kind counted as empty costs the advice."""
OPTIONAL_RETRY_SECONDS = 300.0
"""How often an absent optional API (404) or grant (403) is asked about again."""


# What the view never reads of a node (or a DRA object) and a real API server sends with it.
_UNREAD_NODE_FIELDS = (("metadata", "managedFields"), ("status", "volumesAttached"), ("status", "volumesInUse"))


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """What the view reads of an object, and no more: a real API server's pod is ~5 KB of JSON
    (managed fields, statuses, defaults), ~15 KiB parsed, and a list of 16,000 held until its last
    page cost hundreds of MB (bench/control_plane_scale.py). A pod keeps its name, namespace,
    creation time, booking annotation, node, containers' resources, claims, phase and scheduled
    time; other kinds
    lose their managed fields (a node its small images too: only those a time to ready turns on)."""
    metadata, spec, status = as_dict(obj.get("metadata")), as_dict(obj.get("spec")), as_dict(obj.get("status"))
    if "containers" not in spec:  # not a pod
        for part, key in _UNREAD_NODE_FIELDS:
            as_dict(obj.get(part)).pop(key, None)
        if "images" in status:
            status["images"] = large_images(status["images"])
        return obj
    booking = as_dict(metadata.get("annotations")).get(BOOKING_ANNOTATION)
    kept_metadata = {key: metadata[key] for key in ("name", "namespace", "resourceVersion", "creationTimestamp")
                     if key in metadata}
    if booking is not None:
        kept_metadata["annotations"] = {BOOKING_ANNOTATION: booking}
    kept_spec: dict[str, Any] = {key: spec[key] for key in ("nodeName", "resourceClaims") if key in spec}
    for field_name in ("containers", "initContainers"):
        if field_name in spec:
            kept_spec[field_name] = [{key: c[key] for key in ("name", "resources", "restartPolicy") if key in c}
                                     for c in as_list(spec[field_name]) if isinstance(c, dict)]
    kept_status: dict[str, Any] = {key: status[key] for key in ("phase", "resourceClaimStatuses") if key in status}
    scheduled = [c for c in as_list(status.get("conditions"))
                 if isinstance(c, dict) and c.get("type") == "PodScheduled"]
    if scheduled:
        kept_status["conditions"] = scheduled
    return {"metadata": kept_metadata, "spec": kept_spec, "status": kept_status}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class ClusterWatch:
    def __init__(self, api: client.ApiClient, policy: PlacementPolicy, *,
                 on_binding: Callable[[Binding], None] = lambda binding: None,
                 on_release: Callable[[str], None] = lambda pod: None,
                 on_state: Callable[[str], None] = lambda state: None,
                 clock: Callable[[], datetime] = _utcnow, page_size: int = 500, watch_seconds: int = 300,
                 request_timeout: float = 30.0, backoff: tuple[float, float] = (0.5, 30.0),
                 grace_seconds: float = 60.0, recent_seconds: float = 120.0) -> None:
        self._on_state = on_state
        self._clock = clock
        self._grace = timedelta(seconds=grace_seconds)
        self._lock = threading.Lock()
        self._cluster = ClusterState(policy, on_binding=on_binding, on_release=on_release,
                                     recent_seconds=recent_seconds)
        kinds = CORE_KINDS + OPTIONAL_KINDS
        self._synced = dict.fromkeys(kinds, False)
        self._failing_since: dict[str, datetime | None] = dict.fromkeys(kinds)
        self.absent: dict[str, str] = {}
        """Optional kinds counted as empty, and why (not served, not granted)."""
        self._state = "starting"
        self._frozen: ClusterView | None = None
        self._dirty = True
        core, resource, autoscaling = client.CoreV1Api(api), client.ResourceV1Api(api), client.AutoscalingV2Api(api)

        def bound_pods(**kwargs: Any) -> Any:
            return core.list_pod_for_all_namespaces(field_selector=BOUND_PODS, **kwargs)

        self._list_watch = ListWatch(
            {"nodes": core.list_node, "pods": bound_pods, "resourceslices": resource.list_resource_slice,
             "resourceclaims": resource.list_resource_claim_for_all_namespaces,
             "resourceclaimtemplates": resource.list_resource_claim_template_for_all_namespaces,
             "horizontalpodautoscalers": autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces},
            self, optional=OPTIONAL_KINDS, shape=slim, page_size=page_size, watch_seconds=watch_seconds,
            request_timeout=request_timeout, backoff=backoff, optional_retry_seconds=OPTIONAL_RETRY_SECONDS)

    # -- the view -----------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """"starting", "ok", "forbidden" or "unreachable"."""
        return self._state

    @property
    def live_claims(self) -> ClaimBook:
        """The claims and templates as last seen, for admissions to look a pod's claims up in
        before any view is frozen. Read by key only (one dict lookup is atomic), never iterated."""
        return self._cluster.live_claims

    def freeze(self) -> ClusterView | None:
        """The current view, or None while it cannot be trusted (not listed yet, or the API has
        failed for longer than the grace period)."""
        now = self._clock()
        with self._lock:
            if not all(self._synced.values()):
                return None
            if any(since is not None and now - since > self._grace for since in self._failing_since.values()):
                return None
            if self._dirty or self._frozen is None:
                self._frozen = self._cluster.view(now)
                self._dirty = False
            return self._frozen

    # -- running (the list/watch is `webhook.list_watch`; these are its callbacks) -----------

    def start(self) -> None:
        self._list_watch.start()

    def stop(self) -> None:
        self._list_watch.stop()

    @property
    def relists(self) -> Counter:
        """Lists made, by kind: the first, and one after each 410 Gone (keys fixed: read by /metrics)."""
        return self._list_watch.relists

    def on_list(self, kind: str, objects: list[dict[str, Any]]) -> None:
        """Replace the kind's state at once with a full list."""
        now = self._clock()
        with self._lock:
            self._cluster.replace(kind, objects, now)
            self.absent.pop(kind, None)
            self._synced[kind] = True
            self._dirty = True

    def on_event(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._cluster.apply(kind, event, obj, self._clock())
            self._dirty = True

    def on_absent(self, kind: str, why: str) -> None:
        with self._lock:
            if self.absent.get(kind) != why:
                log.warning("cluster view: %s %s; %s", kind, why, _WITHOUT[kind])
            self.absent[kind] = why
            self._cluster.clear(kind)
            self._synced[kind] = True
            self._failing_since[kind] = None
            self._dirty = True

    def on_failing(self, kind: str, error: Exception | None) -> None:
        with self._lock:
            self._failing_since[kind] = None if error is None else (self._failing_since[kind] or self._clock())
            if error is None:
                state = "ok" if all(since is None for since in self._failing_since.values()) else self._state
            elif isinstance(error, ApiException) and error.status in (401, 403):
                state = "forbidden"
            else:
                state = "unreachable"
        if state != self._state:
            self._state = state
            if error is None:
                log.info("cluster view: API access restored; advice uses the cluster view again")
            else:
                log.warning("cluster view: %s (%s); advising on telemetry alone until it recovers",
                            state, str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__)
            self._on_state(state)


def cluster_watch_from_environment(policy: PlacementPolicy, **options: Any) -> ClusterWatch | None:
    """A watch with the in-cluster ServiceAccount, else $KUBECONFIG; None (telemetry-only advice,
    logged) when neither is there or it cannot be loaded."""
    from kubernetes import config

    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
        elif os.environ.get("KUBECONFIG"):
            configuration = client.Configuration()
            config.load_kube_config(client_configuration=configuration)
        else:
            log.warning("cluster view off: no in-cluster ServiceAccount and no $KUBECONFIG; advising on telemetry alone")
            return None
    except (config.ConfigException, OSError) as error:
        log.warning("cluster view off: cannot load the Kubernetes configuration (%s); advising on telemetry alone",
                    error)
        return None
    api = client.ApiClient(configuration)
    return ClusterWatch(api, policy, **options)
