"""Eviction planning: which pods leave which sustained-hot nodes, within limits. Pure, no I/O.

A node is a source only when it is hot now *and* has been over the window (mean and a low
quantile, with enough samples): a spike of seconds never triggers an eviction. The serving signal
makes a node a source the same way: hot now for `slow-serving`, and a replica on it whose latency
or queue stayed over target for the window (its low quantile); from such a node the replica that
misses its target most moves, one per run. A pod is evicted
only when a cool node that the pod could be scheduled on (its selector, affinity, tolerations:
`scoring.feasibility`) has free GPUs of the kind it needs; that capacity is reserved as the plan
is built, so one cool node is not promised twice. And only when the move pays: what it gains over
the payback horizon must exceed what restarting the pod costs (`descheduler.payback`).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from descheduler.cluster import Cluster, NodeInfo, PodInfo
from descheduler.filters import why_not_evictable
from descheduler.ledger import LedgerState
from descheduler.payback import Payback, payback
from scoring.feasibility import why_infeasible
from scoring.heat import SLOW_SERVING, FleetHeat, NodeHeat, Tier
from scoring.policy import DeschedulerPolicy
from scoring.telemetry import WindowStats
from scoring.serving import ServingReplica, SustainedServing
from scoring.telemetry import ClusterSnapshot


class Limit(enum.Enum):
    PER_RUN = "evictions per run"
    PER_NODE = "evictions per node"
    PER_NAMESPACE = "evictions per namespace"


@dataclass(frozen=True, slots=True)
class PlannedEviction:
    namespace: str
    pod: str
    node: str
    workload: str
    reason: str
    payback: Payback | None = None
    """What the move gains and what its restart costs (None with the payback rule off)."""


@dataclass(frozen=True, slots=True)
class Skip:
    namespace: str
    pod: str
    reason: str
    limit: Limit | None = None


@dataclass(frozen=True)
class Plan:
    hot_nodes: tuple[str, ...]
    evictions: tuple[PlannedEviction, ...]
    skipped: tuple[Skip, ...]
    notes: tuple[str, ...]


MAX_NOT_SUSTAINED_NOTES = 5
"""Nodes hot now but not sustained-hot named in the notes; the rest are counted."""


def sustained_hot(name: str, stats: WindowStats | None, policy: DeschedulerPolicy) -> str | None:
    """Why the node counts as sustained-hot, or None."""
    if stats is None or stats.coverage < policy.min_window_coverage:
        return None
    if stats.mean >= policy.sustained_util_percent and stats.low >= policy.low_quantile_util_percent:
        return (f"GPU util {stats.mean:.0f}% mean, {stats.low:.0f}% low over {policy.window_seconds / 60:.0f} min "
                f"≥ {policy.sustained_util_percent:g}%")
    return None


def not_sustained(stats: WindowStats | None, policy: DeschedulerPolicy) -> str:
    """Why a node hot now is not sustained-hot: too little history, or a window below the bars."""
    minutes = policy.window_seconds / 60
    if stats is None:
        return f"no utilisation history yet (the window needs {policy.min_window_coverage:.0%} of {minutes:.0f} min)"
    if stats.coverage < policy.min_window_coverage:
        return (f"{stats.coverage * minutes:.1f} of {minutes:.0f} min of history, and the window needs "
                f"{policy.min_window_coverage:.0%} ({policy.min_window_coverage * minutes:.0f} min)")
    return (f"GPU util {stats.mean:.0f}% mean, {stats.low:.0f}% low over {minutes:.0f} min; sustained needs "
            f"≥ {policy.sustained_util_percent:g}% mean and ≥ {policy.low_quantile_util_percent:g}% low")


def sustained_slow_serving(replicas: tuple[ServingReplica, ...], stats: Mapping[tuple[str, str], SustainedServing],
                           policy: DeschedulerPolicy) -> tuple[str | None, tuple[ServingReplica, ...]]:
    """Why the node counts as sustained slow-serving (or None), and its replicas over target for
    the window, in the order given (`NodeTelemetry.serving`: the one missing its target most first)."""
    over = tuple(r for r in replicas if r.node_bound and (s := stats.get((r.namespace, r.pod))) is not None
                 and s.coverage >= policy.min_window_coverage and s.pressure_low >= 1.0)
    if not over:
        return None, ()
    low = stats[over[0].namespace, over[0].pod].pressure_low
    return (f"{SLOW_SERVING}: {over[0].describe()}; over target for {policy.window_seconds / 60:.0f} min "
            f"(low quantile {low:.0%} of target)"), over


def would_overload_peers(replica: ServingReplica, running: int) -> str | None:
    """Why evicting this replica would hurt its workload more than moving it helps, or None.

    Until its replacement serves (scheduling, image pull, model load: minutes), the workload's
    other replicas take its traffic, each `running / (running - 1)` times their load; latency grows
    at least with the square of that near saturation. A move is worth it only when they stay
    within target even so."""
    if running < 2:
        return "its workload's only running replica: evicting it stops the service until the replacement serves"
    if replica.peer_pressure is None:
        return None
    projected = replica.peer_pressure * (running / (running - 1)) ** 2
    if projected >= 1.0:
        return (f"its workload's other {running - 1} replica(s), at {replica.peer_pressure:.0%} of target, would "
                f"reach ~{projected:.0%} taking its traffic: it needs more replicas, not another node")
    return None


def _slow_serving_sources(heat: Mapping[str, NodeHeat], snapshot: ClusterSnapshot,
                          serving_window: Mapping[tuple[str, str], SustainedServing], policy: DeschedulerPolicy,
                          exclude: set[str]) -> dict[str, tuple[str, tuple[ServingReplica, ...]]]:
    """Node → (why it is a source, its replicas over target for the window), worst node first."""
    found = {}
    for name, n in heat.items():
        if n.tier is Tier.HOT and n.slow_serving and name not in exclude and (node := snapshot.by_name.get(name)):
            reason, over = sustained_slow_serving(node.serving, serving_window, policy)
            if reason:
                found[name] = (reason, over)
    return dict(sorted(found.items(), key=lambda item: (-item[1][1][0].pressure, item[0])))


def _serving_victims(candidates: list[tuple[PodInfo, float]], over: tuple[ServingReplica, ...],
                     running: Counter, skipped: list[Skip]) -> list[tuple[PodInfo, float]]:
    """The evictable candidates among the replicas over target, the one missing it most first;
    those whose peers could not absorb their traffic are skipped, with the reason."""
    order = {(r.namespace, r.pod): i for i, r in enumerate(over)}
    victims = []
    for pod, share in candidates:
        if (index := order.get((pod.namespace, pod.name))) is None:
            continue
        if why := would_overload_peers(over[index], running[pod.workload]):
            skipped.append(Skip(pod.namespace, pod.name, why))
        else:
            victims.append((pod, share))
    return sorted(victims, key=lambda c: order[c[0].namespace, c[0].name])


def _contribution(snapshot: ClusterSnapshot, pod: PodInfo) -> float:
    """Points of node mean utilisation this pod's GPUs account for (0 when not measured)."""
    node = snapshot.by_name.get(pod.node)
    if node is None or node.gpus == 0:
        return 0.0
    for usage in node.pods:
        if usage.namespace == pod.namespace and usage.name == pod.name:
            return usage.util_percent * usage.gpus / node.gpus
    return 0.0


