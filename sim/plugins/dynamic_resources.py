"""DynamicResources, for GPU claims only: the policy's GPU DeviceClasses, counted by
`scoring.cluster.claims` (free devices of the class, `All`, `firstAvailable`, an allocated claim's node).
Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scoring.cluster.claims import pod_claims
from scoring.cluster.feasibility import NodeFacts, PodConstraints, why_infeasible
from sim.framework import Base, Cycle
from sim.node_state import NodeState

if TYPE_CHECKING:
    from sim.cluster_context import ClusterContext


def claimed_devices(pod: Mapping[str, Any], context: ClusterContext) -> Counter:
    """The DRA devices (deviceclass/<class> → count) the pod's GPU claims take on its node: each
    ExactCount request, one device for an `All` request and a `firstAvailable` request's first
    choice (the model binds what it most likely gets)."""
    claims = pod_claims(pod, context.claims, context.placement)
    if claims is None or not claims.asks_for_gpus:
        return Counter()
    devices = claims.likely_extra()
    devices.update(dict(claims.units))
    return devices


class DynamicResources(Base):
    name = "DynamicResources"

    def pre_filter(self, cycle: Cycle) -> None:
        claims = pod_claims(cycle.pod, cycle.context.claims, cycle.context.placement)
        cycle.state[self.name] = claims if claims is not None and (claims.missing or claims.asks_for_gpus) else None

    def filter(self, cycle: Cycle, node: NodeState) -> str | None:
        claims = cycle.state[self.name]
        if claims is None:
            return None
        if claims.missing:  # the scheduler waits for the claim to exist
            return f"{self.name}: claim {claims.missing[0]} not found"
        wanted = PodConstraints(units=claims.units, all_of=claims.all_of, alternatives=claims.alternatives,
                                allocated_to=claims.allocated_to)
        resources = {r for r, _ in claims.units} | set(claims.all_of) | {r for g in claims.alternatives for r, _ in g if r}
        allocatable = {r: int(node.allocatable.get(r, 0)) for r in resources}
        free = {r: allocatable[r] - int(node.requested[r]) for r in resources}
        return why_infeasible(wanted, NodeFacts(node.name, node.labels, (), False, allocatable), free)
