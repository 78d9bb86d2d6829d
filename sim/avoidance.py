"""The share of new pods each policy binds to nodes gpu-balancer's advice avoids (hot or unhealthy
at that moment), the simulator's twin of the control-plane measure. Pure."""

from __future__ import annotations

import random

from scoring.tiers import Tier
from sim.policies import GpuBalancer
from sim.world_state import World


class AvoidanceTally:
    """Counts bindings onto nodes the shipped advice would avoid, judged by the shipped product's
    own heat model over what its exporters show, whichever policy placed the pod: stock's share is
    the counterfactual, gpu-balancer's is how far its own advice held."""

    def __init__(self) -> None:
        self._eye = GpuBalancer(random.Random(0))
        self._tick = -1
        self._avoided: frozenset[str] = frozenset()
        self.placed = 0
        self.on_avoided = 0

    def bound(self, world: World, node: str) -> None:
        if self._tick != world.tick:
            heat = self._eye.heat(world)
            self._avoided = frozenset(n.name for n in heat[1].nodes if n.tier >= Tier.HOT) if heat else frozenset()
            self._tick = world.tick
        self.placed += 1
        self.on_avoided += node in self._avoided

    def metrics(self) -> dict[str, float]:
        return {"placed_on_avoided": self.on_avoided / self.placed} if self.placed else {}
