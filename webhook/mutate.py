"""Pod mutation: scheduling terms from advice, merged without loosening anything. Pure, no I/O.

`mutate_pod` returns the JSONPatch that turns the pod into its advised form. The patch is made
by diffing a deep copy (`webhook.diff.json_diff`) of the pod's scheduling view — the only fields we
may touch: `spec.affinity`, `spec.topologySpreadConstraints` and `metadata.annotations` — so the
cost does not grow with the rest of the pod spec, and nothing else can change by construction.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scoring.advice.placement import NodeAdvice
from scoring.cluster.claims import PodClaims
from webhook.diff import json_diff
from scoring.cluster.view import BOOKING_ANNOTATION
from scoring.cluster.workloads import COMPUTE_DOMAIN_LABEL, training_group
from scoring.policy import PlacementPolicy
from webhook.pods import ADVICE_ANNOTATION, replica_selector
from webhook.review import dump_json

HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"
MAX_ANNOTATION_NAMES = 5


@dataclass(frozen=True, slots=True)
class Mutation:
    patch: list[dict[str, Any]]
    annotation: str
    terms: tuple[str, ...]
    """What was added: "node-affinity", "hard-avoid", "domain", "spread", "pack"."""


def _child(parent: dict[str, Any], key: str, default: Any) -> Any:
    """parent[key], created when missing or of the wrong type (we only ever add to it)."""
    value = parent.get(key)
    if not isinstance(value, type(default)):
        value = parent[key] = default
    return value


def _add_node_preferences(spec: dict[str, Any], advice: NodeAdvice) -> None:
    node_affinity = _child(_child(spec, "affinity", {}), "nodeAffinity", {})
    preferred = _child(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution", [])
    for preference in advice.preferred:
        # matchFields metadata.name takes exactly one value: one term per node.
        preferred.append({"weight": preference.weight, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [preference.node]}]}})


def _add_required(spec: dict[str, Any], key: str, requirements: list[dict[str, Any]]) -> None:
    """`requirements` ANDed into *every* required node-selector term (under `key`: matchFields or
    matchExpressions): terms are ORed, so adding a new term instead would loosen the pod's
    existing constraints."""
    node_affinity = _child(_child(spec, "affinity", {}), "nodeAffinity", {})
    required = _child(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = _child(required, "nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        if isinstance(term, dict):
            _child(term, key, []).extend(copy.deepcopy(requirements))


def _add_exclusions(spec: dict[str, Any], advice: NodeAdvice) -> None:
    # matchFields metadata.name takes exactly one value: one NotIn per node.
    _add_required(spec, "matchFields", [{"key": "metadata.name", "operator": "NotIn", "values": [node]}
                                        for node in advice.excluded])


def _add_required_domain(spec: dict[str, Any], domain: tuple[str, str]) -> None:
    _add_required(spec, "matchExpressions", [{"key": domain[0], "operator": "In", "values": [domain[1]]}])


def _has_hostname_spread(spec: dict[str, Any]) -> bool:
    constraints = spec.get("topologySpreadConstraints")
    return isinstance(constraints, list) and any(
        isinstance(c, dict) and c.get("topologyKey") == HOSTNAME_KEY for c in constraints)


def _add_spread(spec: dict[str, Any], match_labels: dict[str, str], match_label_keys: list[str]) -> None:
    # Counting only the nodes the pod may use (its required affinity, the taints it tolerates), so
    # that an excluded node's empty slot does not pull replicas towards it.
    constraint: dict[str, Any] = {"maxSkew": 1, "topologyKey": HOSTNAME_KEY, "whenUnsatisfiable": "ScheduleAnyway",
                                  "labelSelector": {"matchLabels": dict(match_labels)},
                                  "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}
    if match_label_keys:
        constraint["matchLabelKeys"] = list(match_label_keys)
    _child(spec, "topologySpreadConstraints", []).append(constraint)


def _add_packing(spec: dict[str, Any], group: tuple[str, str], policy: PlacementPolicy) -> None:
    pod_affinity = _child(_child(spec, "affinity", {}), "podAffinity", {})
    preferred = _child(pod_affinity, "preferredDuringSchedulingIgnoredDuringExecution", [])
    key, value = group
    for weight, topology in ((100, policy.interconnect_label), (50, policy.network_block_label), (25, ZONE_KEY)):
        preferred.append({"weight": weight, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {key: value}}, "topologyKey": topology}})


def _names(items: Sequence[object], label: Callable[[object], str]) -> str:
    """At most MAX_ANNOTATION_NAMES labels and a count of the rest: O(1) however many items."""
    shown = ",".join(label(item) for item in items[:MAX_ANNOTATION_NAMES])
    return shown + (f",+{len(items) - MAX_ANNOTATION_NAMES} more" if len(items) > MAX_ANNOTATION_NAMES else "")


_VIEW = (("metadata", ("annotations", "labels")), ("spec", ("affinity", "topologySpreadConstraints")))


def scheduling_view(pod: dict[str, Any]) -> dict[str, Any]:
    """The part of the pod a mutation may change, with the same paths as in the pod."""
    view: dict[str, Any] = {}
    for top, keys in _VIEW:
        section = pod.get(top)
        if isinstance(section, dict):
            view[top] = {key: section[key] for key in keys if key in section}
    return view


def mutate_pod(pod: dict[str, Any], advice: NodeAdvice, *, snapshot_age_seconds: float | None,
               policy: PlacementPolicy, booking: str | None = None, claims: PodClaims | None = None) -> Mutation:
    """Add advice and workload terms to a copy of the pod's scheduling view; return the patch.
    `booking` is the id of the ledger's provisional booking for this pod, if one is made; `claims`
    its resolved ResourceClaims (a ComputeDomain channel names the job it packs with)."""
    original = scheduling_view(pod)
    mutated = json.loads(dump_json(original))  # a deep copy of JSON data, several times faster than deepcopy
    spec = _child(mutated, "spec", {})
    terms: list[str] = []
    parts: list[str] = []
    if advice.preferred:
        _add_node_preferences(spec, advice)
        terms.append("node-affinity")
        parts.append("preferred " + _names(advice.preferred, lambda p: f"{p.node}({p.weight})"))
    if advice.urgent:
        parts.insert(0, f"urgent: {advice.urgent}")
    if advice.ready:
        parts.append("ready " + ", ".join(f"{node} {estimate}" for node, estimate in advice.ready))
    excluded = set(advice.excluded)
    for word, chosen in (("excluded ", True), ("avoided ", False)):
        named = [a for a in advice.avoided if (a.node in excluded) is chosen]
        if named:
            parts.append(word + _names(named, lambda a: f"{a.node}({a.reason})"))
    if advice.left_open:
        parts.append(advice.left_open)
    if advice.excluded:
        _add_exclusions(spec, advice)
        terms.append("hard-avoid")
    if advice.domain is not None:
        label, value = advice.domain
        if advice.domain_required:
            _add_required_domain(spec, advice.domain)
            terms.append("domain")
        # the first worker is steered there by its preferred nodes; later ones are held to it
        parts.append(f"{'required' if advice.domain_required else 'domain'} {label}={value}")

    group = training_group(pod, policy, claims)
    replicas = None if group else replica_selector(pod, policy)
    if group:
        if group[0] == COMPUTE_DOMAIN_LABEL:  # the label the packing terms select the job's pods by
            _child(_child(mutated, "metadata", {}), "labels", {})[COMPUTE_DOMAIN_LABEL] = group[1]
        _add_packing(spec, group, policy)
        terms.append("pack")
        parts.append(f"pack {group[0]}={group[1]}")
    elif replicas and policy.replica_spread == "scheduler" and not _has_hostname_spread(spec) and not advice.urgent:
        _add_spread(spec, *replicas)
        terms.append("spread")
        parts.append("spread hostname")

    age = "no telemetry" if snapshot_age_seconds is None else f"telemetry {snapshot_age_seconds:.0f}s old"
    parts.append(age if advice.preferred or advice.avoided else f"{age}: {advice.reason}")
    annotation = "; ".join(parts)
    annotations = _child(_child(mutated, "metadata", {}), "annotations", {})
    annotations[ADVICE_ANNOTATION] = annotation
    if booking:
        annotations[BOOKING_ANNOTATION] = booking
    patch = json_diff(original, mutated)
    return Mutation(patch, annotation, tuple(terms))
