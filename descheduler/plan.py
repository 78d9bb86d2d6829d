"""Eviction planning: the strategies' sources merged under the limits, the opt-in, the ledger and
the payback rule. Pure, no I/O.

Each strategy the policy turns on (`descheduler.strategies`: health, utilisation, throttling,
serving by default; degraded where named) names its source nodes, why, how much each must shed
and in what order its pods go. A pod is evicted only when a cool node that the pod could be
scheduled on (its selector, affinity, tolerations: `scoring.cluster.feasibility`) has free GPUs of
the kind it needs; that capacity is reserved as the plan is built, so one cool node is not
promised twice. And only when the move pays: what it gains over the payback horizon must exceed
what restarting the pod costs (`descheduler.payback`), unless its strategy says the pod serves
nothing where it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime

from descheduler.cluster import Cluster, NodeInfo, PodInfo
from descheduler.filters import why_not_evictable
from descheduler.ledger import LedgerState
from descheduler.payback import Payback, payback
from descheduler.proposals import Limit, Plan, PlannedEviction, Skip
from descheduler.strategies import Candidate, PlanInputs, Source, Strategy, configure
from scoring.cluster.feasibility import why_infeasible
from scoring.heat import FleetHeat, NodeHeat, Tier
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import DeschedulerPolicy

__all__ = ["Limit", "Plan", "PlannedEviction", "Skip", "plan_evictions"]


def _contribution(snapshot: ClusterSnapshot, pod: PodInfo) -> float:
    """Points of node mean utilisation this pod's GPUs account for (0 when not measured)."""
    node = snapshot.by_name.get(pod.node)
    if node is None or node.gpus == 0:
        return 0.0
    for usage in node.pods:
        if usage.namespace == pod.namespace and usage.name == pod.name:
            return usage.util_percent * usage.gpus / node.gpus
    return 0.0


def plan_evictions(*, fleet: FleetHeat, snapshot: ClusterSnapshot, windows: Mapping[str, Mapping],
                   cluster: Cluster, ledger: LedgerState, policy: DeschedulerPolicy, now: datetime,
                   strategies: tuple[Strategy, ...] | None = None) -> Plan:
    """`windows`: those the strategies declare, by name (`descheduler.strategies.WINDOWS`);
    `strategies`: the policy's (`configure`) unless given."""
    strategies = configure(policy) if strategies is None else strategies
    heat = {n.name: n for n in fleet.nodes}
    inputs = PlanInputs(heat, snapshot, windows, policy, cluster.running_replicas())
    sources: list[Source] = []
    for strategy in strategies:
        sources += strategy.sources(inputs, {s.node for s in sources})
    source_names = {s.node for s in sources}
    notes = [note for strategy in strategies for note in strategy.notes(inputs, source_names)]
    spare = _spare(heat, source_names, cluster, policy)
    if sources and not any(spare.values()):
        notes.append(f"no node below {policy.target_util_percent:g}% has free GPUs: nothing can move")

    evictions: list[PlannedEviction] = []
    skipped: list[Skip] = []
    per_node: Counter = Counter()
    per_namespace: Counter = Counter()
    for position, source in enumerate(sources):
        if len(evictions) >= policy.max_evictions_per_run and policy.max_evictions_per_run > 0 and position:
            notes.append(f"run limit of {policy.max_evictions_per_run} evictions reached; "
                         f"{len(sources) - position} more hot node(s) wait for the next run")
            break
        excess = source.excess
        for pod, share in source.order(_candidates(source.node, cluster, ledger, snapshot, policy, now, skipped),
                                       skipped):
            if excess <= 0:
                break
            limit = (Limit.PER_RUN if len(evictions) >= policy.max_evictions_per_run else
                     Limit.PER_NODE if per_node[source.node] >= policy.max_evictions_per_node else
                     Limit.PER_NAMESPACE if per_namespace[pod.namespace] >= policy.max_evictions_per_namespace else None)
            if limit is not None:
                skipped.append(Skip(pod.namespace, pod.name, f"limit reached: {limit.value}", limit))
                continue
            destination, unusable = _reserve(spare, pod, cluster)
            if destination is None:
                need = ", ".join(f"{r}×{c}" for r, c in pod.gpu_resources)
                why = f"no cool node has free {need}" if not unusable else (
                    f"no cool node the pod can use has free {need} ({unusable} with room rejected by its "
                    "node selector, affinity or tolerations)")
                skipped.append(Skip(pod.namespace, pod.name, why))
                continue
            recovered = source.recovers(pod) if source.recovers else None
            move = _payback(pod, heat, destination, cluster, snapshot, policy, recovered) if source.weigh_payback else None
            if move is not None and not move.pays:
                spare[destination].update(dict(pod.gpu_resources))
                skipped.append(Skip(pod.namespace, pod.name, f"move does not pay: {move.describe()}"))
                continue
            evictions.append(PlannedEviction(
                pod.namespace, pod.name, source.node, pod.workload,
                f"{source.reason}; pod's GPUs ~{share:.0f} points; " + (f"{move.describe()}; " if move else "")
                + f"room on {destination}", move, destination,
                tuple(image for image in pod.images if image not in _images_on(cluster, destination))))
            per_node[source.node] += 1
            per_namespace[pod.namespace] += 1
            excess -= source.sheds(share)
    return Plan(tuple(s.node for s in sources), tuple(evictions), tuple(skipped), tuple(notes))


