"""The heat model: per-node load figures and a cool/warm/hot/unhealthy tier with reasons. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from scoring.ingest.signals import registry as node_signals
from scoring.ingest.signals import health, throttling
from scoring.ingest.telemetry import ClusterSnapshot, NodeTelemetry
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict

__all__ = ["FleetHeat", "NodeHeat", "Tier", "fleet_heat", "node_heat"]

if TYPE_CHECKING:
    from scoring.ingest.serving import ServingReplica


SLOW_SERVING = "slow-serving"
"""The reason prefix of a verdict that rests on the model servers' own figures."""

SIGNALS = ("utilisation", "memory", "temperature")
"""The gauges the tier is judged on. XIDs are not listed: Prometheus returns only non-zero ones,
so a missing XID series cannot be told from a healthy GPU."""


@dataclass(frozen=True, slots=True)
class NodeHeat:
    name: str
    gpus: int
    gpus_allocated: int
    gpu_util: float
    """Mean GPU busy share, 0–100: the duty cycle, or a serving replica's load on its GPUs where it
    reports one (`work_load`)."""
    max_gpu_util: float
    memory_used_fraction: float | None
    """None when no GPU of the node reports both framebuffer gauges: unknown, not empty."""
    max_temperature_c: float | None
    power_w: float | None
    tier: Tier
    reasons: tuple[str, ...]
    signals: tuple[str, ...] = ()
    """The signals the verdict rested on (`SIGNALS`, and "serving" when model servers reported)."""
    failed_gpus: tuple[tuple[str, int], ...] = ()
    """(unit, XID) for each unit that reported one of `heat.criticalXids`: it needs a reset."""
    serving_pressure: float | None = None
    """The figures of the worst replica this node slows (`ServingReplica.node_bound`) as a share
    of its target (1.0 = on target); 0 when replicas report but none is slowed by this node; None
    when no replica on the node reports serving series."""
    memory_room_used: float | None = None
    """Memory used on the GPUs a new pod could take or share (`scoring.ingest.memory`), what the verdict
    and the ranking read; None where memory is unknown or no GPU is free or shared."""

    @property
    def throttled(self) -> str | None:
        """What holds its GPUs' clocks down ("power cap", "heat"), when something does."""
        return throttling.held_by(self.reasons)

    @property
    def slow_serving(self) -> bool:
        """A serving replica here is warm or hot on its own figures: never a place to move pods to."""
        return any(reason.startswith(SLOW_SERVING) for reason in self.reasons)

    @property
    def missing_signals(self) -> tuple[str, ...]:
        return tuple(signal for signal in SIGNALS if signal not in self.signals)

    @property
    def partial(self) -> bool:
        """The verdict rests on partial telemetry: some signal is unknown for this node."""
        return bool(self.missing_signals)

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_allocated)


@dataclass(frozen=True, slots=True)
class WorkLoad:
    """A node's busy measure where its model servers say how full the work keeps them."""

    mean: float
    """0–100 over the node's GPUs: a loaded replica's GPUs at its load, the others' duty cycle."""
    peak: float
    replicas: tuple[ServingReplica, ...]
    """The replicas whose load stands in for their GPUs' duty cycle, fullest first."""
    covers_all_pods: bool
    """Every workload pod on the node is one of them: its framebuffer is their preallocated cache."""


def work_load(node: NodeTelemetry) -> WorkLoad | None:
    """The node's busy measure with each serving replica that reports its load (KV cache, running
    batch) counted at that load instead of its GPUs' duty cycle, which reads ~100 % from one
    request in flight (vLLM issue #6105; bench/replica_signals.py). None where no replica on the
    node reports a load, or no GPU series names its pod: then the duty cycle stands."""
    loaded = {(r.namespace, r.pod): r for r in node.serving if r.load is not None}
    if not loaded or not node.util_count:
        return None
    busy_sum, peaks, counted, held, held_util = node.util_sum, [], [], 0, 0.0
    for pod in node.pods:
        held += pod.gpus
        held_util += pod.util_percent * pod.gpus
        replica = loaded.get((pod.namespace, pod.name))
        if replica is None:
            peaks.append(pod.util_percent)
            continue
        busy = min(100.0, 100.0 * replica.load)
        busy_sum += (busy - pod.util_percent) * pod.gpus
        peaks.append(busy)
        counted.append(replica)
    if not counted:
        return None
    unheld = node.util_count - held
    if unheld > 0:
        peaks.append(max(0.0, node.util_sum - held_util) / unheld)
    return WorkLoad(max(0.0, busy_sum) / node.util_count, max(peaks),
                    tuple(sorted(counted, key=lambda r: -r.load)), len(counted) == len(node.pods))


