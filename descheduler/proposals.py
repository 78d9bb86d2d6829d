"""What a descheduler run proposes: evictions, the pods it leaves and why, and the plan they make.
Pure data, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from descheduler.payback import Payback


class Limit(enum.Enum):
    PER_RUN = "evictions per run"
    PER_NODE = "evictions per node"
    PER_NAMESPACE = "evictions per namespace"


@dataclass(frozen=True, slots=True)
class PlannedEviction:
    namespace: str
    pod: str
    node: str
    workload: str
    reason: str
    payback: Payback | None = None
    """What the move gains and what its restart costs (None with the payback rule off)."""
    destination: str = ""
    """The cool node whose room the plan reserved for the pod's replacement."""
    stage: tuple[str, ...] = ()
    """The pod's images the destination does not list: pulled there before the eviction
    (make-before-break, `descheduler.prestage`)."""


@dataclass(frozen=True, slots=True)
class Skip:
    namespace: str
    pod: str
    reason: str
    limit: Limit | None = None


@dataclass(frozen=True)
class Plan:
    hot_nodes: tuple[str, ...]
    evictions: tuple[PlannedEviction, ...]
    skipped: tuple[Skip, ...]
    notes: tuple[str, ...]