def _candidates(node: str, cluster: Cluster, ledger: LedgerState, snapshot: ClusterSnapshot,
                policy: DeschedulerPolicy, now: datetime, skipped: list[Skip]) -> list[Candidate]:
    """The node's pods that may go (opted in, evictable, not cooling down), each with its share;
    the others are added to `skipped` with the reason."""
    candidates = []
    for pod in cluster.pods_on(node):
        why_not = cluster.why_namespace_excluded(pod.namespace) or why_not_evictable(pod, policy)
        if why_not is None and (until := ledger.cooldown_until(pod.workload, now, policy)):
            why_not = f"workload in cooldown until {until.isoformat(timespec='minutes')}"
        if why_not:
            skipped.append(Skip(pod.namespace, pod.name, why_not))
        else:
            candidates.append((pod, _contribution(snapshot, pod)))
    return candidates


def _payback(pod: PodInfo, heat: Mapping[str, NodeHeat], destination: str, cluster: Cluster,
             snapshot: ClusterSnapshot, policy: DeschedulerPolicy, recovered: float | None = None) -> Payback | None:
    """What moving the pod to `destination` gains against its restart (None: the rule is off)."""
    if policy.payback_horizon_seconds <= 0:
        return None
    source = snapshot.by_name.get(pod.node)
    replica = next((r for r in source.serving if r.namespace == pod.namespace and r.pod == pod.name), None) if (
        source is not None) else None
    return payback(pod.annotations, source_util=heat[pod.node].gpu_util, destination_util=heat[destination].gpu_util,
                   replica=replica, policy=policy, recovered=recovered, images=pod.images,
                   destination=cluster.nodes[destination].facts)


def _images_on(cluster: Cluster, node: str) -> Mapping[str, int]:
    facts = cluster.nodes[node].facts
    return facts.images if facts is not None else {}


def _spare(heat: Mapping[str, NodeHeat], sources: set[str], cluster: Cluster, policy: DeschedulerPolicy
           ) -> dict[str, Counter]:
    """The free GPU units of every schedulable node cool enough to take an evicted pod."""
    free = cluster.free()
    spare: dict[str, Counter] = {}
    for name, n in heat.items():
        if (n.tier <= Tier.WARM and n.gpu_util < policy.target_util_percent and name not in sources
                and not n.slow_serving):
            node = cluster.nodes.get(name)
            if node is not None and not node.unschedulable:
                spare[name] = Counter({r: c for r, c in free.get(name, Counter()).items() if c > 0})
    return spare


def _reserve(spare: dict[str, Counter], pod: PodInfo, cluster: Cluster) -> tuple[str | None, int]:
    """Reserve the pod's GPUs on the cool node with the most room for it that the pod could be
    scheduled on. Returns (node or None, how many nodes with room the pod could not use)."""
    need = dict(pod.gpu_resources)
    roomy = [name for name, room in spare.items() if all(room[r] >= c for r, c in need.items())]
    fitting = [name for name in roomy if _usable(pod, cluster.nodes[name])]
    if not fitting:
        return None, len(roomy)
    best = max(fitting, key=lambda name: (sum(spare[name][r] for r in need), name))
    spare[best].subtract(need)
    return best, 0


def _usable(pod: PodInfo, node: NodeInfo) -> bool:
    """Whether the pod's replacement could be scheduled there (room is checked by the caller)."""
    return node.facts is None or why_infeasible(pod.constraints, node.facts) is None
