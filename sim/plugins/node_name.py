"""NodeName: a pod that names its node goes there or nowhere. Pure, no I/O."""

from __future__ import annotations

from sim.framework import Base, Cycle
from sim.node_state import NodeState


class NodeName(Base):
    name = "NodeName"

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        wanted = cycle.spec.get("nodeName")
        return self.name if wanted and wanted != node.name else None
