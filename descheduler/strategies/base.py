"""What a descheduler strategy is: it reads a run's inputs and names the nodes to move pods from,
why, how much each must shed and in what order its pods go. Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from descheduler.cluster import PodInfo
from descheduler.proposals import Skip
from scoring.heat import FleetHeat, NodeHeat
from scoring.ingest.serving import SustainedServing
from scoring.ingest.telemetry import ClusterSnapshot, WindowStats
from scoring.policy import DeschedulerPolicy

Candidate = tuple[PodInfo, float]
"""An evictable pod on a source node, and the points of node utilisation its GPUs account for."""


@dataclass(frozen=True)
class PlanInputs:
    """Everything a run's strategies read, taken once."""

    heat: Mapping[str, NodeHeat]
    snapshot: ClusterSnapshot
    windows: Mapping[str, Mapping[Any, Any]]
    """The windows the run's strategies declared (`Strategy.windows`), by name (`WINDOWS`)."""
    policy: DeschedulerPolicy
    running: Counter
    """Workload → its running replicas."""

    @property
    def utilisation(self) -> Mapping[str, WindowStats]:
        return self.windows.get(UTILISATION, {})

    @property
    def serving(self) -> Mapping[tuple[str, str], SustainedServing]:
        return self.windows.get(SERVING, {})

    @property
    def throttling(self) -> Mapping[str, WindowStats]:
        return self.windows.get(THROTTLING, {})


UTILISATION, SERVING, THROTTLING = "utilisation", "serving", "throttling"
WINDOWS = {
    UTILISATION: "each node's GPU utilisation over `descheduler.windowSeconds`",
    SERVING: "each serving replica's pressure against its target over the same window",
    THROTTLING: "each node's count of GPUs a power cap or heat held below their clocks over the window",
}
"""What a telemetry source serves a strategy by name (`descheduler.step.DeschedulerTelemetry.window`)."""


def serve_window(readers: Mapping[str, Callable[[], Mapping[Any, Any]]], name: str, where: str) -> Mapping[Any, Any]:
    """A telemetry source's window by name, from its reader for each it serves; KeyError naming
    what `where` serves for any other."""
    if name not in readers:
        raise KeyError(f"no {name!r} window: {where} serves {', '.join(readers)}")
    return readers[name]()


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
    recovers: Callable[[PodInfo], float] | None = None
    """The share of a pod's service its move recovers, where the strategy knows it (a slow GPU's
    clock against its peers'); None: the payback rule's own estimate."""


class Strategy(Protocol):
    name: str

    def windows(self, fleet: FleetHeat) -> tuple[str, ...]:
        """The windows (`WINDOWS`) this run needs read for it; only those are asked of the source."""
        ...

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """The nodes this strategy moves pods from, first first; none of `taken`, which earlier
        strategies claimed."""
        ...

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        """What the run should say about nodes this strategy looked at and left."""
        ...
