"""scheduler-plugins' Trimaran TargetLoadPacking pointed at GPU utilisation. Pure."""

from __future__ import annotations

import math
import random
from collections import Counter, deque

from sim.world_state import SimPod, World, gpu_count
from sim.framework import MAX_SCORE, NodeVerdict
from sim.scheduler import choose, evaluate
from sim.policies.exporters import telemetry_lag
from sim.policies.stock import Stock


class LoadAware(Stock):
    """scheduler-plugins' Trimaran TargetLoadPacking as a platform team would point it at GPUs: its
    Score on each node's mean reported GPU utilisation over the metrics window, plus the incoming
    pod's predicted use and that of pods bound too recently to show in the metrics, in place of
    the NodeResourcesFit and BalancedAllocation scores (its README's profile disables both).

    A pod's predicted use is its GPUs at 100 %: the GPU form of the plugin's CPU limit, and what
    GPU_UTIL reads while a replica serves anything."""

    name = "load-aware"
    about = "scheduler-plugins' Trimaran TargetLoadPacking on mean GPU utilisation"
    target = 40.0
    """targetUtilization: the plugin's default (scheduler-plugins pkg/trimaran/targetloadpacking README)."""
    reporting_seconds = 60.0
    """A pod bound this recently is predicted, not measured (the plugin's metricsAgentReportingIntervalSeconds)."""
    window_seconds = 300.0
    """The load-watcher's averaging window: assumption (5 minutes, a common Prometheus rate window)."""
    replaced = ("NodeResourcesFit", "BalancedAllocation")

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.recent: deque[tuple[float, str, float]] = deque()  # (bound at, node, predicted %)

    def place(self, world: World, pod: SimPod) -> str | None:
        verdicts = evaluate(pod.obj, list(world.nodes.values()), context=world.context)
        utilisation = self._measured(world)
        since = world.now_seconds - self.reporting_seconds - telemetry_lag(world) * world.scenario.tick_seconds
        while self.recent and self.recent[0][0] < since:
            self.recent.popleft()
        missing = Counter()
        for _, node, predicted in self.recent:
            missing[node] += predicted
        rescored, weights = [], world.context.profile.weights
        for v in verdicts:
            if not v.feasible:
                rescored.append(v)
                continue
            predicted = utilisation.get(v.name, 0.0) + self._predicted(world, pod, v.name) + missing[v.name]
            kept = v.total - sum(weights.get(p, 0) * v.scores.get(p, 0.0) for p in self.replaced)
            rescored.append(NodeVerdict(v.name, True, None, v.scores, kept + target_load_packing(predicted, self.target)))
        return choose(rescored, self.rng)

    def bound(self, world: World, pod: SimPod, node: str) -> None:
        self.recent.append((world.now_seconds, node, self._predicted(world, pod, node)))

    def _measured(self, world: World) -> dict[str, float]:
        """Each node's mean reported GPU utilisation over the window, as the metrics show it now."""
        lag = telemetry_lag(world)
        steps = max(1, round(self.window_seconds / world.scenario.tick_seconds))
        window = world.history[max(0, len(world.history) - lag - steps):max(0, len(world.history) - lag)]
        totals: Counter = Counter()
        for tick in window:
            totals.update(tick)
        return {n: totals[n] / len(window) for n in totals}

    @staticmethod
    def _predicted(world: World, pod: SimPod, node: str) -> float:
        return 100.0 * gpu_count(pod) / max(1, world.units[node])


def target_load_packing(predicted_percent: float, target_percent: float) -> int:
    """TargetLoadPacking's node score: rising from `target` at idle to 100 at the target (packing),
    falling to 0 at 100 % (spreading among hot nodes), 0 beyond."""
    if predicted_percent > target_percent:
        if predicted_percent > 100:
            return 0
        return _go_round(target_percent * (100 - predicted_percent) / (100 - target_percent))
    return _go_round((MAX_SCORE - target_percent) * predicted_percent / target_percent + target_percent)


def _go_round(x: float) -> int:
    """Go's math.Round for the non-negative scores here: halves away from zero (Python rounds to even)."""
    return math.floor(x + 0.5)
