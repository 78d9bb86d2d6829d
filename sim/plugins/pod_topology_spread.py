"""PodTopologySpread as kube-scheduler runs it: the DoNotSchedule filter and the ScheduleAnyway
score, with their counting rules. Pure, no I/O.

Counting: pods in the incoming pod's namespace, not terminating, matched by the constraint's
selector (an absent selector matches nothing), on nodes that carry every topology key of the
pod's constraints and pass the constraint's node inclusion policies (`nodeAffinityPolicy`
Honor and `nodeTaintsPolicy` Ignore by default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scoring.cluster.objects import as_dict, as_list
from sim.framework import MAX_SCORE, Base, Cycle
from sim.kube_match import Labels, Selector, label_selector, tolerates, with_label_keys

if TYPE_CHECKING:
    from sim.node_state import NodeState

HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Constraint:
    key: str
    max_skew: int
    selector: Selector
    min_domains: int | None = None
    honour_affinity: bool = True
    honour_taints: bool = False


def constraints_of(pod: Mapping[str, Any], action: str) -> list[Constraint]:
    """The pod's own constraints with `whenUnsatisfiable` equal to `action`."""
    labels = pod_labels(pod)
    out = []
    for c in as_list(as_dict(pod.get("spec")).get("topologySpreadConstraints")):
        c = as_dict(c)
        if (c.get("whenUnsatisfiable") or "DoNotSchedule") != action:
            continue
        selector = with_label_keys(label_selector(c.get("labelSelector")), labels, as_list(c.get("matchLabelKeys")))
        out.append(Constraint(str(c.get("topologyKey", "")), int(c.get("maxSkew") or 1), selector,
                              int(c["minDomains"]) if c.get("minDomains") else None,
                              c.get("nodeAffinityPolicy", "Honor") != "Ignore", c.get("nodeTaintsPolicy") == "Honor"))
    return out


def pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in as_dict(as_dict(pod.get("metadata")).get("labels")).items() if isinstance(v, str)}


def namespace_of(pod: Mapping[str, Any]) -> str:
    return str(as_dict(pod.get("metadata")).get("namespace") or "default")


def terminating(pod: Mapping[str, Any]) -> bool:
    return bool(as_dict(pod.get("metadata")).get("deletionTimestamp"))


