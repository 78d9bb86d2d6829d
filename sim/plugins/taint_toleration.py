"""TaintToleration: NoSchedule and NoExecute taints filter; intolerable PreferNoSchedule taints
count against a node (reverse-normalised). Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from sim.framework import Base, Cycle, default_normalize
from sim.kube_match import tolerates
from sim.node_state import NodeState


class TaintToleration(Base):
    name = "TaintToleration"

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        if any(t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(t, cycle.tolerations)
               for t in node.taints):
            return self.name
        return None

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        cycle.state[self.name] = [t for t in cycle.tolerations if t.get("effect") in (None, "", "PreferNoSchedule")]

    def score(self, cycle: Cycle, node: NodeState) -> int:
        soft = cycle.state[self.name]
        return sum(1 for t in node.taints if t.get("effect") == "PreferNoSchedule" and not tolerates(t, soft))

    def normalize(self, cycle: Cycle, scores: dict[str, int]) -> dict[str, int]:
        return default_normalize(scores, reverse=True)
