"""The stock scheduler, and stock with GPUs scored: the baseline every peer builds on. Pure."""

from __future__ import annotations

import random

from scoring.cluster.claims import class_of
from sim.world_state import SimPod, World
from sim.scheduler import choose, evaluate


def requested_units(node) -> float:
    """GPU units (device-plugin GPUs, MIG instances, DRA-claimed devices) requested on the node."""
    return sum(q for r, q in node.requested.items() if r.startswith("nvidia.com/") or class_of(r))


class Stock:
    """The default profile: GPUs filtered on, never scored."""

    name = "stock"
    about = "kube-scheduler's default profile: GPUs filtered on, never scored"
    score_gpus = False

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def place(self, world: World, pod: SimPod) -> str | None:
        return choose(evaluate(pod.obj, list(world.nodes.values()), score_gpus=self.score_gpus,
                               context=world.context), self.rng)

    def bound(self, world: World, pod: SimPod, node: str) -> None:
        """Told of every binding, as a watch of pods would show it."""

    def deschedule(self, world: World) -> None:
        pass

    def tick(self, world: World) -> None:
        """Each tick, before any placement: carry on with what it started (a staged eviction)."""

    def advice_metrics(self) -> dict[str, float]:
        return {}


class StockGpuScored(Stock):
    """NodeResourcesFit also scoring `nvidia.com/gpu` (LeastAllocated): the cheap alternative."""

    name = "stock-gpu-scored"
    about = "stock, with NodeResourcesFit also scoring nvidia.com/gpu (LeastAllocated)"
    score_gpus = True
