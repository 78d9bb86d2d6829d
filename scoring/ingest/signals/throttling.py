"""The throttling signal: GPUs whose clocks a power cap or heat holds down (NVML's clock-event
reasons, `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`) run every kernel slower, whatever their duty cycle
says. A node is warm while a few of its GPUs are, hot once half or more are; a pod steered away
hears why ("hot, throttled: power cap"). Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from scoring import dcgm
from scoring.ingest.rows import Series, selector
from scoring.ingest.signals.base import BY_NODE, BY_UNIT, NodeOf, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry
from scoring.plugins import NoArgs, Registration
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict

PREFIX = "throttled"
"""The reason prefix of its verdicts."""
COUNTS = (("power_capped", "gpus_power_capped", "power cap", dcgm.POWER_CAP_REASONS),
          ("heat_throttled", "gpus_heat_throttled", "heat", dcgm.HEAT_REASONS))
"""(row set, `NodeTelemetry` field, what holds the clocks, the reason bits counted)."""


class Throttling:
    name = "throttling"
    exporters = ("dcgm-exporter",)

    def queries(self, matchers: str) -> dict[str, str]:
        # One value per GPU first: a GPU shared by DRA pods is written once per pod.
        reasons = f"max by ({BY_UNIT}) ({selector(dcgm.CLOCK_THROTTLE_REASONS, matchers)})"
        return {rows: f"count by ({BY_NODE}) ({dcgm.reason_bits_set(reasons, bits)})" for rows, *_, bits in COUNTS}

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        held: Counter = Counter()
        for s in samples:
            for rows, *_, bits in COUNTS:
                if s.clock_reasons and dcgm.has_reason(s.clock_reasons, bits):
                    held[rows, s.node] += 1
        found: dict[str, list[Series]] = {}
        for (rows, node), count in held.items():
            found.setdefault(rows, []).append(Series({"node": node}, float(count)))
        return found

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        fields: dict[str, dict[str, Any]] = {}
        for name, field, *_ in COUNTS:
            for row in rows.get(name, ()):
                if node := node_of(row):
                    counts = fields.setdefault(node, {})
                    counts[field] = counts.get(field, 0) + int(row.value)
        return fields

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        verdicts = []
        for _, field, what, _ in COUNTS:
            if count := getattr(node, field):
                tier = Tier.HOT if 2 * count >= max(1, node.gpus) else Tier.WARM
                verdicts.append((tier, f"{PREFIX}: {what} ({count} of {node.gpus} GPUs held below their clocks)"))
        return verdicts

    def explain(self, reasons: Sequence[str]) -> str | None:
        """e.g. "throttled: power cap"."""
        held = held_by(reasons)
        return f"{PREFIX}: {held}" if held else None


def held_by(reasons: Sequence[str]) -> str | None:
    """What holds a node's clocks down, from its reasons: "power cap" from "throttled: power cap
    (2 of 8 GPUs held below their clocks)"; None where nothing does."""
    return next((reason.split(":", 1)[1].split("(", 1)[0].strip() for reason in reasons
                 if reason.startswith(PREFIX)), None)


REGISTRATION = Registration("throttling", NoArgs, lambda args: Throttling())
