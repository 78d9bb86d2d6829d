"""A model of the default kube-scheduler profile for what matters to GPU placement. Pure, no I/O.

Works on Kubernetes JSON (pods and nodes as `kubectl get -o json` prints them), so the simulator
and `gpu-balancer explain` share it. Filters, in the default profile's order: NodeUnschedulable,
NodeName, TaintToleration (NoSchedule/NoExecute), NodeAffinity (nodeSelector and required
terms), NodePorts, NodeResourcesFit (pod count, cpu, memory and every extended resource),
PodTopologySpread (DoNotSchedule), InterPodAffinity (required terms both ways). Scores, each
normalised as the plugin does (integers, as upstream) and weighted as the default profile:
TaintToleration ×3 (intolerable PreferNoSchedule taints), NodeAffinity ×2, PodTopologySpread ×2,
InterPodAffinity ×2, NodeResourcesFit (LeastAllocated on cpu and memory with the non-zero
defaults; GPUs are filtered on, never scored) ×1, BalancedAllocation ×1, ImageLocality ×1.

DynamicResources filters GPU claims only (the policy's GPU DeviceClasses, counted by
`scoring.claims`: free devices of the class, `All`, `firstAvailable`, an allocated claim's node);
claimed devices are bound with their pod (`NodeState.bind(pod, devices)`).

Not modelled: volumes (VolumeBinding, VolumeZone, VolumeRestrictions, NodeVolumeLimits),
preemption, claims for devices that are not GPUs, DRA's device selectors and constraints,
pod-level resources, scheduling gates and the percentage-of-nodes-to-score sampling (every
feasible node is scored).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scoring.claims import EMPTY_BOOK, ClaimBook, book_from_objects, class_of, pod_claims
from scoring.feasibility import NodeFacts, PodConstraints, taints_from, why_infeasible
from scoring.policy import PlacementPolicy
from scoring.view import ClusterView
from scoring.workloads import as_dict, as_list
from sim.kube_match import Labels, Selector, label_selector, node_selector_term, tolerates
from sim.node_state import NodeState, image_name, scored_requests
from sim.pod_affinity import InterPodAffinity
from sim.pod_requests import pod_requests
from sim.scheduler_profile import DEFAULT_PROFILE, Profile
from sim.spread import HOSTNAME, Constraint, Spread, constraints_of, namespace_of, pod_labels

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
"""NodeUnschedulable lets a cordoned node through for a pod that tolerates this taint."""
MAX_SCORE = 100
IMAGE_MIN_BYTES, IMAGE_MAX_BYTES = 23 * 2**20, 1000 * 2**20
"""ImageLocality's thresholds: below the minimum a cached image scores 0, above the maximum (per
container) 100. Model-serving images are many GB, so a node that already has one scores 100."""
SYSTEM_DEFAULT_SPREAD = ((3, HOSTNAME), (5, "topology.kubernetes.io/zone"))
"""The scheduler's default ScheduleAnyway spread (maxSkew, key) for pods that declare none."""
CONTROLLER_KINDS = ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")


@dataclass(frozen=True)
class ClusterContext:
    """What else a cluster file says that the scheduler reads: namespaces' labels (for pod
    affinity's namespaceSelector) and the workload controllers whose selectors give the default
    spreading. Empty in the simulator, where a pod's controller is known by its owner reference."""

    namespace_labels: Mapping[str, Labels] = field(default_factory=dict)
    controllers: tuple[tuple[str, Selector], ...] = ()
    """(namespace, selector) of each Service, ReplicationController, ReplicaSet and StatefulSet."""
    claims: ClaimBook = EMPTY_BOOK
    """ResourceClaimTemplates and ResourceClaims, for DynamicResources."""
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    """Which DeviceClasses are GPUs."""
    profile: Profile = DEFAULT_PROFILE
    """The scheduler's plugins and weights (`sim.scheduler_profile`)."""

    @staticmethod
    def from_objects(objects: list[Mapping[str, Any]], placement: PlacementPolicy | None = None) -> "ClusterContext":
        placement = placement or PlacementPolicy()
        namespaces, controllers = {}, []
        for obj in objects:
            metadata = as_dict(obj.get("metadata"))
            kind = obj.get("kind")
            if kind == "Namespace":
                namespaces[str(metadata.get("name", ""))] = {k: str(v) for k, v in as_dict(metadata.get("labels")).items()}
            elif kind in CONTROLLER_KINDS:
                raw = as_dict(obj.get("spec")).get("selector")
                if kind in ("Service", "ReplicationController"):  # a plain label map
                    raw = {"matchLabels": raw} if isinstance(raw, dict) and raw else None
                elif not as_dict(raw).get("matchLabels") and not as_dict(raw).get("matchExpressions"):
                    raw = None  # selects nothing to spread by
                if raw is not None:
                    controllers.append((str(metadata.get("namespace") or "default"), label_selector(raw)))
        return ClusterContext(namespaces, tuple(controllers), book_from_objects(objects, placement), placement)


