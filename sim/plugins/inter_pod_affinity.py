"""InterPodAffinity as kube-scheduler runs it: the required affinity / anti-affinity filter (the
incoming pod's terms and existing pods' anti-affinity towards it) and the preferred score (both
directions, and existing pods' required affinity at hardPodAffinityWeight 1). Pure, no I/O.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from scoring.cluster.objects import as_dict, as_list
from sim.framework import MAX_SCORE, Base, Cycle
from sim.kube_match import Labels, Selector, everything, label_selector, nothing, with_label_keys
from sim.plugins.pod_topology_spread import namespace_of, pod_labels

if TYPE_CHECKING:
    from sim.node_state import NodeState

HARD_POD_AFFINITY_WEIGHT = 1


@dataclass(frozen=True)
class Term:
    key: str
    namespaces: frozenset[str]
    namespace_selector: Selector
    selector: Selector
    weight: int = 0

    def matches(self, pod: Mapping[str, Any], namespace_labels: Labels | None) -> bool:
        in_namespace = namespace_of(pod) in self.namespaces or self.namespace_selector(namespace_labels or {})
        return in_namespace and self.selector(pod_labels(pod))


@dataclass(frozen=True)
class PodTerms:
    required_affinity: tuple[Term, ...]
    required_anti: tuple[Term, ...]
    preferred_affinity: tuple[Term, ...]
    preferred_anti: tuple[Term, ...]

    def __bool__(self) -> bool:
        return bool(self.required_affinity or self.required_anti or self.preferred_affinity or self.preferred_anti)


def _term(raw: object, pod: Mapping[str, Any], weight: int,
          namespaces_by_labels: Callable[[Selector], set[str]] | None) -> Term:
    raw = as_dict(raw)
    labels = pod_labels(pod)
    namespaces = {str(n) for n in as_list(raw.get("namespaces"))}
    selector_spec = raw.get("namespaceSelector")
    if not namespaces and selector_spec is None:
        namespaces = {namespace_of(pod)}
    namespace_selector = label_selector(selector_spec) if selector_spec is not None else nothing
    # The incoming pod's terms have their namespace selector resolved to namespaces up front
    # (an empty selector stays "every namespace").
    if namespaces_by_labels is not None and namespace_selector not in (nothing, everything):
        namespaces |= namespaces_by_labels(namespace_selector)
        namespace_selector = nothing
    selector = with_label_keys(label_selector(raw.get("labelSelector")), labels,
                               as_list(raw.get("matchLabelKeys")), as_list(raw.get("mismatchLabelKeys")))
    return Term(str(raw.get("topologyKey", "")), frozenset(namespaces), namespace_selector, selector, weight)


def terms_of(pod: Mapping[str, Any],
             namespaces_by_labels: Callable[[Selector], set[str]] | None = None) -> PodTerms:
    affinity = as_dict(as_dict(pod.get("spec")).get("affinity"))

    def parse(kind: str) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
        section = as_dict(affinity.get(kind))
        required = tuple(_term(t, pod, 0, namespaces_by_labels)
                         for t in as_list(section.get("requiredDuringSchedulingIgnoredDuringExecution")))
        preferred = tuple(_term(as_dict(t).get("podAffinityTerm"), pod, int(as_dict(t).get("weight") or 0),
                                namespaces_by_labels)
                          for t in as_list(section.get("preferredDuringSchedulingIgnoredDuringExecution")))
        return required, preferred

    required_affinity, preferred_affinity = parse("podAffinity")
    required_anti, preferred_anti = parse("podAntiAffinity")
    return PodTerms(required_affinity, required_anti, preferred_affinity, preferred_anti)


class AffinityCounts:
    """One pod's pod-affinity terms against one cluster state, and existing pods' terms towards it."""

    def __init__(self, pod: Mapping[str, Any], nodes: Sequence[NodeState], *,
                 namespace_labels: Mapping[str, Labels]) -> None:
        self.pod, self.nodes = pod, nodes
        self.own_namespace_labels = namespace_labels.get(namespace_of(pod), {})
        self.terms = terms_of(pod, lambda selector: {n for n, labels in namespace_labels.items() if selector(labels)})

    @cached_property
    def _existing(self) -> dict[tuple[str, str], tuple[NodeState, PodTerms]]:
        """(node name, pod key) → the node and the terms of each existing pod that has any,
        parsed once for the filter and the score alike."""
        return {(node.name, key): (node, terms_of(p)) for node in self.nodes for key, p in node.affinity_pods.items()}

    def filter(self) -> Callable[[NodeState], str | None]:
        """A function naming why a node fails (None: it passes)."""
        terms = self.terms
        affinity: Counter = Counter()
        anti: Counter = Counter()
        existing_anti: Counter = Counter()
        if terms.required_affinity or terms.required_anti:
            for node in self.nodes:
                for p in node.pods.values():
                    if terms.required_affinity and all(t.matches(p, None) for t in terms.required_affinity):
                        affinity.update((t.key, node.labels[t.key]) for t in terms.required_affinity
                                        if t.key in node.labels)
                    anti.update((t.key, node.labels[t.key]) for t in terms.required_anti
                                if t.key in node.labels and t.matches(p, None))
        for node, theirs in self._existing.values():
            existing_anti.update((t.key, node.labels[t.key]) for t in theirs.required_anti
                                 if t.key in node.labels and t.matches(self.pod, self.own_namespace_labels))
        first_of_group = not affinity and all(t.matches(self.pod, None) for t in terms.required_affinity)

        def why(node: NodeState) -> str | None:
            if terms.required_affinity:
                if any(t.key not in node.labels for t in terms.required_affinity):
                    return "node(s) didn't match pod affinity rules"
                if not all(affinity[(t.key, node.labels[t.key])] > 0 for t in terms.required_affinity) \
                        and not first_of_group:
                    return "node(s) didn't match pod affinity rules"
            if any(t.key in node.labels and anti[(t.key, node.labels[t.key])] > 0 for t in terms.required_anti):
                return "node(s) didn't match pod anti-affinity rules"
            if existing_anti and any(existing_anti[pair] > 0 for pair in node.labels.items()):
                return "node(s) didn't satisfy existing pods anti-affinity rules"
            return None
        return why

    def raw_scores(self, feasible: Sequence[NodeState]) -> dict[str, int] | None:
        """Each feasible node's sum of the terms' weights over its topology domains; None when no
        term counts anywhere (every node scores 0)."""
        terms = self.terms
        preferred = bool(terms.preferred_affinity or terms.preferred_anti)
        topology: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

        def add(term: Term, node: NodeState, amount: int) -> None:
            if term.key in node.labels:
                topology[term.key][node.labels[term.key]] += amount

        for node in self.nodes:
            if not node.labels:
                continue
            for key, p in (node.pods.items() if preferred else node.affinity_pods.items()):
                for t in terms.preferred_affinity:
                    if t.matches(p, None):
                        add(t, node, t.weight)
                for t in terms.preferred_anti:
                    if t.matches(p, None):
                        add(t, node, -t.weight)
                if (node.name, key) not in self._existing:
                    continue
                _, theirs = self._existing[(node.name, key)]
                for t in theirs.required_affinity:
                    if t.matches(self.pod, self.own_namespace_labels):
                        add(t, node, HARD_POD_AFFINITY_WEIGHT)
                for t in theirs.preferred_affinity:
                    if t.matches(self.pod, self.own_namespace_labels):
                        add(t, node, t.weight)
                for t in theirs.preferred_anti:
                    if t.matches(self.pod, self.own_namespace_labels):
                        add(t, node, -t.weight)
        raw = {n.name: sum(values.get(n.labels[key], 0) for key, values in topology.items() if key in n.labels)
               for n in feasible}
        return raw if topology else None


def normalize_affinity(raw: Mapping[str, int]) -> dict[str, int]:
    """Scaled from the lowest (0) to the highest (100); all 0 when every node scores alike."""
    if not raw:
        return {}
    low, high = min(raw.values()), max(raw.values())
    return {name: int(MAX_SCORE * ((value - low) / (high - low))) if high > low else 0
            for name, value in raw.items()}


class InterPodAffinity(Base):
    name = "InterPodAffinity"

    def _terms(self, cycle: Cycle) -> AffinityCounts:
        key = f"{self.name}/terms"
        if key not in cycle.state:
            cycle.state[key] = AffinityCounts(cycle.pod, cycle.nodes, namespace_labels=cycle.context.namespace_labels)
        return cycle.state[key]

    def pre_filter(self, cycle: Cycle) -> None:
        cycle.state[f"{self.name}/filter"] = self._terms(cycle).filter()

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        return None if cycle.state[f"{self.name}/filter"](node) is None else self.name

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        cycle.state[self.name] = self._terms(cycle).raw_scores(feasible)

    def score(self, cycle: Cycle, node: NodeState) -> int:
        raw = cycle.state[self.name]
        return raw[node.name] if raw is not None else 0

    def normalize(self, cycle: Cycle, scores: dict[str, int]) -> dict[str, int]:
        if cycle.state[self.name] is None:
            return {name: 0 for name in scores}
        return normalize_affinity(scores)
