"""The serving strategy: a node hot on its model servers' own figures — a replica over its
latency or queue target for the whole window, clearly worse off than its peers elsewhere — moves
the replica missing its target most, one a run. Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from descheduler.proposals import Skip
from descheduler.strategies.base import SERVING, Candidate, PlanInputs, Source
from scoring.heat import SLOW_SERVING, FleetHeat, Tier
from scoring.ingest.serving import ServingReplica, SustainedServing
from scoring.plugins import Registration
from scoring.policy import DeschedulerPolicy


@dataclass(frozen=True)
class Args:
    min_low_pressure: float = 1.0
    """What a replica's pressure (its figure over its target) must reach at the window's low
    quantile: 1, over target for nearly the whole window."""

    def validate(self) -> list[str]:
        return [] if self.min_low_pressure > 0 else [f"minLowPressure: must be positive, got {self.min_low_pressure}"]


def sustained_slow_serving(replicas: tuple[ServingReplica, ...], stats: Mapping[tuple[str, str], SustainedServing],
                           policy: DeschedulerPolicy, args: Args = Args()
                           ) -> tuple[str | None, tuple[ServingReplica, ...]]:
    """Why the node counts as sustained slow-serving (or None), and its replicas over target for
    the window, in the order given (`NodeTelemetry.serving`: the one missing its target most first)."""
    over = tuple(r for r in replicas if r.node_bound and (s := stats.get((r.namespace, r.pod))) is not None
                 and s.coverage >= policy.min_window_coverage and s.pressure_low >= args.min_low_pressure)
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


def keep_peers_serving(candidates: list[Candidate], skipped: list[Skip], *, rank: Mapping[tuple[str, str], Any],
                       replicas: Mapping[tuple[str, str], ServingReplica], running: Counter) -> list[Candidate]:
    """A `Source.order`: the candidates `rank` names (by namespace and name), in its order; a serving replica among
    them whose peers could not absorb its traffic (`would_overload_peers`) is skipped, with the
    reason. The one rule every strategy that moves serving replicas keeps."""
    chosen = []
    for pod, share in candidates:
        if (key := (pod.namespace, pod.name)) not in rank:
            continue
        if (replica := replicas.get(key)) and (why := would_overload_peers(replica, running[pod.workload])):
            skipped.append(Skip(pod.namespace, pod.name, why))
        else:
            chosen.append((pod, share))
    return sorted(chosen, key=lambda c: rank[c[0].namespace, c[0].name])


def victims(candidates: list[Candidate], over: tuple[ServingReplica, ...], running: Counter,
            skipped: list[Skip]) -> list[Candidate]:
    """The evictable candidates among the replicas over target, the one missing it most first;
    those whose peers could not absorb their traffic are skipped, with the reason."""
    replicas = {(r.namespace, r.pod): r for r in over}
    return keep_peers_serving(candidates, skipped, rank={key: i for i, key in enumerate(replicas)}, replicas=replicas,
                              running=running)


class Serving:
    name = SERVING

    def __init__(self, args: Args = Args()) -> None:
        self.args = args

    def windows(self, fleet: FleetHeat) -> tuple[str, ...]:
        return (SERVING,)

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """Sustained slow-serving nodes, the one whose worst replica misses its target most first."""
        found = {}
        for name, n in inputs.heat.items():
            if n.tier is Tier.HOT and n.slow_serving and name not in taken and (
                    node := inputs.snapshot.by_name.get(name)):
                reason, over = sustained_slow_serving(node.serving, inputs.serving, inputs.policy, self.args)
                if reason:
                    found[name] = (reason, over)
        ordered = sorted(found.items(), key=lambda item: (-item[1][1][0].pressure, item[0]))
        return [Source(name, reason, 1.0, self._order(over, inputs.running), sheds=lambda share: 1.0)
                for name, (reason, over) in ordered]

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        return []

    @staticmethod
    def _order(over: tuple[ServingReplica, ...], running: Counter):
        return lambda candidates, skipped: victims(candidates, over, running, skipped)


REGISTRATION = Registration(SERVING, Args, Serving)
