"""The registry of node signals, and what the snapshot and the heat model ask of all of them. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scoring.ingest.rows import Series
from scoring.ingest.signals import degraded, health, host_cpu, pcie, temperature, throttling, tpot
from scoring.ingest.signals.base import NodeOf, NodeSignal, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry
from scoring.plugins import Registration, build_all
from scoring.policy import HeatPolicy
from scoring.tiers import Verdict

REGISTERED: dict[str, Registration[NodeSignal]] = {r.name: r for r in (
    temperature.REGISTRATION, throttling.REGISTRATION, health.REGISTRATION, host_cpu.REGISTRATION,
    degraded.REGISTRATION, pcie.REGISTRATION, tpot.REGISTRATION)}
SIGNALS: tuple[NodeSignal, ...] = tuple(r.build(r.args()) for r in REGISTERED.values())
"""Every signal with its default arguments: what reading rows and explaining reasons use (a signal
the policy turned off has no rows and gives no reasons)."""

_built: dict[str, tuple[NodeSignal, ...]] = {}


def configured(policy: HeatPolicy) -> tuple[NodeSignal, ...]:
    """The signals `heat.signals` turns on, each built from its arguments (built once per choice).
    PolicyError naming the entry for an unknown name or an argument that does not fit."""
    key = repr(policy.signals)
    if key not in _built:
        _built[key] = build_all(policy.signals, REGISTERED, "heat.signals", "signal")
    return _built[key]


def remembering(policy: HeatPolicy) -> list[tuple[NodeSignal, str, int]]:
    """(signal, row set, seconds) for every row set a signal the policy turns on remembers."""
    return [(signal, name, seconds) for signal in configured(policy)
            for name, seconds in getattr(signal, "memory", {}).items() if seconds]


def memories(policy: HeatPolicy) -> dict[str, int]:
    """Row set → the seconds it is remembered over (`remembering`), as the readers ask it."""
    return {name: seconds for _, name, seconds in remembering(policy)}


def queries(matchers: str, policy: HeatPolicy) -> dict[str, str]:
    """The instant queries of every signal the policy turns on, by row-set name."""
    return {name: expr for signal in configured(policy) for name, expr in signal.queries(matchers).items()}


def aggregate(samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
    """Every signal's rows for these GPUs, as Prometheus would answer its queries."""
    return {name: rows for signal in SIGNALS for name, rows in signal.aggregate(samples).items()}


def read(rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
    """Node → the `NodeTelemetry` fields every signal fills; the readings signals keep by name
    (a `readings` mapping from each) joined into one."""
    fields: dict[str, dict[str, Any]] = {}
    readings: dict[str, dict[str, float]] = {}
    for signal in SIGNALS:
        for node, found in signal.read(rows, node_of).items():
            found = dict(found)
            readings.setdefault(node, {}).update(found.pop("readings", {}))
            fields.setdefault(node, {}).update(found)
    for node, named in readings.items():
        if named:
            fields.setdefault(node, {})["readings"] = tuple(sorted(named.items()))
    return fields


def verdicts(node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
    return [verdict for signal in configured(policy) for verdict in signal.verdicts(node, policy)]


def explain(reasons: Sequence[str]) -> str | None:
    """What the first signal with something to say tells a pod steered away from the node."""
    return next((said for signal in SIGNALS if (said := signal.explain(reasons))), None)