NO_CONTEXT = ClusterContext()


def claimed_devices(pod: Mapping[str, Any], context: ClusterContext) -> Counter:
    """The DRA devices (deviceclass/<class> → count) the pod's GPU claims take on its node: each
    ExactCount request, one device for an `All` request and a `firstAvailable` request's first
    choice (the model binds what it most likely gets)."""
    claims = pod_claims(pod, context.claims, context.placement)
    if claims is None or not claims.asks_for_gpus:
        return Counter()
    devices = claims.likely_extra()
    devices.update(dict(claims.units))
    return devices


def _why_claims_do_not_fit(pod: Mapping[str, Any], context: ClusterContext) -> Any:
    """A per-node DynamicResources check, or None when the pod claims no GPU."""
    claims = pod_claims(pod, context.claims, context.placement)
    if claims is not None and claims.missing:  # the scheduler waits for the claim to exist
        return lambda node: f"DynamicResources: claim {claims.missing[0]} not found"
    if claims is None or not claims.asks_for_gpus:
        return None
    wanted = PodConstraints(units=claims.units, all_of=claims.all_of, alternatives=claims.alternatives,
                            allocated_to=claims.allocated_to)
    resources = {r for r, _ in claims.units} | set(claims.all_of) | {r for g in claims.alternatives for r, _ in g if r}

    def check(node: NodeState) -> str | None:
        allocatable = {r: int(node.allocatable.get(r, 0)) for r in resources}
        free = {r: allocatable[r] - int(node.requested[r]) for r in resources}
        return why_infeasible(wanted, NodeFacts(node.name, node.labels, (), False, allocatable), free)
    return check


@dataclass(frozen=True)
class NodeVerdict:
    name: str
    feasible: bool
    failed_filter: str | None
    scores: dict[str, float]
    total: float


def _default_spread(pod: Mapping[str, Any], context: ClusterContext) -> list[Constraint]:
    """System-default spreading, by the selectors of the controllers that select the pod (in the
    simulator, the pod's own labels when a ReplicaSet, StatefulSet or ReplicationController owns it)."""
    labels, namespace = pod_labels(pod), namespace_of(pod)
    selectors = [s for ns, s in context.controllers if ns == namespace and s(labels)]
    if not selectors:
        owners = as_list(as_dict(pod.get("metadata")).get("ownerReferences"))
        if not context.controllers and labels and any(
                as_dict(r).get("kind") in ("ReplicaSet", "StatefulSet", "ReplicationController") for r in owners):
            selectors = [label_selector({"matchLabels": labels})]
        else:
            return []

    def selector(other: Labels) -> bool:
        return all(s(other) for s in selectors)
    return [Constraint(key, skew, selector, honour_affinity=True) for skew, key in SYSTEM_DEFAULT_SPREAD]


