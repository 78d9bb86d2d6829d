"""The cluster as placement sees it at one moment: nodes, GPU units held, recent bindings. Pure, no I/O.

`webhook.cluster_watch` keeps it current from a list/watch of Nodes and Pods; the simulator builds
it from its world. Frozen, so one refresh's telemetry and cluster view are judged together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from scoring.cluster.claims import EMPTY_BOOK, ClaimBook
from scoring.cluster.feasibility import NodeFacts
from scoring.cluster.holdings import free_units

_EMPTY: Mapping[str, int] = {}

BOOKING_ANNOTATION = "gpu-balancer.io/booking"
"""Set by the webhook on steered pods: lets the replica that steered a pod recognise its binding
(admission of a generateName pod sees neither its name nor its uid)."""


@dataclass(frozen=True, slots=True)
class Binding:
    """A GPU pod seen bound to a node."""

    pod: str
    """namespace/name"""
    node: str
    units: tuple[tuple[str, int], ...]
    at: datetime
    booking: str = ""
    """The pod's booking annotation, when a webhook replica steered it."""


@dataclass(frozen=True)
class ClusterView:
    nodes: Mapping[str, NodeFacts]
    held: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Node → GPU resource → units requested by bound, non-terminal pods."""
    bound: frozenset[str] = frozenset()
    """namespace/name of every bound, non-terminal GPU pod counted in `held`."""
    taken_at: datetime | None = None
    claims: ClaimBook = EMPTY_BOOK
    """ResourceClaimTemplates and ResourceClaims, to count what a DRA pod asks for."""
    scaling: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(namespace, workload) → its HorizontalPodAutoscaler's load over target at its last sync
    (`scoring.cluster.autoscalers`), where an HPA scales it and has read its metrics."""

    @cached_property
    def image_sizes(self) -> Mapping[str, int]:
        """Every large image some node lists, and its size: what a node without it must pull.
        Worked out once per view, on the first admission that asks."""
        return {name: size for facts in self.nodes.values() for name, size in facts.images.items()}

    def free(self, node: str) -> dict[str, int]:
        facts = self.nodes.get(node)
        if facts is None:
            return {}
        return free_units(facts.allocatable, self.held.get(node, _EMPTY))

    def free_units(self, node: str, resource: str) -> int:
        """`free(node)[resource]` without building the dict (the ledger asks per candidate)."""
        facts = self.nodes.get(node)
        if facts is None:
            return 0
        return facts.allocatable.get(resource, 0) - self.held.get(node, _EMPTY).get(resource, 0)


def node_with_devices(facts: NodeFacts, devices: Mapping[str, int]) -> NodeFacts:
    """The node's facts with its ResourceSlices' GPU devices added to `allocatable` as
    `deviceclass/<class>` units."""
    return NodeFacts(facts.name, facts.labels, facts.taints, facts.unschedulable, {**facts.allocatable, **devices},
                     facts.images)
