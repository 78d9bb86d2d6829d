"""kube-scheduler's scheduling framework in miniature: the plugin protocol, one pod's scheduling
cycle, and the run of a profile's plugins over the nodes. Pure, no I/O.

As upstream, a plugin implements the extension points it needs: PreFilter (work done once per pod),
Filter (may this node take the pod? a reason when not), PreScore (work done once over the feasible
nodes), Score (a node's raw score) and NormalizeScore (the raw scores brought to 0–100). The
profile (`sim.scheduler_profile`) says which plugins run at Filter and which score, with what
weight; the plugins themselves are in `sim/plugins/`, one module each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from scoring.cluster.objects import as_dict, as_list
from sim.kube_match import node_selector_term
from sim.pod_requests import pod_requests

if TYPE_CHECKING:
    from sim.cluster_context import ClusterContext
    from sim.node_state import NodeState

MAX_SCORE = 100


@dataclass
class Cycle:
    """One pod's scheduling cycle against one cluster state: what several plugins read of the pod,
    worked out once, and `state` where a plugin keeps what its PreFilter or PreScore found (upstream's
    CycleState)."""

    pod: Mapping[str, Any]
    nodes: Sequence[NodeState]
    context: ClusterContext
    score_gpus: bool = False
    """Whether NodeResourcesFit and BalancedAllocation score the GPUs the pod asks for."""
    state: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def spec(self) -> Mapping[str, Any]:
        return as_dict(self.pod.get("spec"))

    @cached_property
    def need(self) -> Counter:
        return pod_requests(self.pod)

    @cached_property
    def tolerations(self) -> list[dict]:
        return [t for t in as_list(self.spec.get("tolerations")) if isinstance(t, dict)]

    @cached_property
    def node_affinity(self) -> Mapping[str, Any]:
        return as_dict(as_dict(self.spec.get("affinity")).get("nodeAffinity"))

    @cached_property
    def _required(self) -> tuple[bool, list[Any], dict[str, str]]:
        required = as_dict(self.node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
        terms = [node_selector_term(t) for t in as_list(required.get("nodeSelectorTerms"))]
        selector = {k: str(v) for k, v in as_dict(self.spec.get("nodeSelector")).items()}
        return bool(required), terms, selector

    def affinity_ok(self, node: NodeState) -> bool:
        """The pod's nodeSelector and required node affinity (NodeAffinity's filter, which
        PodTopologySpread's node inclusion policy reads too)."""
        required, terms, selector = self._required
        if any(node.labels.get(k) != v for k, v in selector.items()):
            return False
        return not required or any(term(node.name, node.labels) for term in terms)


class Plugin(Protocol):
    name: ClassVar[str]


class FilterPlugin(Plugin, Protocol):
    def pre_filter(self, cycle: Cycle) -> None: ...

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        """None when the node passes; otherwise why not (the plugin's name where it says no more)."""


class ScorePlugin(Plugin, Protocol):
    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None: ...

    def score(self, cycle: Cycle, node: NodeState) -> int: ...

    def normalize(self, cycle: Cycle, scores: dict[str, int]) -> dict[str, int]: ...


class Base:
    """No-op extension points, for plugins to override the ones they implement."""

    name: ClassVar[str] = ""

    def pre_filter(self, cycle: Cycle) -> None:
        return None

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        return None

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        return None

    def score(self, cycle: Cycle, node: NodeState) -> int:
        return 0

    def normalize(self, cycle: Cycle, scores: dict[str, int]) -> dict[str, int]:
        return scores


def default_normalize(scores: Mapping[str, int], *, reverse: bool) -> dict[str, int]:
    """The framework's DefaultNormalizeScore: scaled so the highest is 100 (reversed: the lowest)."""
    high = max(scores.values(), default=0)
    if high == 0:
        return {name: MAX_SCORE if reverse else 0 for name in scores}
    return {name: MAX_SCORE - MAX_SCORE * v // high if reverse else MAX_SCORE * v // high
            for name, v in scores.items()}


@dataclass(frozen=True)
class NodeVerdict:
    name: str
    feasible: bool
    failed_filter: str | None
    scores: dict[str, float]
    total: float


def run_cycle(cycle: Cycle, filters: Sequence[FilterPlugin],
              scorers: Sequence[tuple[ScorePlugin, int]]) -> list[NodeVerdict]:
    """Filter every node (the first plugin to refuse names the reason), then score the feasible
    ones with each weighted plugin and add them up."""
    for plugin in filters:
        plugin.pre_filter(cycle)
    feasible, failed = [], {}
    for node in cycle.nodes:
        reason = next((why for plugin in filters if (why := plugin.filter(cycle, node)) is not None), None)
        if reason is None:
            feasible.append(node)
        else:
            failed[node.name] = reason
    normalized: dict[str, dict[str, int]] = {}
    for plugin, _ in scorers:
        plugin.pre_score(cycle, feasible)
        normalized[plugin.name] = plugin.normalize(cycle, {n.name: plugin.score(cycle, n) for n in feasible})
    verdicts = []
    for node in cycle.nodes:
        if node.name in failed:
            verdicts.append(NodeVerdict(node.name, False, failed[node.name], {}, 0.0))
            continue
        mine = {plugin.name: float(normalized[plugin.name][node.name]) for plugin, _ in scorers}
        total = sum(weight * mine[plugin.name] for plugin, weight in scorers)
        verdicts.append(NodeVerdict(node.name, True, None, mine, total))
    return verdicts
