"""A model of the default kube-scheduler profile for what matters to GPU placement. Pure, no I/O.

Works on Kubernetes JSON (pods and nodes as `kubectl get -o json` prints them), so the simulator
and `gpu-balancer explain` share it. Filters: NodeUnschedulable, NodeResourcesFit (cpu, memory and
GPU resources), NodeAffinity (required), TaintToleration (NoSchedule/NoExecute), PodTopologySpread
(DoNotSchedule). Scores, each normalised to 0–100 then weighted as the default profile does:
NodeAffinity ×2, PodTopologySpread ×2, InterPodAffinity ×2, NodeResourcesFit (LeastAllocated,
cpu and memory only — GPUs are filtered on, never scored) ×1, BalancedAllocation ×1.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scoring.workloads import BadQuantity, as_dict, as_list, parse_quantity

HOSTNAME = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
"""NodeUnschedulable lets a cordoned node through for a pod that tolerates this taint."""
WEIGHTS = {"NodeAffinity": 2, "PodTopologySpread": 2, "InterPodAffinity": 2, "NodeResourcesFit": 1,
           "BalancedAllocation": 1, "ImageLocality": 1}
IMAGE_MIN_BYTES, IMAGE_MAX_BYTES = 23 * 2**20, 1000 * 2**20
"""ImageLocality's thresholds: below the minimum a cached image scores 0, above the maximum (per
container) 100. Model-serving images are many GB, so a node that already has one scores 100."""
IMAGE_SIZE_ANNOTATION = "sim.gpu-balancer.io/image-bytes"
"""Simulator-only: the size of the pod's image (the scheduler reads it from the node's image list)."""
SYSTEM_DEFAULT_SPREAD = ({"maxSkew": 3, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway"},
                         {"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"})
"""The scheduler's default spread for pods of a ReplicaSet that declare none of their own."""


def quantity(value: Any) -> float:
    try:
        return float(parse_quantity(value))
    except BadQuantity:
        return 0.0


def requests_of(pod: Mapping[str, Any]) -> Counter:
    """What the scheduler reserves: the larger of the app containers' sum and each init container."""
    spec = as_dict(pod.get("spec"))
    total: Counter = Counter()
    for container in as_list(spec.get("containers")):
        resources = as_dict(as_dict(container).get("resources"))
        wanted = as_dict(resources.get("requests")) or as_dict(resources.get("limits"))
        for name in set(wanted) | set(as_dict(resources.get("limits"))):
            total[name] += quantity(wanted.get(name, as_dict(resources.get("limits")).get(name, 0)))
    for container in as_list(spec.get("initContainers")):
        resources = as_dict(as_dict(container).get("resources"))
        for name, value in (as_dict(resources.get("requests")) or as_dict(resources.get("limits"))).items():
            total[name] = max(total[name], quantity(value))
    return total


