"""The temperature signal: the node's hottest GPU, hot from `heat.hotTemperatureC`. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scoring import dcgm
from scoring.ingest.rows import Series, selector
from scoring.ingest.signals.base import BY_NODE, NodeOf, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry
from scoring.plugins import NoArgs, Registration
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict


class Temperature:
    name = "temperature"
    exporters = ("dcgm-exporter",)

    def queries(self, matchers: str) -> dict[str, str]:
        return {"temperature_max": f"max by ({BY_NODE}) ({selector(dcgm.GPU_TEMP, matchers)})"}

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        hottest: dict[str, float] = {}
        for s in samples:
            if s.temperature_c is not None:
                hottest[s.node] = max(hottest.get(s.node, s.temperature_c), s.temperature_c)
        return {"temperature_max": [Series({"node": node}, value) for node, value in hottest.items()]}

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        hottest: dict[str, float] = {}
        for row in rows.get("temperature_max", ()):
            if node := node_of(row):
                hottest[node] = max(hottest.get(node, row.value), row.value)
        return {node: {"temperature_max_c": value} for node, value in hottest.items()}

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        temperature = node.temperature_max_c
        if temperature is not None and temperature >= policy.hot_temperature_c:
            return [(Tier.HOT, f"GPU temperature {temperature:.0f}°C ≥ {policy.hot_temperature_c:g}°C")]
        return []

    def explain(self, reasons: Sequence[str]) -> str | None:
        return None


REGISTRATION = Registration("temperature", NoArgs, lambda args: Temperature())
