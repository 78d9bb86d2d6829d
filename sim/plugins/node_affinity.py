"""NodeAffinity: nodeSelector and required terms filter; preferred terms' weights score. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from scoring.cluster.objects import as_dict, as_list
from sim.framework import Base, Cycle, default_normalize
from sim.kube_match import node_selector_term
from sim.node_state import NodeState


class NodeAffinity(Base):
    name = "NodeAffinity"

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        return None if cycle.affinity_ok(node) else self.name

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        cycle.state[self.name] = [
            (int(as_dict(p).get("weight") or 0), node_selector_term(as_dict(p).get("preference")))
            for p in as_list(cycle.node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))]

    def score(self, cycle: Cycle, node: NodeState) -> int:
        return sum(weight for weight, term in cycle.state[self.name] if term(node.name, node.labels))

    def normalize(self, cycle: Cycle, scores: dict[str, int]) -> dict[str, int]:
        return default_normalize(scores, reverse=False)
