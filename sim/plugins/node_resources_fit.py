"""NodeResourcesFit: the pod's requests must fit what the node has left (pod count, cpu, memory,
ephemeral storage, every extended resource); the LeastAllocated score on cpu and memory, with the
non-zero defaults for containers that request none. Pure, no I/O.

GPUs are filtered on, never scored, unless the cycle scores them (`Cycle.score_gpus`): the
default profile's scoring resources are cpu and memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sim.framework import MAX_SCORE, Base, Cycle
from sim.node_state import NodeState, scored_requests
from sim.pod_requests import pod_requests


def extended(resource: str) -> bool:
    return "/" in resource or resource.startswith("hugepages-")


def scored_resources(cycle: Cycle) -> tuple[str, ...]:
    """cpu and memory, and the GPUs the pod asks for where the cycle scores them."""
    gpus = tuple(r for r in cycle.need if r.startswith("nvidia.com/")) if cycle.score_gpus else ()
    return ("cpu", "memory") + gpus


def _integer(resource: str, amount: float) -> int:
    return round(amount * 1000) if resource == "cpu" else round(amount)


def allocation(node: NodeState, need: Counter, resources: tuple[str, ...], *,
               non_zero: bool, with_pod: bool = True) -> list[tuple[int, int]]:
    """(requested with the pod — or without, for the balance before it — and allocatable) per
    scored resource, in the plugins' integer units; an extended resource the pod does not ask
    for, or one the node lacks, is not scored."""
    out = []
    for r in resources:
        if extended(r) and need[r] == 0:
            continue
        capacity = _integer(r, node.allocatable.get(r, 0))
        if capacity == 0:
            continue
        base = node.non_zero_requested if non_zero and r in ("cpu", "memory") else node.requested
        out.append((_integer(r, base[r] + (need[r] if with_pod else 0)), capacity))
    return out


class NodeResourcesFit(Base):
    name = "NodeResourcesFit"

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        if "pods" in node.allocatable and len(node.pods) + 1 > node.allocatable["pods"]:
            return self.name
        short = any(amount > node.allocatable.get(r, 0) - node.requested[r] + 1e-9
                    for r, amount in cycle.need.items()
                    if amount > 0 and (r in ("cpu", "memory", "ephemeral-storage") or extended(r)))
        return self.name if short else None

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        resources = scored_resources(cycle)
        non_zero = scored_requests(pod_requests(cycle.pod, non_zero=True)) + Counter(
            {r: cycle.need[r] for r in resources[2:]})
        cycle.state[self.name] = resources, non_zero

    def score(self, cycle: Cycle, node: NodeState) -> int:
        """LeastAllocated: the mean over scored resources of the share left free, 0–100."""
        resources, non_zero = cycle.state[self.name]
        scores = [0 if requested > capacity else (capacity - requested) * MAX_SCORE // capacity
                  for requested, capacity in allocation(node, non_zero, resources, non_zero=True)]
        return sum(scores) // len(scores) if scores else 0
