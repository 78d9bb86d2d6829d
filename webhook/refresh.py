"""One refresh of what admissions read, as pure functions: a snapshot assessed (heat, ranking),
then handed with the cluster view to the steering ledgers. The webhook's cache and the simulator
both refresh through here. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from scoring.advice.placement import PlacementIndex, index_fleet
from scoring.cluster.view import ClusterView
from scoring.heat import FleetHeat, fleet_heat
from scoring.ingest.serving import queueing_workloads
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import BalancerPolicy
from webhook.ledger import SteeringLedger


@dataclass(frozen=True, slots=True)
class Telemetry:
    """What admissions need from one refresh: the ranked fleet and how old its samples are.

    Deliberately small (no per-GPU data), so that a child process can build it and hand it over
    for the price of a short unpickle."""

    index: PlacementIndex
    sampled_at: datetime
    """The freshest sample's time (the snapshot's own time when no sample is dated)."""
    nodes: int
    tiers: tuple[tuple[str, int], ...] = ()
    """(node, tier as a number: 0 cool … 3 unhealthy) for every node, for the verdict series a
    request router reads (`webhook.metrics.register_node_verdicts`)."""

    def age_seconds(self, now: datetime) -> float:
        return max(0.0, (now - self.sampled_at).total_seconds())


def assess(snapshot: ClusterSnapshot, policy: BalancerPolicy, now: datetime) -> Telemetry:
    """Heat model and ranking for one snapshot. Pure."""
    return telemetry_of(snapshot, fleet_heat(snapshot, policy.heat, now=now,
                                             staleness_limit_seconds=policy.telemetry.staleness_limit_seconds))


def telemetry_of(snapshot: ClusterSnapshot, fleet: FleetHeat) -> Telemetry:
    """The ranking for a snapshot whose heat is already known (the simulator keeps the heat for
    its descheduler too). Pure."""
    index = index_fleet(fleet, {n.name: n.topology for n in snapshot.nodes if n.topology}, queueing_workloads(snapshot))
    return Telemetry(index, snapshot.newest_sample_at or snapshot.taken_at, len(snapshot.nodes),
                     tuple((node.name, int(node.tier)) for node in fleet.nodes))


def hand_over(telemetry: Telemetry, view: ClusterView | None, ledgers: Iterable[SteeringLedger]) -> None:
    """Give each ledger the refresh's ranking and the cluster view taken with it, so admissions
    between refreshes book against the same pair."""
    for ledger in ledgers:
        ledger.prepare(telemetry.index, view)