@dataclass
class NodeState:
    """One node and what is placed on it (mutable: the simulator binds and evicts)."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, float]
    taints: list[dict] = field(default_factory=list)
    unschedulable: bool = False
    requested: Counter = field(default_factory=Counter)
    pods: dict[str, dict] = field(default_factory=dict)
    """key "namespace/name" → pod object."""
    images: dict[str, int] = field(default_factory=dict)
    """Images present on the node (pulled by earlier pods) and their sizes in bytes."""

    @staticmethod
    def from_object(obj: Mapping[str, Any]) -> "NodeState":
        metadata, spec, status = as_dict(obj.get("metadata")), as_dict(obj.get("spec")), as_dict(obj.get("status"))
        labels = {k: str(v) for k, v in as_dict(metadata.get("labels")).items()}
        labels.setdefault(HOSTNAME, str(metadata.get("name", "")))
        return NodeState(str(metadata.get("name", "")), labels,
                         {k: quantity(v) for k, v in as_dict(status.get("allocatable")).items()},
                         [t for t in as_list(spec.get("taints")) if isinstance(t, dict)], bool(spec.get("unschedulable")))

    def bind(self, pod: dict) -> None:
        self.pods[pod_key(pod)] = pod
        self.requested.update(requests_of(pod))
        self.images.update(images_of(pod))

    def unbind(self, pod: dict) -> None:
        if self.pods.pop(pod_key(pod), None) is not None:
            self.requested.subtract(requests_of(pod))


def images_of(pod: Mapping[str, Any]) -> dict[str, int]:
    size = int(as_dict(as_dict(pod.get("metadata")).get("annotations")).get(IMAGE_SIZE_ANNOTATION, 0) or 0)
    return {str(as_dict(c).get("image", "")): size for c in as_list(as_dict(pod.get("spec")).get("containers"))}


def pod_key(pod: Mapping[str, Any]) -> str:
    metadata = as_dict(pod.get("metadata"))
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _labels(pod: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in as_dict(as_dict(pod.get("metadata")).get("labels")).items() if isinstance(v, str)}


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if not selector:
        return False
    if any(labels.get(k) != v for k, v in as_dict(selector.get("matchLabels")).items()):
        return False
    return all(_expression(e, labels.get(e.get("key", "")), e.get("key", "") in labels)
               for e in as_list(selector.get("matchExpressions")) if isinstance(e, dict))


def _expression(expr: Mapping[str, Any], value: str | None, present: bool) -> bool:
    operator, values = expr.get("operator"), [str(v) for v in as_list(expr.get("values"))]
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            return float(value) > float(values[0]) if operator == "Gt" else float(value) < float(values[0])
        except ValueError:
            return False
    return False


def _node_term_matches(term: Mapping[str, Any], node: NodeState) -> bool:
    expressions = [e for e in as_list(term.get("matchExpressions")) if isinstance(e, dict)]
    fields = [f for f in as_list(term.get("matchFields")) if isinstance(f, dict)]
    if not expressions and not fields:
        return False
    return (all(_expression(e, node.labels.get(e.get("key", "")), e.get("key", "") in node.labels) for e in expressions)
            and all(_expression(f, node.name, True) for f in fields if f.get("key") == "metadata.name"))


def _tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists" and (not toleration.get("key") or toleration.get("key") == taint.get("key")):
            return True
        if toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _spread_counts(constraint: Mapping[str, Any], pod: Mapping[str, Any], nodes: list[NodeState]) -> dict[str, int]:
    """Matching pods per topology domain, over nodes that have the topology key."""
    selector = dict(as_dict(constraint.get("labelSelector")))
    own = _labels(pod)
    match_labels = dict(as_dict(selector.get("matchLabels")))
    for key in as_list(constraint.get("matchLabelKeys")):
        if key in own:
            match_labels[key] = own[key]
    selector["matchLabels"] = match_labels
    key = constraint.get("topologyKey", "")
    counts: dict[str, int] = defaultdict(int)
    for node in nodes:
        if key in node.labels:
            counts[node.labels[key]] += sum(1 for p in node.pods.values() if _selector_matches(selector, _labels(p)))
    return counts


@dataclass(frozen=True)
class NodeVerdict:
    name: str
    feasible: bool
    failed_filter: str | None
    scores: dict[str, float]
    total: float


def evaluate(pod: Mapping[str, Any], nodes: list[NodeState], *, score_gpus: bool = False) -> list[NodeVerdict]:
    """Filter and score every node for `pod`, as the default profile would."""
    spec = as_dict(pod.get("spec"))
    need = requests_of(pod)
    affinity = as_dict(spec.get("affinity"))
    node_affinity = as_dict(affinity.get("nodeAffinity"))
    required_terms = as_list(as_dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
                             .get("nodeSelectorTerms"))
    node_selector = as_dict(spec.get("nodeSelector"))
    tolerations = [t for t in as_list(spec.get("tolerations")) if isinstance(t, dict)]
    spreads = [c for c in as_list(spec.get("topologySpreadConstraints")) if isinstance(c, dict)]
    owners = [r for r in as_list(as_dict(pod.get("metadata")).get("ownerReferences")) if isinstance(r, dict)]
    if not spreads and any(r.get("kind") == "ReplicaSet" for r in owners):
        spreads = [dict(c, labelSelector={"matchLabels": _labels(pod)}) for c in SYSTEM_DEFAULT_SPREAD]
    hard_spreads = [(c, _spread_counts(c, pod, nodes)) for c in spreads if c.get("whenUnsatisfiable") == "DoNotSchedule"]
    soft_spreads = [(c, _spread_counts(c, pod, nodes)) for c in spreads if c.get("whenUnsatisfiable") != "DoNotSchedule"]

    feasible: list[NodeState] = []
    failed: dict[str, str] = {}
    for node in nodes:
        reason = None
        if node.unschedulable and not _tolerated(UNSCHEDULABLE_TAINT, tolerations):
            reason = "NodeUnschedulable"
        elif any(need[r] > node.allocatable.get(r, 0) - node.requested[r] + 1e-9 for r in need if need[r] > 0):
            reason = "NodeResourcesFit"
        elif any(node.labels.get(k) != str(v) for k, v in node_selector.items()) or (
                required_terms and not any(_node_term_matches(as_dict(t), node) for t in required_terms)):
            reason = "NodeAffinity"
        elif any(t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(t, tolerations) for t in node.taints):
            reason = "TaintToleration"
        else:
            for constraint, counts in hard_spreads:
                key = constraint.get("topologyKey", "")
                if key not in node.labels:
                    reason = "PodTopologySpread"
                    break
                floor = min(counts.values(), default=0)
                if counts.get(node.labels[key], 0) + 1 - floor > int(constraint.get("maxSkew", 1)):
                    reason = "PodTopologySpread"
                    break
        if reason:
            failed[node.name] = reason
        else:
            feasible.append(node)

    raw: dict[str, dict[str, float]] = {n.name: {} for n in feasible}
    preferred = [p for p in as_list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
                 if isinstance(p, dict)]
    for node in feasible:
        raw[node.name]["NodeAffinity"] = sum(float(p.get("weight", 0)) for p in preferred
                                             if _node_term_matches(as_dict(p.get("preference")), node))
        raw[node.name]["PodTopologySpread"] = sum(
            counts.get(node.labels.get(c.get("topologyKey", ""), ""), 0) for c, counts in soft_spreads)
        raw[node.name]["InterPodAffinity"] = _pod_affinity(affinity, node, nodes)
        fractions = []
        free_share = []
        for resource in ("cpu", "memory") + (tuple(r for r in need if r.startswith("nvidia.com/")) if score_gpus else ()):
            capacity = node.allocatable.get(resource, 0)
            if capacity <= 0:
                continue
            used = (node.requested[resource] + need[resource]) / capacity
            fractions.append(min(1.0, used))
            free_share.append(max(0.0, 1 - used))
        raw[node.name]["NodeResourcesFit"] = 100 * sum(free_share) / len(free_share) if free_share else 0.0
        mean = sum(fractions) / len(fractions) if fractions else 0.0
        deviation = (sum((f - mean) ** 2 for f in fractions) / len(fractions)) ** 0.5 if fractions else 0.0
        raw[node.name]["BalancedAllocation"] = 100 * (1 - deviation)
        raw[node.name]["ImageLocality"] = _image_locality(pod, node, nodes)

    normalised = _normalise(raw)
    verdicts = []
    for node in nodes:
        if node.name in failed:
            verdicts.append(NodeVerdict(node.name, False, failed[node.name], {}, 0.0))
        else:
            scores = normalised[node.name]
            verdicts.append(NodeVerdict(node.name, True, None, scores,
                                        sum(WEIGHTS[p] * s for p, s in scores.items())))
    return verdicts


def _image_locality(pod: Mapping[str, Any], node: NodeState, nodes: list[NodeState]) -> float:
    wanted = images_of(pod)
    total = 0.0
    for image in wanted:
        if image in node.images:
            spread = sum(1 for n in nodes if image in n.images) / len(nodes)
            total += node.images[image] * spread
    ceiling = IMAGE_MAX_BYTES * max(1, len(wanted))
    if total < IMAGE_MIN_BYTES:
        return 0.0
    return 100 * min(1.0, (total - IMAGE_MIN_BYTES) / (ceiling - IMAGE_MIN_BYTES))


def _pod_affinity(affinity: Mapping[str, Any], node: NodeState, nodes: list[NodeState]) -> float:
    total = 0.0
    for kind, sign in (("podAffinity", 1), ("podAntiAffinity", -1)):
        for term in as_list(as_dict(affinity.get(kind)).get("preferredDuringSchedulingIgnoredDuringExecution")):
            term = as_dict(term)
            inner = as_dict(term.get("podAffinityTerm"))
            key = inner.get("topologyKey", "")
            if key not in node.labels:
                continue
            domain = node.labels[key]
            selector = as_dict(inner.get("labelSelector"))
            if any(_selector_matches(selector, _labels(p)) for other in nodes if other.labels.get(key) == domain
                   for p in other.pods.values()):
                total += sign * float(term.get("weight", 0))
    return total


def _normalise(raw: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {name: {} for name in raw}
    if not raw:
        return out
    for plugin in WEIGHTS:
        values = {name: scores.get(plugin, 0.0) for name, scores in raw.items()}
        low, high = min(values.values()), max(values.values())
        for name, value in values.items():
            if plugin == "NodeAffinity":  # score * 100 / max over feasible nodes
                out[name][plugin] = 100 * value / high if high > 0 else 0.0
            elif plugin == "PodTopologySpread":  # fewer matching pods is better
                out[name][plugin] = 100 * (high - value) / high if high > 0 else 100.0
            elif plugin == "InterPodAffinity":
                out[name][plugin] = 100 * (value - low) / (high - low) if high > low else 0.0
            else:  # already 0–100
                out[name][plugin] = value
    return out


def choose(verdicts: list[NodeVerdict], rng: random.Random) -> str | None:
    """The node with the top total; ties broken at random, as the scheduler does."""
    feasible = [v for v in verdicts if v.feasible]
    if not feasible:
        return None
    best = max(v.total for v in feasible)
    return rng.choice([v.name for v in feasible if v.total >= best - 1e-9])
