"""What a placement policy is to the simulator: the Policy protocol every peer implements. Pure."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sim.world_state import SimPod, World


class Policy(Protocol):
    """One way of running a cluster, stepped by `sim.run`. Each tick the run lets it carry on
    with what it started (`tick`), asks it to place every pending pod, tells it of each binding,
    and every `deschedulerEveryTicks` lets it evict.

    What it sees is the world: its nodes and pods as the API server lists them
    (`sim.engine.cluster_objects`) and what the exporters reported, `telemetry_lag` late
    (`sim.policies.exporters`); reading the world's true state is for references only
    (`coolest-node`), and says so."""

    name: str
    about: str
    """One line for `simulate --list`."""

    def __init__(self, rng: random.Random) -> None: ...

    def place(self, world: World, pod: SimPod) -> str | None:
        """The node the pod binds to (the scheduler's choice after whatever the policy did to
        the pod), or None to leave it pending this tick."""

    def bound(self, world: World, pod: SimPod, node: str) -> None:
        """Told of every binding, as a watch of pods would show it."""

    def deschedule(self, world: World) -> None:
        """Evict what it would (`sim.engine.recreate`: the controller makes a replacement)."""

    def tick(self, world: World) -> None:
        """Each tick, before any placement: carry on with what it started (a staged eviction)."""

    def advice_metrics(self) -> dict[str, float]:
        """Figures of its own for the report (empty for most)."""