class Spread:
    """One pod's spreading against one cluster state: the per-node counts are worked out once."""

    def __init__(self, pod: Mapping[str, Any], nodes: Sequence[NodeState], *,
                 affinity_ok: Callable[[NodeState], bool], tolerations: list[dict]) -> None:
        self.pod, self.nodes = pod, nodes
        self.namespace = namespace_of(pod)
        self.affinity_ok, self.tolerations = affinity_ok, tolerations
        self._counts: dict[tuple[int, str], int] = {}

    def count(self, constraint: Constraint, node: NodeState) -> int:
        key = (id(constraint), node.name)
        if key not in self._counts:
            self._counts[key] = sum(1 for p in node.pods.values()
                                    if namespace_of(p) == self.namespace and not terminating(p)
                                    and constraint.selector(pod_labels(p)))
        return self._counts[key]

    def includes(self, constraint: Constraint, node: NodeState) -> bool:
        if constraint.honour_affinity and not self.affinity_ok(node):
            return False
        return not constraint.honour_taints or all(
            tolerates(t, self.tolerations) for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute"))

    # -- filter -----------------------------------------------------------------------------

    def filter(self, constraints: list[Constraint]) -> Callable[[NodeState], bool]:
        """DoNotSchedule: a node passes when its domain's count, plus one if the pod matches its
        own selector, exceeds the smallest domain's by at most maxSkew (the smallest counts as 0
        while fewer than minDomains domains exist)."""
        if not constraints:
            return lambda node: True
        domains: list[dict[str, int]] = [{} for _ in constraints]
        for node in self.nodes:
            if not all(c.key in node.labels for c in constraints):
                continue
            for i, c in enumerate(constraints):
                if self.includes(c, node):
                    value = node.labels[c.key]
                    domains[i][value] = domains[i].get(value, 0) + self.count(c, node)
        own = pod_labels(self.pod)

        def passes(node: NodeState) -> bool:
            for i, c in enumerate(constraints):
                if c.key not in node.labels:
                    return False
                counts = domains[i]
                minimum = min(counts.values()) if counts else math.inf
                if c.min_domains is not None and len(counts) < c.min_domains:
                    minimum = 0
                if counts.get(node.labels[c.key], 0) + (1 if c.selector(own) else 0) - minimum > c.max_skew:
                    return False
            return True
        return passes

    # -- score ------------------------------------------------------------------------------

    def raw_scores(self, constraints: list[Constraint], feasible: Sequence[NodeState], *,
                   require_all_keys: bool) -> dict[str, int]:
        """ScheduleAnyway's raw scores: each constraint adds count × ln(domains + 2) + (maxSkew − 1).
        Nodes missing a topology key (when every key is required) are left out: they score 0."""
        ignored = {n.name for n in feasible if require_all_keys and not _has_keys(n.labels, constraints)}
        domains: list[dict[str, int]] = [{} for _ in constraints]
        for node in feasible:
            if node.name in ignored:
                continue
            for i, c in enumerate(constraints):
                if c.key != HOSTNAME:
                    domains[i].setdefault(node.labels.get(c.key, ""), 0)
        weights = [math.log((len(feasible) - len(ignored) if c.key == HOSTNAME else len(domains[i])) + 2)
                   for i, c in enumerate(constraints)]
        for node in self.nodes:
            if require_all_keys and not _has_keys(node.labels, constraints):
                continue
            for i, c in enumerate(constraints):
                value = node.labels.get(c.key, "")
                if c.key != HOSTNAME and value in domains[i] and self.includes(c, node):
                    domains[i][value] += self.count(c, node)
        raw: dict[str, int] = {}
        for node in feasible:
            if node.name in ignored:
                continue
            total = 0.0
            for i, c in enumerate(constraints):
                if c.key in node.labels:
                    count = self.count(c, node) if c.key == HOSTNAME else domains[i][node.labels[c.key]]
                    total += count * weights[i] + (c.max_skew - 1)
            raw[node.name] = math.floor(total + 0.5)  # Go's math.Round, for scores that are never negative
        return raw


def normalize_spread(raw: Mapping[str, int], feasible: Sequence[str]) -> dict[str, int]:
    """100 × (max + min − s) / max over the scored nodes; the nodes left out score 0."""
    low, high = min(raw.values(), default=0), max(raw.values(), default=0)
    out = {name: 0 for name in feasible}
    for name, value in raw.items():
        out[name] = MAX_SCORE if high == 0 else MAX_SCORE * (high + low - value) // high
    return out


def _has_keys(labels: Labels, constraints: list[Constraint]) -> bool:
    return all(c.key in labels for c in constraints)


SYSTEM_DEFAULT_SPREAD = ((3, HOSTNAME), (5, "topology.kubernetes.io/zone"))
"""The scheduler's default ScheduleAnyway spread (maxSkew, key) for pods that declare none."""


def default_constraints(cycle: Cycle) -> list[Constraint]:
    """System-default spreading, by the selectors of the controllers that select the pod (in the
    simulator, the pod's own labels when a ReplicaSet, StatefulSet or ReplicationController owns it)."""
    pod, context = cycle.pod, cycle.context
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


class PodTopologySpread(Base):
    """DoNotSchedule constraints filter; ScheduleAnyway ones score (or, for a pod that declares
    none, the system default spreading by its controllers)."""

    name = "PodTopologySpread"

    def _spread(self, cycle: Cycle) -> Spread:
        key = f"{self.name}/counts"
        if key not in cycle.state:
            cycle.state[key] = Spread(cycle.pod, cycle.nodes, affinity_ok=cycle.affinity_ok,
                                      tolerations=cycle.tolerations)
        return cycle.state[key]

    def pre_filter(self, cycle: Cycle) -> None:
        cycle.state[f"{self.name}/filter"] = self._spread(cycle).filter(constraints_of(cycle.pod, "DoNotSchedule"))

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        return None if cycle.state[f"{self.name}/filter"](node) else self.name

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        if as_list(cycle.spec.get("topologySpreadConstraints")):
            soft, require_all = constraints_of(cycle.pod, "ScheduleAnyway"), True
        else:
            soft, require_all = default_constraints(cycle), False
        raw = self._spread(cycle).raw_scores(soft, feasible, require_all_keys=require_all) if soft else None
        cycle.state[self.name] = raw

    def score(self, cycle: Cycle, node: NodeState) -> int:
        raw = cycle.state[self.name]
        return raw.get(node.name, 0) if raw is not None else 0

    def normalize(self, cycle: Cycle, scores: dict[str, int]) -> dict[str, int]:
        raw = cycle.state[self.name]
        if raw is None:
            return {name: 0 for name in scores}
        return normalize_spread(raw, list(scores))