def node_heat(node: NodeTelemetry, policy: HeatPolicy) -> NodeHeat:
    """Load figures and the tier of one node, with a reason for every step above cool."""
    memory_fraction = node.placeable_memory_fraction
    excluded = node.placeable_fb is not None and node.placeable_fb.total_mib < (node.fb_total_mib or 0.0)
    memory_where = " on free and shared GPUs" if excluded else ""
    work = work_load(node)
    mean_util = node.util_mean if work is None else work.mean
    busy_what = "mean GPU util" if work is None else "serving load"
    busy_why = "" if work is None else f" ({work.replicas[0].describe_load()})"
    known = tuple(signal for signal, reported in (
        ("utilisation", node.util_count > 0 and node.util_count >= node.gpus),
        ("memory", node.memory_used_fraction is not None),
        ("temperature", node.temperature_max_c is not None)) if reported)

    # Reasons read worst first, and within a tier a failed GPU's first, then the load's, then the
    # other signals' (`scoring.ingest.signals`), then the model servers'.
    signalled = node_signals.verdicts(node, policy)
    verdicts: list[Verdict] = [v for v in signalled if v[0] is Tier.UNHEALTHY]
    if node.gpus == 0:
        verdicts.append((Tier.UNHEALTHY, "no GPU series reported"))
    elif node.gpus_vanished:
        verdicts.append((Tier.UNHEALTHY, f"{node.gpus_vanished} GPU series vanished"))
    elif node.util_count == 0:
        verdicts.append((Tier.UNHEALTHY, "no utilisation series reported"))
    if mean_util >= policy.hot_util_percent:
        verdicts.append((Tier.HOT, f"{busy_what} {mean_util:.0f}% ≥ {policy.hot_util_percent:g}%{busy_why}"))
    elif mean_util >= policy.warm_util_percent:
        verdicts.append((Tier.WARM, f"{busy_what} {mean_util:.0f}% ≥ {policy.warm_util_percent:g}%{busy_why}"))
    # Unknown memory makes no verdict, nor does a GPU one pod holds (`scoring.ingest.memory`); where the
    # exporters do not say which GPUs pods hold, a model server's preallocated KV cache (vLLM takes
    # 90 % of the framebuffer whatever its load) makes none either: its load has spoken for it.
    if memory_fraction is not None and not (work is not None and work.covers_all_pods):
        if memory_fraction >= policy.hot_memory_fraction:
            verdicts.append((Tier.HOT, f"GPU memory {memory_fraction:.0%} used{memory_where} "
                                       f"≥ {policy.hot_memory_fraction:.0%}"))
        elif memory_fraction >= policy.warm_memory_fraction:
            verdicts.append((Tier.WARM, f"GPU memory {memory_fraction:.0%} used{memory_where} "
                                        f"≥ {policy.warm_memory_fraction:.0%}"))
    verdicts += [v for v in signalled if v[0] is not Tier.UNHEALTHY]
    pressure = None
    if node.serving:
        known += ("serving",)
        # Only a replica its node slows counts: one slow everywhere says nothing about this node.
        worst = next((r for r in node.serving if r.node_bound), None)  # replicas come worst first
        pressure = worst.pressure if worst else 0.0
        if worst and pressure >= 1.0:
            verdicts.append((Tier.HOT, f"{SLOW_SERVING}: {worst.describe()}"))
        elif worst and pressure >= policy.warm_serving_fraction:
            verdicts.append((Tier.WARM, f"{SLOW_SERVING}: {worst.describe()}, at {pressure:.0%} of target"))

    return NodeHeat(
        name=node.name,
        gpus=node.allocatable_gpus if node.allocatable_gpus is not None else node.gpus,
        gpus_allocated=_allocated(node),
        gpu_util=mean_util,
        max_gpu_util=node.util_max if work is None else work.peak,
        memory_used_fraction=node.memory_used_fraction,
        max_temperature_c=node.temperature_max_c,
        power_w=node.power_w,
        tier=max((tier for tier, _ in verdicts), default=Tier.COOL),
        reasons=tuple(reason for _, reason in sorted(verdicts, key=lambda v: -v[0])),
        signals=known,
        failed_gpus=health.failed_gpus(node, policy),
        serving_pressure=pressure,
        memory_room_used=memory_fraction,
    )


def _allocated(node: NodeTelemetry) -> int:
    """kube-state-metrics' count when scraped; otherwise GPUs whose series name a workload pod."""
    if node.allocated_gpus is not None:
        return node.allocated_gpus
    return sum(pod.gpus for pod in node.pods)


@dataclass(frozen=True, slots=True)
class FleetHeat:
    """The heat of every node in a snapshot, and whether the snapshot may be trusted."""

    taken_at: datetime
    stale: bool
    age_seconds: float
    nodes: tuple[NodeHeat, ...]


def fleet_heat(snapshot: ClusterSnapshot, policy: HeatPolicy, *, now: datetime,
               staleness_limit_seconds: float) -> FleetHeat:
    """Heat of every reporting node, plus an `unhealthy` entry for each node whose series vanished."""
    heats = [node_heat(node, policy) for node in snapshot.nodes]
    for name in snapshot.vanished_nodes:
        heats.append(NodeHeat(name, 0, 0, 0.0, 0.0, None, None, None, Tier.UNHEALTHY,
                              ("all GPU series vanished",)))
    age = snapshot.age_seconds(now)
    stale = not snapshot.nodes or age > staleness_limit_seconds
    return FleetHeat(snapshot.taken_at, stale, age, tuple(sorted(heats, key=lambda h: h.name)))
