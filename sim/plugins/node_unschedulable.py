"""NodeUnschedulable: a cordoned node takes only pods that tolerate its unschedulable taint. Pure, no I/O."""

from __future__ import annotations

from sim.framework import Base, Cycle
from sim.kube_match import tolerates
from sim.node_state import NodeState

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class NodeUnschedulable(Base):
    name = "NodeUnschedulable"

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        if node.unschedulable and not tolerates(UNSCHEDULABLE_TAINT, cycle.tolerations):
            return self.name
        return None
