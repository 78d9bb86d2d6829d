"""The heat model: per-node load figures and a cool/warm/hot/unhealthy tier with reasons. Pure, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from scoring.policy import HeatPolicy
from scoring.telemetry import ClusterSnapshot, NodeTelemetry


class Tier(enum.IntEnum):
    """Ordered so that `max()` over verdicts gives the worst one."""

    COOL = 0
    WARM = 1
    HOT = 2
    UNHEALTHY = 3

    def __str__(self) -> str:
        return self.name.lower()


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
    """Mean GPU utilisation, 0–100."""
    max_gpu_util: float
    memory_used_fraction: float | None
    """None when no GPU of the node reports both framebuffer gauges: unknown, not empty."""
    max_temperature_c: float | None
    power_w: float | None
    tier: Tier
    reasons: tuple[str, ...]
    signals: tuple[str, ...] = ()
    """The signals the verdict rested on (`SIGNALS`, and "serving" when model servers reported)."""
    serving_pressure: float | None = None
    """The figures of the worst replica this node slows (`ServingReplica.node_bound`) as a share
    of its target (1.0 = on target); 0 when replicas report but none is slowed by this node; None
    when no replica on the node reports serving series."""

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


def node_heat(node: NodeTelemetry, policy: HeatPolicy) -> NodeHeat:
    """Load figures and the tier of one node, with a reason for every step above cool."""
    memory_fraction = node.memory_used_fraction
    mean_util = node.util_mean
    signals = tuple(signal for signal, known in (
        ("utilisation", node.util_count > 0 and node.util_count >= node.gpus),
        ("memory", memory_fraction is not None),
        ("temperature", node.temperature_max_c is not None)) if known)

    verdicts: list[tuple[Tier, str]] = []
    for gpu, xid in node.xids:
        if xid in policy.critical_xids:
            verdicts.append((Tier.UNHEALTHY, f"GPU {gpu} reported critical XID {xid}"))
    if node.gpus == 0:
        verdicts.append((Tier.UNHEALTHY, "no GPU series reported"))
    elif node.gpus_vanished:
        verdicts.append((Tier.UNHEALTHY, f"{node.gpus_vanished} GPU series vanished"))
    elif node.util_count == 0:
        verdicts.append((Tier.UNHEALTHY, "no utilisation series reported"))
    if mean_util >= policy.hot_util_percent:
        verdicts.append((Tier.HOT, f"mean GPU util {mean_util:.0f}% ≥ {policy.hot_util_percent:g}%"))
    elif mean_util >= policy.warm_util_percent:
        verdicts.append((Tier.WARM, f"mean GPU util {mean_util:.0f}% ≥ {policy.warm_util_percent:g}%"))
    if memory_fraction is not None:  # unknown memory makes no verdict
        if memory_fraction >= policy.hot_memory_fraction:
            verdicts.append((Tier.HOT, f"GPU memory {memory_fraction:.0%} used ≥ {policy.hot_memory_fraction:.0%}"))
        elif memory_fraction >= policy.warm_memory_fraction:
            verdicts.append((Tier.WARM, f"GPU memory {memory_fraction:.0%} used ≥ {policy.warm_memory_fraction:.0%}"))
    temperature = node.temperature_max_c
    if temperature is not None and temperature >= policy.hot_temperature_c:
        verdicts.append((Tier.HOT, f"GPU temperature {temperature:.0f}°C ≥ {policy.hot_temperature_c:g}°C"))
    pressure = None
    if node.serving:
        signals += ("serving",)
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
        max_gpu_util=node.util_max,
        memory_used_fraction=memory_fraction,
        max_temperature_c=temperature,
        power_w=node.power_w,
        tier=max((tier for tier, _ in verdicts), default=Tier.COOL),
        reasons=tuple(reason for _, reason in sorted(verdicts, key=lambda v: -v[0])),
        signals=signals,
        serving_pressure=pressure,
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
