"""One descheduler step, telemetry in and a plan out, shared by a real run (`descheduler.run`)
and the simulator (`sim.policies`). Pure, no I/O: what it reads comes through a
`DeschedulerTelemetry` source — Prometheus in production, the simulated world's exporters in the
simulator."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from descheduler.cluster import Cluster
from descheduler.ledger import LedgerState
from descheduler.plan import Plan, plan_evictions
from scoring.errors import TelemetryError
from scoring.heat import FleetHeat, fleet_heat
from scoring.policy import BalancerPolicy
from scoring.serving import SustainedServing
from scoring.telemetry import ClusterSnapshot, WindowStats


class DeschedulerTelemetry(Protocol):
    """What a descheduler step reads, asked in this order (each only when the step gets that far)."""

    where: str
    """Where the telemetry comes from, for messages ("Prometheus at http://…")."""

    def snapshot(self) -> ClusterSnapshot: ...

    def window(self) -> Mapping[str, WindowStats]:
        """Each node's utilisation over `descheduler.windowSeconds`."""
        ...

    def serving_window(self, snapshot: ClusterSnapshot) -> Mapping[tuple[str, str], SustainedServing]:
        """Each serving replica the snapshot shows, over the same window."""
        ...

    def throttle_window(self) -> Mapping[str, WindowStats]:
        """Each node's count of GPUs held below their clocks over the window (asked only while some is)."""
        ...


@dataclass(frozen=True)
class Assessment:
    """The fleet as a step found it."""

    snapshot: ClusterSnapshot
    fleet: FleetHeat
    at: datetime
    """When it was judged: just after the snapshot was read."""


def assess(source: DeschedulerTelemetry, policy: BalancerPolicy, now: Callable[[], datetime]) -> Assessment:
    """The snapshot and its heat. Raises `TelemetryError` — zero evictions — when the telemetry is
    stale or shows no GPU node: acting on it could move pods off nodes that have cooled."""
    snapshot = source.snapshot()
    at = now()  # after the read: its age counts the time the read took
    fleet = fleet_heat(snapshot, policy.heat, now=at, staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
    if fleet.stale:
        raise TelemetryError(f"telemetry from {source.where} is stale or empty "
                             f"({fleet.age_seconds:.0f}s old, {len(snapshot.nodes)} GPU nodes): no evictions")
    return Assessment(snapshot, fleet, at)


def plan(source: DeschedulerTelemetry, found: Assessment, *, cluster: Cluster, ledger: LedgerState,
         policy: BalancerPolicy) -> Plan:
    """The step's evictions, from the assessed fleet and the windows the source reads."""
    return plan_evictions(fleet=found.fleet, snapshot=found.snapshot, window=source.window(), cluster=cluster,
                          ledger=ledger, policy=policy.descheduler, now=found.at,
                          serving_window=source.serving_window(found.snapshot),
                          # Only a node throttled now can be a throttling source: no query otherwise.
                          throttle_window=source.throttle_window() if any(
                              node.throttled for node in found.fleet.nodes) else {})
