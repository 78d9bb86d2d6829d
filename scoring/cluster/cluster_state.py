"""The cluster as placement needs it, kept from Kubernetes objects: nodes, bound pods, DRA's
ResourceSlices, ResourceClaims and ResourceClaimTemplates, and HorizontalPodAutoscalers, reduced to
what placement reads and frozen into a `ClusterView` on demand. Pure, no I/O: the webhook's watch
(`webhook.cluster_watch`) feeds it what its list/watch hands over; anything else that holds the
objects can feed it too.

Pods count by `scoring.cluster.holdings`' rule; each pod seen bound is handed to `on_binding` (recent
bindings only when a full list replaces the pods: a pod bound long ago shows in telemetry
already), and each pod seen gone to `on_release`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from scoring.cluster.autoscalers import load_ratio, scaled_workload
from scoring.cluster.claims import (ClaimBook, ClaimNeed, DeviceInventory, HeldDevices, PublishedSlice,
                                    allocated_devices, inventory_from_slices, pod_claims, published_slice,
                                    resource_claim_need, template_need)
from scoring.cluster.feasibility import NodeFacts, node_facts
from scoring.cluster.holdings import holds_units, pod_units
from scoring.cluster.objects import as_dict, as_list
from scoring.cluster.view import BOOKING_ANNOTATION, Binding, ClusterView, node_with_devices
from scoring.cluster.workloads import BadQuantity, gpu_request
from scoring.policy import PlacementPolicy

LISTED = {"ResourceSlice": "resourceslices", "ResourceClaim": "resourceclaims",
          "ResourceClaimTemplate": "resourceclaimtemplates", "HorizontalPodAutoscaler": "horizontalpodautoscalers",
          "Node": "nodes", "Pod": "pods"}
"""Each object kind the state keeps, by the name it is listed under, in an order a full listing can
be replayed in: claims and templates before the pods that name them."""


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class _Held:
    """A pod's claim on a node: (node, GPU units)."""

    __slots__ = ("node", "units")

    def __init__(self, node: str, units: tuple[tuple[str, int], ...]) -> None:
        self.node, self.units = node, units


