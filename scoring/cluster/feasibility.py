"""Where a pod could be scheduled: its node selector, required node affinity, tolerations, cordons
and GPU resources against each node, as kube-scheduler's filters judge them. Pure, no I/O.

One function (`why_infeasible`) serves the webhook (advice names only feasible nodes), the
descheduler (an evicted pod needs somewhere to go) and the simulator. A pod's constraints reduce
to a hashable `PodConstraints`, so the replicas of one Deployment share one feasible set per
snapshot (`FeasibleSets`).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scoring.cluster.claims import PodClaims, class_of
from scoring.cluster.images import node_images
from scoring.cluster.node_selectors import NodeSelectorTerm, selector_terms
from scoring.cluster.workloads import (BadQuantity, GpuRequest, as_dict, as_list, gpu_request, is_gpu_resource,
                                       parse_quantity)
from scoring.policy import PlacementPolicy

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
FILTERED_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects the scheduler filters on; PreferNoSchedule only scores."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """As the scheduler's ToleratesTaint: an empty effect matches every effect, an empty
        key with `Exists` matches every key; `Equal` needs key and value to match."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.operator in ("Equal", "") and self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What placement needs of one node, read from its Node object."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Mapping[str, int] = field(default_factory=dict, hash=False, compare=False)
    """Whole units of every GPU resource the node offers (MIG profiles, shared GPUs included)."""
    images: Mapping[str, int] = field(default_factory=dict, hash=False, compare=False)
    """The large images the node holds (`scoring.cluster.images.node_images`), by normal name, in bytes."""


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """A pod's scheduling constraints, hashable: pods with equal constraints share a feasible set."""

    node_selector: tuple[tuple[str, str], ...] = ()
    required_terms: tuple[NodeSelectorTerm, ...] = ()
    """ORed; empty means no required node affinity."""
    tolerations: tuple[Toleration, ...] = ()
    units: tuple[tuple[str, int], ...] = ()
    """(GPU resource, units) needed on one node; DRA devices as `deviceclass/<class>`."""
    all_of: tuple[str, ...] = ()
    """DeviceClass resources claimed with `allocationMode: All`: the node needs one, none taken."""
    alternatives: tuple[tuple[tuple[str, int], ...], ...] = ()
    """A claim's `firstAvailable` requests: each needs one of its (resource, units) to fit."""
    allocated_to: tuple[tuple[NodeSelectorTerm, ...], ...] = ()
    """Allocated named claims' nodes: the node must match each entry's ORed terms."""


def taints_from(items: object) -> tuple[Taint, ...]:
    """Taints from a Node's `spec.taints` list."""
    return tuple(Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
                 for t in as_list(items) if isinstance(t, dict))


