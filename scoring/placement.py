"""Placement advice: which nodes a new GPU pod should prefer and which it should avoid. Pure, no I/O.

The advice is bounded (at most K preferred nodes, at most N avoided) whatever the fleet size, and
it accounts for load steered since the telemetry was taken (`pending_gpus`), so a burst of pods
inside one telemetry interval is spread in proportion to each node's free GPUs instead of all
being sent to the same coolest node.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from scoring.heat import FleetHeat, NodeHeat, Tier
from scoring.policy import PlacementPolicy

_TIER_FACTOR = {Tier.COOL: 1.0, Tier.WARM: 0.5}
"""Warm nodes are preferred only after cool ones: half the headroom score."""


@dataclass(frozen=True, slots=True)
class NodePreference:
    node: str
    weight: int
    """1–100: the scheduler normalises preferred weights, so only their ratios matter."""


@dataclass(frozen=True, slots=True)
class NodeAvoidance:
    node: str
    reason: str
    """The node's tier, e.g. "hot" or "unhealthy"."""


@dataclass(frozen=True, slots=True)
class NodeAdvice:
    preferred: tuple[NodePreference, ...]
    avoided: tuple[NodeAvoidance, ...]
    """Hot and unhealthy nodes: never preferred; named in a required NotIn when `hard` is set."""
    hard: bool
    reason: str
    """One line on why the advice is what it is (for the pod's annotation and the logs)."""


NO_ADVICE = NodeAdvice((), (), False, "no telemetry")


def headroom(node: NodeHeat, pending_gpus: int) -> float:
    """How attractive a node is for one more pod, 0–1; zero for hot, unhealthy or full nodes.

    Idle GPU cycles times the share of the node's free GPUs not yet promised to pods steered
    since the telemetry was taken: as a node is promised pods its score falls in proportion to
    its free GPUs, so a burst spreads over nodes in proportion to what each has free.
    """
    factor = _TIER_FACTOR.get(node.tier, 0.0)
    free = node.gpus_free
    if factor == 0.0 or free <= 0 or pending_gpus >= free:
        return 0.0
    idle_cycles = 1.0 - node.gpu_util / 100.0
    memory_room = 1.0 - node.memory_used_fraction / 2.0
    return factor * (0.25 + 0.75 * idle_cycles) * memory_room * (1.0 - pending_gpus / free)


def advise(fleet: FleetHeat, *, gpus_requested: int, pending_gpus: Mapping[str, int],
           policy: PlacementPolicy) -> NodeAdvice:
    """Preferred and avoided nodes for a pod that needs `gpus_requested` whole GPUs (0 for a
    fractional or shared GPU: any node with a free GPU will do)."""
    if fleet.stale:
        return NO_ADVICE
    need = max(1, gpus_requested)
    scored = []
    for node in fleet.nodes:
        pending = pending_gpus.get(node.name, 0)
        if node.gpus_free - pending >= need:
            score = headroom(node, pending)
            if score > 0:
                scored.append((score, node.gpus_free - pending, node.name))
    best = heapq.nlargest(policy.max_preferred_nodes, scored)  # ties: more free GPUs, then name
    preferred = tuple(NodePreference(name, max(1, round(100 * score / best[0][0]))) for score, _, name in best)

    avoided = tuple(NodeAvoidance(n.name, str(n.tier)) for n in fleet.nodes if n.tier >= Tier.HOT)
    spare = sum(free for _, free, _ in scored) - need
    hard = (policy.hard_avoid_hot and bool(avoided) and spare >= policy.hard_avoid_min_spare_gpus
            and len(avoided) <= policy.max_avoided_nodes)
    if not preferred:
        reason = f"no cool or warm node has {need} free GPU(s)"
    elif policy.hard_avoid_hot and avoided and not hard:
        reason = "hard avoidance skipped: too little cool capacity or too many hot nodes"
    else:
        reason = f"{len(scored)} node(s) with room"
    return NodeAdvice(preferred, avoided, hard, reason)
