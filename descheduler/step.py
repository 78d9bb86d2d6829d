"""One descheduler step, telemetry in and a plan out, shared by a real run (`descheduler.run`)
and the simulator (`sim.policies`). Pure, no I/O: what it reads comes through a
`DeschedulerTelemetry` source — Prometheus in production, the simulated world's exporters in the
simulator."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from descheduler.cluster import Cluster
from descheduler.ledger import LedgerState
from descheduler.plan import Plan, plan_evictions
from descheduler.strategies import configure
from scoring.errors import TelemetryError
from scoring.heat import FleetHeat, fleet_heat
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import BalancerPolicy


class DeschedulerTelemetry(Protocol):
    """What a descheduler step reads: the snapshot, then the windows its strategies declare."""

    where: str
    """Where the telemetry comes from, for messages ("Prometheus at http://…")."""

    def snapshot(self) -> ClusterSnapshot: ...

    def window(self, name: str, snapshot: ClusterSnapshot) -> Mapping[Any, Any]:
        """The window of that name (`descheduler.strategies.WINDOWS`) over `descheduler.windowSeconds`,
        for what the snapshot shows. KeyError for a name the source cannot serve."""
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
    """The step's evictions, from the assessed fleet and the windows its strategies declare for it
    (each read once, and none that no strategy asked for)."""
    strategies = configure(policy.descheduler)
    needed = dict.fromkeys(name for strategy in strategies for name in strategy.windows(found.fleet))
    windows = {name: source.window(name, found.snapshot) for name in needed}
    return plan_evictions(fleet=found.fleet, snapshot=found.snapshot, windows=windows, cluster=cluster,
                          ledger=ledger, policy=policy.descheduler, now=found.at, strategies=strategies)