def taints_of(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    return taints_from(as_dict(node.get("spec")).get("taints"))


def tolerations_of(pod: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(Toleration(str(t.get("key", "") or ""), str(t.get("operator", "") or "Equal"),
                            str(t.get("value", "") or ""), str(t.get("effect", "") or ""))
                 for t in as_list(as_dict(pod.get("spec")).get("tolerations")) if isinstance(t, dict))


def constraints_of(pod: Mapping[str, Any], policy: PlacementPolicy, claims: PodClaims | None = None) -> PodConstraints:
    """The pod's constraints from its JSON and its resolved ResourceClaims; tolerant of missing or
    mistyped fields (a GPU quantity that is not one counts as no GPU)."""
    try:
        request = gpu_request(dict(pod), policy, claims)
    except BadQuantity:
        request = None
    return constraints_for(pod, request)


def constraints_for(pod: Mapping[str, Any], request: GpuRequest | None) -> PodConstraints:
    """`constraints_of` for a caller that has read the pod's GPU needs already (`gpu_request`)."""
    spec = as_dict(pod.get("spec"))
    selector = tuple(sorted((str(k), str(v)) for k, v in as_dict(spec.get("nodeSelector")).items()))
    required = as_dict(as_dict(as_dict(spec.get("affinity")).get("nodeAffinity"))
                       .get("requiredDuringSchedulingIgnoredDuringExecution"))
    claimed = request.claims if request is not None else None
    return PodConstraints(selector, selector_terms(required), tolerations_of(pod), request.units if request else (),
                          claimed.all_of if claimed else (), claimed.alternatives if claimed else (),
                          claimed.allocated_to if claimed else ())


def node_facts(node: Mapping[str, Any], policy: PlacementPolicy) -> NodeFacts:
    """From a Node object, keeping the allocatable of the policy's GPU resources only."""
    metadata, spec, status = as_dict(node.get("metadata")), as_dict(node.get("spec")), as_dict(node.get("status"))
    name = str(metadata.get("name", ""))
    labels = {str(k): str(v) for k, v in as_dict(metadata.get("labels")).items()}
    allocatable: dict[str, int] = {}
    for resource, quantity in as_dict(status.get("allocatable")).items():
        if isinstance(resource, str) and is_gpu_resource(resource, policy.gpu_resources):
            try:
                allocatable[resource] = int(parse_quantity(quantity))
            except (BadQuantity, ValueError, ArithmeticError):
                continue
    return NodeFacts(name, labels, taints_of(node), bool(spec.get("unschedulable")), allocatable, node_images(node))


def why_infeasible(pod: PodConstraints, node: NodeFacts, free: Mapping[str, int] | None = None) -> str | None:
    """None when the pod could be scheduled on the node; else the filter that rejects it.
    `free` is the node's free units per GPU resource (allocatable when not given)."""
    if node.unschedulable and not any(t.tolerates(Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule"))
                                      for t in pod.tolerations):
        return "NodeUnschedulable"
    room = node.allocatable if free is None else free
    for resource, units in pod.units:
        if room.get(resource, 0) < units:
            return f"DynamicResources: {class_of(resource)}" if class_of(resource) else f"NodeResourcesFit: {resource}"
    if pod.all_of or pod.alternatives or pod.allocated_to:
        if (why := _why_claims_do_not_fit(pod, node, room)) is not None:
            return why
    if any(node.labels.get(key) != value for key, value in pod.node_selector):
        return "NodeAffinity: nodeSelector"
    if pod.required_terms and not any(term.matches(node.name, node.labels) for term in pod.required_terms):
        return "NodeAffinity: required terms"
    for taint in node.taints:
        if taint.effect in FILTERED_EFFECTS and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"TaintToleration: {taint.key}={taint.value}:{taint.effect}"
    return None


def _why_claims_do_not_fit(pod: PodConstraints, node: NodeFacts, room: Mapping[str, int]) -> str | None:
    for terms in pod.allocated_to:
        if not any(term.matches(node.name, node.labels) for term in terms):
            return "DynamicResources: an allocated claim's devices are on other nodes"
    for resource in pod.all_of:
        if room.get(resource, 0) < 1 or room.get(resource, 0) < node.allocatable.get(resource, 0):
            return f"DynamicResources: {class_of(resource)} (allocationMode All needs every device free)"
    left = Counter(room)
    left.subtract(dict(pod.units))
    for group in pod.alternatives:
        if not any(not resource or left.get(resource, 0) >= units for resource, units in group):
            return f"DynamicResources: no firstAvailable choice fits ({', '.join(str(class_of(r)) for r, _ in group if r)})"
    return None


def feasible_names(pod: PodConstraints, nodes: Iterable[NodeFacts]) -> frozenset[str]:
    """Nodes where the pod fits by its constraints and the nodes' allocatable (not current use)."""
    return frozenset(node.name for node in nodes if why_infeasible(pod, node) is None)


class FeasibleSets:
    """Feasible node sets for one snapshot of the nodes, computed once per constraint signature.

    Bounded (least recently used dropped), since signatures come from untrusted pods. Not
    thread-safe: the caller holds its own lock."""

    def __init__(self, nodes: Mapping[str, NodeFacts], capacity: int = 512) -> None:
        self.nodes = nodes
        self._capacity = capacity
        self._sets: OrderedDict[PodConstraints, frozenset[str]] = OrderedDict()

    def __call__(self, pod: PodConstraints) -> frozenset[str]:
        found = self._sets.get(pod)
        if found is None:
            found = self._sets[pod] = feasible_names(pod, self.nodes.values())
            if len(self._sets) > self._capacity:
                self._sets.popitem(last=False)
        else:
            self._sets.move_to_end(pod)
        return found
