"""A model of the default kube-scheduler profile for what matters to GPU placement. Pure, no I/O.

Works on Kubernetes JSON (pods and nodes as `kubectl get -o json` prints them), so the simulator
and `gpu-balancer explain` share it. Filters, in the default profile's order: NodeUnschedulable,
NodeName, TaintToleration (NoSchedule/NoExecute), NodeAffinity (nodeSelector and required
terms), NodePorts, NodeResourcesFit (pod count, cpu, memory and every extended resource),
PodTopologySpread (DoNotSchedule), InterPodAffinity (required terms both ways). Scores, each
normalised as the plugin does (integers, as upstream) and weighted as the default profile:
TaintToleration ×3 (intolerable PreferNoSchedule taints), NodeAffinity ×2, PodTopologySpread ×2,
InterPodAffinity ×2, NodeResourcesFit (LeastAllocated on cpu and memory with the non-zero
defaults; GPUs are filtered on, never scored) ×1, BalancedAllocation ×1, ImageLocality ×1.

DynamicResources filters GPU claims only (the policy's GPU DeviceClasses, counted by
`scoring.cluster.claims`: free devices of the class, `All`, `firstAvailable`, an allocated claim's node);
claimed devices are bound with their pod (`NodeState.bind(pod, devices)`).

Not modelled: volumes (VolumeBinding, VolumeZone, VolumeRestrictions, NodeVolumeLimits),
preemption, claims for devices that are not GPUs, DRA's device selectors and constraints,
pod-level resources, scheduling gates and the percentage-of-nodes-to-score sampling (every
feasible node is scored).

The plugins run in the scheduling framework (`sim.framework`), one module each in `sim/plugins/`,
as the profile (`sim.scheduler_profile`) names and weighs them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from scoring.cluster.claims import EMPTY_BOOK, ClaimBook, class_of
from scoring.cluster.feasibility import NodeFacts, taints_from
from scoring.cluster.images import node_images
from scoring.cluster.view import ClusterView
from sim.cluster_context import NO_CONTEXT, ClusterContext
from sim.framework import Cycle, NodeVerdict, run_cycle
from sim.node_state import NodeState, status_images
from sim.plugins import REGISTRY


def evaluate(pod: Mapping[str, Any], nodes: list[NodeState], *, score_gpus: bool = False,
             context: ClusterContext = NO_CONTEXT) -> list[NodeVerdict]:
    """Filter and score every node for `pod`, as the context's profile (the default one unless
    told otherwise) would."""
    profile = context.profile
    filters = [REGISTRY[name] for name in profile.filters]
    scorers = [(REGISTRY[name], weight) for name, weight in profile.weights.items()]
    return run_cycle(Cycle(pod, nodes, context, score_gpus), filters, scorers)


def view_of(nodes: Iterable[NodeState], now: datetime, claims: ClaimBook = EMPTY_BOOK) -> ClusterView:
    """The nodes as the webhook's cluster view shows them: GPU resources (extended and DRA) and
    the units bound pods hold (the model binds a pod's claimed devices with it and unbinds what
    ends, so its requests are `scoring.cluster.holdings`' held units)."""
    facts, held, bound = {}, {}, set()
    for node in nodes:
        allocatable = {r: int(q) for r, q in node.allocatable.items() if r.startswith("nvidia.com/") or class_of(r)}
        facts[node.name] = NodeFacts(node.name, node.labels, taints_from(node.taints), node.unschedulable, allocatable,
                                     node_images({"status": {"images": status_images(node)}}))
        held[node.name] = {r: int(node.requested[r]) for r in allocatable if node.requested[r]}
        bound.update(node.pods)
    return ClusterView(facts, held, frozenset(bound), now, claims)


def choose(verdicts: list[NodeVerdict], rng: random.Random) -> str | None:
    """The node with the top total; ties broken at random, as the scheduler does."""
    feasible = [v for v in verdicts if v.feasible]
    if not feasible:
        return None
    best = max(v.total for v in feasible)
    return rng.choice([v.name for v in feasible if v.total >= best - 1e-9])
