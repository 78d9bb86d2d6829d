"""kubernetes-sigs/descheduler's LowNodeUtilization, on allocation and on reported utilisation. Pure."""

from __future__ import annotations

import random

from sim.engine import recreate
from sim.world_state import World
from sim.policies.exporters import telemetry_lag
from sim.policies.stock import Stock, requested_units


class LowNodeUtilization(Stock):
    """Stock placement plus an allocation-based descheduler in the manner of kubernetes-sigs/descheduler's
    LowNodeUtilization on `nvidia.com/gpu`: it sees requests, not measured load."""

    name = "lownodeutilization"
    about = "stock plus the descheduler's LowNodeUtilization on allocation"
    high, low, per_run = 0.9, 0.5, 4

    def deschedule(self, world: World) -> None:
        share = {n: requested_units(node) / world.units[n] for n, node in world.nodes.items() if n not in world.down}
        evict_from_overutilised(world, share, self.low, self.high, self.per_run, self.rng)


def evict_from_overutilised(world: World, share: dict[str, float], low: float, high: float, per_run: int,
                            rng: random.Random) -> None:
    """LowNodeUtilization's move: while some node is under `low`, evict a random inference pod
    from each node over `high`, most utilised first, `per_run` in all."""
    if not any(v < low for v in share.values()):
        return
    evicted = 0
    for name in sorted(share, key=lambda n: -share[n]):
        if share[name] <= high or evicted >= per_run:
            break
        victims = [p for p in world.pods.values() if p.node == name and p.service is not None]
        if victims:
            recreate(world, rng.choice(victims))
            world.evictions += 1
            evicted += 1


class LowNodeUtilizationActual(Stock):
    """kubernetes-sigs/descheduler's LowNodeUtilization reading actual utilisation from Prometheus
    (`metricsUtilization.prometheus`): a node under `low` % of its GPUs' reported utilisation is
    underutilised, over `high` % overutilised; while both kinds exist, it evicts from the most
    utilised nodes, `per_run` pods a run. Its thresholds, 20 % and 70 % of GPU utilisation: assumption."""

    name = "lownodeutilization-actual"
    about = "stock plus LowNodeUtilization on the GPU utilisation Prometheus reports"
    low, high, per_run = 20.0, 70.0, 4

    def deschedule(self, world: World) -> None:
        lag = telemetry_lag(world)
        if len(world.history) <= lag:
            return
        observed = {n: u for n, u in world.history[-1 - lag].items() if n not in world.down}
        evict_from_overutilised(world, observed, self.low, self.high, self.per_run, self.rng)