def plan_evictions(*, fleet: FleetHeat, snapshot: ClusterSnapshot, window: Mapping[str, WindowStats],
                   cluster: Cluster, ledger: LedgerState, policy: DeschedulerPolicy, now: datetime,
                   serving_window: Mapping[tuple[str, str], SustainedServing] | None = None) -> Plan:
    heat = {n.name: n for n in fleet.nodes}
    sources = sorted(
        ((name, reason) for name, n in heat.items()
         if n.tier is Tier.HOT and (reason := sustained_hot(name, window.get(name), policy))),
        key=lambda item: -window[item[0]].mean)
    # Nodes hot on their serving figures alone come after those hot on utilisation.
    slow = _slow_serving_sources(heat, snapshot, serving_window or {}, policy, exclude={name for name, _ in sources})
    sources += [(name, reason) for name, (reason, _) in slow.items()]
    source_names = {name for name, _ in sources}
    notes = _hot_but_not_sources(heat, source_names, window, policy)
    spare = _spare(heat, source_names, cluster, policy)
    if sources and not any(spare.values()):
        notes.append(f"no node below {policy.target_util_percent:g}% has free GPUs: nothing can move")

    replicas = cluster.running_replicas()
    evictions: list[PlannedEviction] = []
    skipped: list[Skip] = []
    per_node: Counter = Counter()
    per_namespace: Counter = Counter()
    for position, (node_name, source_reason) in enumerate(sources):
        if len(evictions) >= policy.max_evictions_per_run and policy.max_evictions_per_run > 0 and position:
            notes.append(f"run limit of {policy.max_evictions_per_run} evictions reached; "
                         f"{len(sources) - position} more hot node(s) wait for the next run")
            break
        excess = heat[node_name].gpu_util - policy.sustained_util_percent
        candidates: list[tuple[PodInfo, float]] = []
        for pod in cluster.pods_on(node_name):
            why_not = cluster.why_namespace_excluded(pod.namespace) or why_not_evictable(pod, policy)
            if why_not is None and (until := ledger.cooldown_until(pod.workload, now, policy)):
                why_not = f"workload in cooldown until {until.isoformat(timespec='minutes')}"
            if why_not:
                skipped.append(Skip(pod.namespace, pod.name, why_not))
            else:
                candidates.append((pod, _contribution(snapshot, pod)))

        def rank(item: tuple[PodInfo, float], excess: float = excess) -> tuple:
            pod, share = item
            covers = share >= excess
            # Smallest pod that alone brings the node below the threshold; else the biggest.
            return (0 if covers else 1, share if covers else -share, pod.priority, -replicas[pod.workload],
                    pod.namespace, pod.name)

        if node_name in slow:  # the replica missing its target most, then the next: one moves
            ranked = _serving_victims(candidates, slow[node_name][1], replicas, skipped)
            excess = 1.0
        else:
            ranked = sorted(candidates, key=rank)
        for pod, share in ranked:
            if excess <= 0:
                break
            limit = (Limit.PER_RUN if len(evictions) >= policy.max_evictions_per_run else
                     Limit.PER_NODE if per_node[node_name] >= policy.max_evictions_per_node else
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
            move = _payback(pod, heat, destination, snapshot, policy)
            if move is not None and not move.pays:
                spare[destination].update(dict(pod.gpu_resources))
                skipped.append(Skip(pod.namespace, pod.name, f"move does not pay: {move.describe()}"))
                continue
            evictions.append(PlannedEviction(
                pod.namespace, pod.name, node_name, pod.workload,
                f"{source_reason}; pod's GPUs ~{share:.0f} points; " + (f"{move.describe()}; " if move else "")
                + f"room on {destination}", move))
            per_node[node_name] += 1
            per_namespace[pod.namespace] += 1
            excess -= 1.0 if node_name in slow else share
    return Plan(tuple(name for name, _ in sources), tuple(evictions), tuple(skipped), tuple(notes))


def _payback(pod: PodInfo, heat: Mapping[str, NodeHeat], destination: str, snapshot: ClusterSnapshot,
             policy: DeschedulerPolicy) -> Payback | None:
    """What moving the pod to `destination` gains against its restart (None: the rule is off)."""
    if policy.payback_horizon_seconds <= 0:
        return None
    source = snapshot.by_name.get(pod.node)
    replica = next((r for r in source.serving if r.namespace == pod.namespace and r.pod == pod.name), None) if (
        source is not None) else None
    return payback(pod.annotations, source_util=heat[pod.node].gpu_util, destination_util=heat[destination].gpu_util,
                   replica=replica, policy=policy)


def _hot_but_not_sources(heat: Mapping[str, NodeHeat], sources: set[str], window: Mapping[str, WindowStats],
                         policy: DeschedulerPolicy) -> list[str]:
    """Notes on the nodes `status` shows hot that this run does not act on, and why."""
    notes = [] if sources else ["no node has been hot over the whole window"]
    hot_now = sorted(name for name, n in heat.items() if n.tier is Tier.HOT and name not in sources)
    notes += [f"{name} is hot now but not sustained-hot: {not_sustained(window.get(name), policy)}"
              for name in hot_now[:MAX_NOT_SUSTAINED_NOTES]]
    if len(hot_now) > MAX_NOT_SUSTAINED_NOTES:
        notes.append(f"{len(hot_now) - MAX_NOT_SUSTAINED_NOTES} more node(s) hot now but not sustained-hot")
    return notes


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
