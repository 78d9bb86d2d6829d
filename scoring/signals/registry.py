"""The registry of node signals, and what the snapshot and the heat model ask of all of them. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scoring.policy import HeatPolicy
from scoring.rows import Series
from scoring.signals import health, temperature, throttling
from scoring.signals.base import NodeOf, NodeSignal, Rows
from scoring.telemetry import GpuSample, NodeTelemetry
from scoring.tiers import Verdict

SIGNALS: tuple[NodeSignal, ...] = (temperature.SIGNAL, throttling.SIGNAL, health.SIGNAL)


def queries(matchers: str) -> dict[str, str]:
    """Every signal's instant queries, by row-set name."""
    return {name: expr for signal in SIGNALS for name, expr in signal.queries(matchers).items()}


def aggregate(samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
    """Every signal's rows for these GPUs, as Prometheus would answer its queries."""
    return {name: rows for signal in SIGNALS for name, rows in signal.aggregate(samples).items()}


def read(rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
    """Node → the `NodeTelemetry` fields every signal fills."""
    fields: dict[str, dict[str, Any]] = {}
    for signal in SIGNALS:
        for node, found in signal.read(rows, node_of).items():
            fields.setdefault(node, {}).update(found)
    return fields


def verdicts(node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
    return [verdict for signal in SIGNALS for verdict in signal.verdicts(node, policy)]


def explain(reasons: Sequence[str]) -> str | None:
    """What the first signal with something to say tells a pod steered away from the node."""
    return next((said for signal in SIGNALS if (said := signal.explain(reasons))), None)