def _host_ports(pod: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    ports = []
    for container in as_list(as_dict(pod.get("spec")).get("containers")):
        for port in as_list(as_dict(container).get("ports")):
            port = as_dict(port)
            if int(port.get("hostPort") or 0) > 0:
                ports.append((str(port.get("hostIP") or "0.0.0.0"), str(port.get("protocol") or "TCP"),
                              int(port["hostPort"])))
    return ports


def _ports_conflict(wanted: list[tuple[str, str, int]], node: NodeState) -> bool:
    used = [p for other in node.pods.values() for p in _host_ports(other)]
    return any(protocol == p and port == q and (ip == i or "0.0.0.0" in (ip, i))
               for ip, protocol, port in wanted for i, p, q in used)


def _extended(resource: str) -> bool:
    return "/" in resource or resource.startswith("hugepages-")


def _fit_failure(need: Counter, node: NodeState) -> bool:
    if "pods" in node.allocatable and len(node.pods) + 1 > node.allocatable["pods"]:
        return True
    return any(amount > node.allocatable.get(r, 0) - node.requested[r] + 1e-9 for r, amount in need.items()
               if amount > 0 and (r in ("cpu", "memory", "ephemeral-storage") or _extended(r)))


def _integer(resource: str, amount: float) -> int:
    return round(amount * 1000) if resource == "cpu" else round(amount)


def _allocation(node: NodeState, need: Counter, resources: tuple[str, ...], *,
                non_zero: bool, with_pod: bool = True) -> list[tuple[int, int]]:
    """(requested with the pod — or without, for the balance before it — and allocatable) per
    scored resource, in the plugins' integer units; an extended resource the pod does not ask
    for, or one the node lacks, is not scored."""
    out = []
    for r in resources:
        if _extended(r) and need[r] == 0:
            continue
        capacity = _integer(r, node.allocatable.get(r, 0))
        if capacity == 0:
            continue
        base = node.non_zero_requested if non_zero and r in ("cpu", "memory") else node.requested
        out.append((_integer(r, base[r] + (need[r] if with_pod else 0)), capacity))
    return out


def _least_allocated(node: NodeState, need: Counter, resources: tuple[str, ...]) -> int:
    scores = [0 if requested > capacity else (capacity - requested) * MAX_SCORE // capacity
              for requested, capacity in _allocation(node, need, resources, non_zero=True)]
    return sum(scores) // len(scores) if scores else 0


def _balance(pairs: list[tuple[int, int]]) -> int:
    """How evenly the resources are used, 0–100: (1 − the fractions' standard deviation) × 100."""
    fractions = [min(1.0, requested / capacity) for requested, capacity in pairs]
    if len(fractions) == 2:
        deviation = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        deviation = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    else:
        deviation = 0.0
    return int((1 - deviation) * MAX_SCORE)


def _balanced(node: NodeState, need: Counter, resources: tuple[str, ...]) -> int:
    """kube-scheduler v1.37's BalancedAllocation: the balance with the pod against without it,
    brought into [50, 100] (`balancedResourceScorer`; Go's integer division truncates)."""
    change = (MAX_SCORE // 2 + _balance(_allocation(node, need, resources, non_zero=False))
              - _balance(_allocation(node, need, resources, non_zero=False, with_pod=False)))
    return MAX_SCORE // 2 + int(change / 2)


def _image_locality(pod: Mapping[str, Any], node: NodeState, holders: Mapping[str, int], nodes: int) -> int:
    spec = as_dict(pod.get("spec"))
    containers = as_list(spec.get("initContainers")) + as_list(spec.get("containers"))
    total = 0
    for container in containers:
        image = image_name(str(as_dict(container).get("image", "")))
        if image in node.images:
            total += int(node.images[image] * holders[image] / nodes)
    ceiling = IMAGE_MAX_BYTES * len(containers)
    total = min(max(total, IMAGE_MIN_BYTES), ceiling)
    return MAX_SCORE * (total - IMAGE_MIN_BYTES) // (ceiling - IMAGE_MIN_BYTES) if ceiling > IMAGE_MIN_BYTES else 0


def _default_normalise(raw: Mapping[str, int], *, reverse: bool) -> dict[str, int]:
    high = max(raw.values(), default=0)
    if high == 0:
        return {name: MAX_SCORE if reverse else 0 for name in raw}
    return {name: MAX_SCORE - MAX_SCORE * v // high if reverse else MAX_SCORE * v // high for name, v in raw.items()}


def evaluate(pod: Mapping[str, Any], nodes: list[NodeState], *, score_gpus: bool = False,
             context: ClusterContext = NO_CONTEXT) -> list[NodeVerdict]:
    """Filter and score every node for `pod`, as the default profile would."""
    spec = as_dict(pod.get("spec"))
    need = pod_requests(pod)
    affinity = as_dict(spec.get("affinity"))
    node_affinity = as_dict(affinity.get("nodeAffinity"))
    required = as_dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    required_terms = [node_selector_term(t) for t in as_list(required.get("nodeSelectorTerms"))]
    node_selector = {k: str(v) for k, v in as_dict(spec.get("nodeSelector")).items()}
    tolerations = [t for t in as_list(spec.get("tolerations")) if isinstance(t, dict)]
    wanted_ports = _host_ports(pod)
    node_name = spec.get("nodeName")

    def affinity_ok(node: NodeState) -> bool:
        if any(node.labels.get(k) != v for k, v in node_selector.items()):
            return False
        return not required or any(term(node.name, node.labels) for term in required_terms)

    spread = Spread(pod, nodes, affinity_ok=affinity_ok, tolerations=tolerations)
    spread_passes = spread.filter(constraints_of(pod, "DoNotSchedule"))
    pod_affinity = InterPodAffinity(pod, nodes, namespace_labels=context.namespace_labels)
    pod_affinity_failure = pod_affinity.filter()
    claims_failure = _why_claims_do_not_fit(pod, context)

    on = set(context.profile.filters)
    feasible: list[NodeState] = []
    failed: dict[str, str] = {}
    for node in nodes:
        if "NodeUnschedulable" in on and node.unschedulable and not tolerates(UNSCHEDULABLE_TAINT, tolerations):
            reason = "NodeUnschedulable"
        elif "NodeName" in on and node_name and node_name != node.name:
            reason = "NodeName"
        elif "TaintToleration" in on and any(t.get("effect") in ("NoSchedule", "NoExecute")
                                              and not tolerates(t, tolerations) for t in node.taints):
            reason = "TaintToleration"
        elif "NodeAffinity" in on and not affinity_ok(node):
            reason = "NodeAffinity"
        elif "NodePorts" in on and wanted_ports and _ports_conflict(wanted_ports, node):
            reason = "NodePorts"
        elif "NodeResourcesFit" in on and _fit_failure(need, node):
            reason = "NodeResourcesFit"
        elif "PodTopologySpread" in on and not spread_passes(node):
            reason = "PodTopologySpread"
        elif "InterPodAffinity" in on and pod_affinity_failure(node) is not None:
            reason = "InterPodAffinity"
        elif "DynamicResources" in on and claims_failure is not None and (why := claims_failure(node)) is not None:
            reason = why
        else:
            feasible.append(node)
            continue
        failed[node.name] = reason

    scores = _scores(pod, need, feasible, nodes, node_affinity, tolerations, spread, pod_affinity, context,
                     score_gpus=score_gpus)
    weights = context.profile.weights
    verdicts = []
    for node in nodes:
        if node.name in failed:
            verdicts.append(NodeVerdict(node.name, False, failed[node.name], {}, 0.0))
        else:
            mine = {plugin: float(scores[plugin][node.name]) for plugin in weights}
            verdicts.append(NodeVerdict(node.name, True, None, mine, sum(weights[p] * s for p, s in mine.items())))
    return verdicts


def _scores(pod: Mapping[str, Any], need: Counter, feasible: list[NodeState], nodes: list[NodeState],
            node_affinity: Mapping[str, Any], tolerations: list[dict], spread: Spread,
            pod_affinity: InterPodAffinity, context: ClusterContext, *, score_gpus: bool) -> dict[str, dict[str, int]]:
    """Each score plugin's normalised score per feasible node."""
    preferred = [(int(as_dict(p).get("weight") or 0), node_selector_term(as_dict(p).get("preference")))
                 for p in as_list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))]
    soft_tolerations = [t for t in tolerations if t.get("effect") in (None, "", "PreferNoSchedule")]
    resources = ("cpu", "memory") + (tuple(r for r in need if r.startswith("nvidia.com/")) if score_gpus else ())
    non_zero = scored_requests(pod_requests(pod, non_zero=True)) + Counter({r: need[r] for r in resources[2:]})
    holders: Counter = Counter(image for n in nodes for image in n.images)

    if as_list(as_dict(pod.get("spec")).get("topologySpreadConstraints")):
        soft, require_all = constraints_of(pod, "ScheduleAnyway"), True
    else:
        soft, require_all = _default_spread(pod, context), False

    out: dict[str, dict[str, int]] = {
        "NodeAffinity": _default_normalise(
            {n.name: sum(w for w, term in preferred if term(n.name, n.labels)) for n in feasible}, reverse=False),
        "TaintToleration": _default_normalise(
            {n.name: sum(1 for t in n.taints if t.get("effect") == "PreferNoSchedule"
                         and not tolerates(t, soft_tolerations)) for n in feasible}, reverse=True),
        "PodTopologySpread": (spread.scores(soft, feasible, require_all_keys=require_all) if soft
                              else {n.name: 0 for n in feasible}),
        "InterPodAffinity": pod_affinity.scores(feasible),
        "NodeResourcesFit": {n.name: _least_allocated(n, non_zero, resources) for n in feasible},
        # A pod requesting none of the scored resources is skipped (kube-scheduler issue #129138):
        # otherwise best-effort pods all pile onto the most balanced node.
        "BalancedAllocation": {n.name: _balanced(n, need, resources) if any(need[r] for r in resources) else 0
                               for n in feasible},
        "ImageLocality": {n.name: _image_locality(pod, n, holders, len(nodes)) for n in feasible},
    }
    return out


def view_of(nodes: Iterable[NodeState], now: datetime, claims: ClaimBook = EMPTY_BOOK) -> ClusterView:
    """The nodes as the webhook's cluster view shows them: GPU resources (extended and DRA) and
    the units bound pods hold."""
    facts, held, bound = {}, {}, set()
    for node in nodes:
        allocatable = {r: int(q) for r, q in node.allocatable.items() if r.startswith("nvidia.com/") or class_of(r)}
        facts[node.name] = NodeFacts(node.name, node.labels, taints_from(node.taints), node.unschedulable, allocatable)
        held[node.name] = {r: int(node.requested[r]) for r in allocatable if node.requested[r]}
        bound.update(node.pods)
    return ClusterView(facts, held, frozenset(bound), now, claims)


def choose(verdicts: list[NodeVerdict], rng: random.Random) -> str | None:
    """The node with the top total; ties broken at random, as the scheduler does."""
    feasible = [v for v in verdicts if v.feasible]
    if not feasible:
        return None
    best = max(v.total for v in feasible)
    return rng.choice([v.name for v in feasible if v.total >= best - 1e-9])
