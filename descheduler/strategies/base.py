"""What a descheduler strategy is: it reads a run's inputs and names the nodes to move pods from,
why, how much each must shed and in what order its pods go. Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from descheduler.cluster import PodInfo
from descheduler.proposals import Skip
from scoring.heat import NodeHeat
from scoring.policy import DeschedulerPolicy
from scoring.serving import SustainedServing
from scoring.telemetry import ClusterSnapshot, WindowStats

Candidate = tuple[PodInfo, float]
"""An evictable pod on a source node, and the points of node utilisation its GPUs account for."""


@dataclass(frozen=True)
class PlanInputs:
    """Everything a run's strategies read, taken once."""

    heat: Mapping[str, NodeHeat]
    snapshot: ClusterSnapshot
    window: Mapping[str, WindowStats]
    """Each node's utilisation over `descheduler.windowSeconds`."""
    serving_window: Mapping[tuple[str, str], SustainedServing]
    """Each serving replica's pressure over the same window."""
    policy: DeschedulerPolicy
    running: Counter
    """Workload → its running replicas."""
    throttle_window: Mapping[str, WindowStats] = field(default_factory=dict)
    """Each node's count of GPUs held below their clocks by a power cap or heat, over the window;
    read only where some node is throttled now."""


@dataclass(frozen=True)
class Source:
    """A node a strategy moves pods from."""

    node: str
    reason: str
    excess: float
    """How much the node must shed, in the strategy's own unit."""
    order: Callable[[list[Candidate], list[Skip]], list[Candidate]]
    """The evictable candidates in the order they go; those that may not go are left out and
    added to the skip list with the reason."""
    sheds: Callable[[float], float]
    """How much of the excess moving one pod sheds, from its share."""
    weigh_payback: bool = True
    """Whether a move must pay for its restart (`descheduler.payback`); not where the pod serves
    nothing where it is (its GPU has failed)."""


class Strategy(Protocol):
    name: str

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """The nodes this strategy moves pods from, first first; none of `taken`, which earlier
        strategies claimed."""
        ...

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        """What the run should say about nodes this strategy looked at and left."""
        ...
