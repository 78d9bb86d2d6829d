"""NodePorts: a pod's host ports must be free on the node. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scoring.cluster.objects import as_dict, as_list
from sim.framework import Base, Cycle
from sim.node_state import NodeState


def host_ports(pod: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(host IP, protocol, port) of every container port the pod binds on its host."""
    ports = []
    for container in as_list(as_dict(pod.get("spec")).get("containers")):
        for port in as_list(as_dict(container).get("ports")):
            port = as_dict(port)
            if int(port.get("hostPort") or 0) > 0:
                ports.append((str(port.get("hostIP") or "0.0.0.0"), str(port.get("protocol") or "TCP"),
                              int(port["hostPort"])))
    return ports


class NodePorts(Base):
    name = "NodePorts"

    def pre_filter(self, cycle: Cycle) -> None:
        cycle.state[self.name] = host_ports(cycle.pod)

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        wanted = cycle.state[self.name]
        if not wanted:
            return None
        used = [p for other in node.pods.values() for p in host_ports(other)]
        clash = any(protocol == p and port == q and (ip == i or "0.0.0.0" in (ip, i))
                    for ip, protocol, port in wanted for i, p, q in used)
        return self.name if clash else None