class ClusterState:
    """Not thread-safe: the caller serialises (the watch holds its lock around every call)."""

    def __init__(self, policy: PlacementPolicy, *, on_binding: Callable[[Binding], None] = lambda binding: None,
                 on_release: Callable[[str], None] = lambda pod: None, recent_seconds: float = 120.0) -> None:
        self._policy = policy
        self._on_binding = on_binding
        self._on_release = on_release
        self._recent = timedelta(seconds=recent_seconds)
        self._nodes: dict[str, NodeFacts] = {}
        self._pods: dict[str, _Held] = {}
        self._held: dict[str, Counter] = {}
        self._slices: dict[str, PublishedSlice] = {}
        self._claims: dict[tuple[str, str], ClaimNeed] = {}
        self._held_devices = HeldDevices()
        self._inventory: DeviceInventory | None = None
        """The slices' devices, counted again only after a slice changed (None)."""
        self._with_devices: dict[str, tuple[NodeFacts, NodeFacts]] = {}
        """Node → (its facts, the same with its devices), while both stand."""
        self._templates: dict[tuple[str, str], ClaimNeed] = {}
        self._book = ClaimBook(self._templates, self._claims)
        """Live (not copied): pod events resolve their claims through it."""
        self._scaling: dict[tuple[str, str], tuple[tuple[str, str], float]] = {}
        """HPA (namespace, name) → (the workload it scales, its load over target), where it has read one."""

    @property
    def live_claims(self) -> ClaimBook:
        """The claims and templates as last seen (live, not copied)."""
        return self._book

    def replace(self, kind: str, objects: list[dict[str, Any]], now: datetime) -> None:
        """A full list of `kind` replaces what was known of it; a pod missing from it is released
        (gone while the watch was away: no DELETED event will say so)."""
        if kind == "nodes":
            self._nodes = {}
        elif kind == "pods":
            before, self._pods, self._held = self._pods, {}, {}
        else:
            self.clear(kind)
        for obj in objects:
            self.apply(kind, "ADDED", obj, now, relist=True)
        if kind == "pods":
            for key in before.keys() - self._pods.keys():
                self._on_release(key)

    def view(self, now: datetime) -> ClusterView:
        """DRA devices join the nodes' allocatable and the claims' allocations
        their held units, as the scheduler's own view counts them."""
        held = {n: dict(c) for n, c in self._held.items()}
        nodes: dict[str, NodeFacts] = dict(self._nodes)
        if self._inventory is None:
            self._inventory = inventory_from_slices(self._slices.values(), self._policy)
            self._held_devices.use(self._inventory)
            self._with_devices.clear()
        if self._inventory.capacity:
            for name in self._inventory.capacity.keys() & nodes.keys():
                # A node's facts with its devices, made again only when the node or the slices change.
                cached = self._with_devices.get(name)
                if cached is None or cached[0] is not nodes[name]:
                    cached = self._with_devices[name] = (
                        nodes[name], node_with_devices(nodes[name], self._inventory.capacity[name]))
                nodes[name] = cached[1]
            for node, devices in self._held_devices.per_node.items():
                held.setdefault(node, {}).update({r: n for r, n in devices.items() if n})
        return ClusterView(nodes, held, frozenset(self._pods), now,
                           ClaimBook(dict(self._templates), dict(self._claims)), dict(self._scaling.values()))

    def apply(self, kind: str, event: str, obj: dict[str, Any], now: datetime, relist: bool = False) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of `kind`."""
        if kind == "nodes":
            self._apply_node(event, obj)
        elif kind == "pods":
            self._apply_pod(event, obj, now, relist)
        elif kind == "horizontalpodautoscalers":
            self._apply_autoscaler(event, obj)
        else:
            self._apply_dra(kind, event, obj)

    def clear(self, kind: str) -> None:
        """An optional kind counted as empty. Cleared in place: `_book` holds the claim and template dicts."""
        for state in {"resourceslices": (self._slices,), "resourceclaims": (self._claims, self._held_devices),
                      "resourceclaimtemplates": (self._templates,),
                      "horizontalpodautoscalers": (self._scaling,)}[kind]:
            state.clear()
        self._inventory = None if kind == "resourceslices" else self._inventory

    def _apply_dra(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """Keep only what placement reads: a slice's GPU devices, a claim's need and allocation,
        a template's need."""
        metadata = as_dict(obj.get("metadata"))
        name, namespace = str(metadata.get("name", "")), str(metadata.get("namespace", ""))
        deleted = event == "DELETED"
        if kind == "resourceslices":
            if deleted:
                self._slices.pop(name, None)
            else:
                self._slices[name] = published_slice(obj, self._policy)
            self._inventory = None
        elif kind == "resourceclaims":
            if deleted:
                self._claims.pop((namespace, name), None)
            else:
                self._claims[namespace, name] = resource_claim_need(obj, self._policy)
            self._held_devices.set_claim((namespace, name), () if deleted else allocated_devices(obj))
        elif deleted:
            self._templates.pop((namespace, name), None)
        else:
            self._templates[namespace, name] = template_need(obj, self._policy)

    def _apply_autoscaler(self, event: str, obj: dict[str, Any]) -> None:
        metadata = as_dict(obj.get("metadata"))
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        workload, ratio = scaled_workload(obj), load_ratio(obj)
        if event == "DELETED" or workload is None or ratio is None:
            self._scaling.pop(key, None)
        else:
            self._scaling[key] = (workload, ratio)

    def _apply_node(self, event: str, obj: dict[str, Any]) -> None:
        name = str(as_dict(obj.get("metadata")).get("name", ""))
        if event == "DELETED":
            self._nodes.pop(name, None)
            self._with_devices.pop(name, None)
        elif name:
            self._nodes[name] = node_facts(obj, self._policy)

    def _apply_pod(self, event: str, obj: dict[str, Any], now: datetime, relist: bool = False) -> None:
        metadata, spec = as_dict(obj.get("metadata")), as_dict(obj.get("spec"))
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        phase = as_dict(obj.get("status")).get("phase")
        node = spec.get("nodeName")
        if event == "DELETED" or not holds_units(phase, node):
            self._release(key)
            return
        if key in self._pods:
            return  # a bound pod's GPU requests and node never change
        try:
            request = gpu_request(obj, self._policy, pod_claims(obj, self._book, self._policy))
        except BadQuantity:
            request = None
        units = request.units if request else ()
        if not units:
            return
        extended = pod_units(units)  # claimed devices are the claims' (`_held_devices`), not the pod's
        self._pods[key] = _Held(node, extended)
        self._held.setdefault(node, Counter()).update(dict(extended))
        scheduled = self._scheduled_at(obj) or now
        if relist and now - scheduled > self._recent:
            return  # long bound: its load shows in telemetry already
        booking = as_dict(metadata.get("annotations")).get(BOOKING_ANNOTATION, "")
        self._on_binding(Binding(key, node, units, min(scheduled, now), booking if isinstance(booking, str) else ""))

    def _release(self, key: str) -> None:
        held = self._pods.pop(key, None)
        if held is not None:
            self._on_release(key)
            counter = self._held.get(held.node)
            if counter is not None:
                counter.subtract(dict(held.units))
                if not +counter:
                    del self._held[held.node]

    @staticmethod
    def _scheduled_at(obj: dict[str, Any]) -> datetime | None:
        """When the pod was bound: its PodScheduled condition's time; for a pod created with
        `spec.nodeName` (no scheduler, so no such condition) its creation. Taking "now" for those
        booked their GPUs again at every relist, on top of the telemetry that already showed them."""
        for condition in as_list(as_dict(obj.get("status")).get("conditions")):
            if isinstance(condition, dict) and condition.get("type") == "PodScheduled" \
                    and condition.get("status") == "True":
                return _parse_time(condition.get("lastTransitionTime"))
        return _parse_time(as_dict(obj.get("metadata")).get("creationTimestamp"))
