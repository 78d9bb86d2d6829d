"""BalancedAllocation: prefers nodes whose scored resources stay evenly used with the pod. Pure, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.framework import MAX_SCORE, Base, Cycle
from sim.node_state import NodeState
from sim.plugins.node_resources_fit import allocation, scored_resources


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


class BalancedAllocation(Base):
    name = "BalancedAllocation"

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        resources = scored_resources(cycle)
        # A pod requesting none of the scored resources is skipped (kube-scheduler issue #129138):
        # otherwise best-effort pods all pile onto the most balanced node.
        cycle.state[self.name] = resources if any(cycle.need[r] for r in resources) else None

    def score(self, cycle: Cycle, node: NodeState) -> int:
        """kube-scheduler v1.37's balancedResourceScorer: the balance with the pod against without
        it, brought into [50, 100] (Go's integer division truncates)."""
        resources = cycle.state[self.name]
        if resources is None:
            return 0
        change = (MAX_SCORE // 2 + _balance(allocation(node, cycle.need, resources, non_zero=False))
                  - _balance(allocation(node, cycle.need, resources, non_zero=False, with_pod=False)))
        return MAX_SCORE // 2 + int(change / 2)
