"""The degraded-GPU signal: a GPU whose SM clock under load sits well under the median of its
model's GPUs under load runs every step slower than its peers, with no clock-event bit to say so.
Pure, no I/O.

GPUs of one model differ by 8 % on average and outliers run 1.5× slower (Sinha et al., "Not All
GPUs Are Created Equal", SC22, arXiv 2208.11035); NVML's hardware slowdown halves the clocks or
more. `clockShareOfPeers` 0.8 sits 2.5 times the published mean spread under the median, and
above both the outliers (1 / 1.5 = 0.67) and a hardware slowdown (≤ 0.5). A clock a power cap
holds down is the throttling signal's to judge, so such GPUs are left out on both sides. Only a
busy GPU is judged: an idle one parks its clocks.

A degraded GPU a pod holds slows that pod, whose node is warm with the reason (the descheduler's
`degraded` strategy weighs moving it); a node with half or more of its GPUs degraded is hot."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scoring import dcgm
from scoring.ingest.rows import Series, selector
from scoring.ingest.signals.base import BY_UNIT, NodeOf, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry, unit_id
from scoring.plugins import Registration
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict

NAME = "degraded"
CLOCK, PEERS = "degraded_clock_mhz", "peer_clock_mhz"
"""Reading names, each followed by ":<unit>": the unit's clock under load and its model's median."""


@dataclass(frozen=True)
class Args:
    clock_share_of_peers: float = 0.8
    """Under this share of its model's median clock under load, a GPU is degraded (module docstring)."""
    busy_percent: float = 50.0
    """A GPU at or over this GPU_UTIL is under load: its clock says how fast it runs (assumption)."""
    memory_seconds: int = 3600
    """A GPU found degraded stays so this long after it was last seen so (0: only while seen). An
    idle GPU parks its clock, so without it a slow GPU nobody holds looks healthy, and the next pod
    may be given it; slow-but-alive episodes last from tens of seconds to nearly ten hours (FALCON,
    arXiv 2410.12588), an outlier for good. The hour: assumption."""

    def validate(self) -> list[str]:
        problems = []
        if self.memory_seconds < 0:
            problems.append(f"memorySeconds: must be 0 or more, got {self.memory_seconds}")
        if not 0 < self.clock_share_of_peers < 1:
            problems.append(f"clockShareOfPeers: must be in (0, 1), got {self.clock_share_of_peers}")
        if not 0 < self.busy_percent <= 100:
            problems.append(f"busyPercent: must be in (0, 100], got {self.busy_percent}")
        return problems


def degraded_gpus(node: NodeTelemetry) -> list[tuple[str, float, float]]:
    """(unit, its clock, its model's median clock) for each degraded GPU of the node, in unit order."""
    return [(unit, clock, node.reading(f"{PEERS}:{unit}") or 0.0) for unit, clock in node.readings_per(CLOCK)]


class Degraded:
    name = NAME
    exporters = ("dcgm-exporter",)

    def __init__(self, args: Args = Args()) -> None:
        self.args = args
        self.memory = {"degraded_clocks": args.memory_seconds}

    def queries(self, matchers: str) -> dict[str, str]:
        held = dcgm.reason_bits_set(f"max by ({BY_UNIT}) ({selector(dcgm.CLOCK_THROTTLE_REASONS, matchers)})",
                                    dcgm.POWER_CAP_REASONS)
        loaded = (f"(max by ({BY_UNIT}, modelName) ({selector(dcgm.SM_CLOCK, matchers)})"
                  f" and on ({BY_UNIT}) (max by ({BY_UNIT}) ({selector(dcgm.GPU_UTIL, matchers)}) >= {self.args.busy_percent:g})"
                  f" unless on ({BY_UNIT}) ({held}))")
        peers = f"quantile by (modelName) (0.5, {loaded})"
        return {"degraded_clocks": f"{loaded} < on (modelName) group_left () ({self.args.clock_share_of_peers:g} * {peers})",
                "peer_clocks": peers}

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        by_model: dict[str, list[GpuSample]] = defaultdict(list)
        for s in samples:
            capped = s.clock_reasons is not None and dcgm.has_reason(s.clock_reasons, dcgm.POWER_CAP_REASONS)
            if s.sm_clock_mhz is not None and (s.util_percent or 0.0) >= self.args.busy_percent and not capped:
                by_model[s.model].append(s)
        found: dict[str, list[Series]] = {}
        for model, loaded in by_model.items():
            median = statistics.median(s.sm_clock_mhz for s in loaded)
            found.setdefault("peer_clocks", []).append(Series({"modelName": model}, median))
            found.setdefault("degraded_clocks", []).extend(
                Series({"node": s.node, "gpu": s.gpu, "GPU_I_ID": s.mig_instance, "modelName": model}, s.sm_clock_mhz)
                for s in loaded if s.sm_clock_mhz < self.args.clock_share_of_peers * median)
        return found

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        peers = {row.labels.get("modelName", ""): row.value for row in rows.get("peer_clocks", ())}
        readings: dict[str, dict[str, float]] = {}
        for row in rows.get("degraded_clocks", ()):
            if node := node_of(row):
                unit = unit_id(row.labels.get("gpu", "?"), row.labels.get("GPU_I_ID", ""))
                readings.setdefault(node, {})[f"{CLOCK}:{unit}"] = row.value
                readings[node][f"{PEERS}:{unit}"] = peers.get(row.labels.get("modelName", ""), 0.0)
        return {node: {"readings": found} for node, found in readings.items()}

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        slow = degraded_gpus(node)
        if not slow:
            return []
        tier = Tier.HOT if 2 * len(slow) >= max(1, node.gpus) else Tier.WARM
        return [(tier, f"GPU {unit} degraded: clock {clock:,.0f} of {peers:,.0f} MHz under load")
                for unit, clock, peers in slow]

    def explain(self, reasons: Sequence[str]) -> str | None:
        """e.g. "degraded: GPU 3"."""
        units = degraded_units(reasons)
        return f"degraded: GPU {', '.join(units)}" if units else None


def degraded_units(reasons: Sequence[str]) -> list[str]:
    """The units a node's verdict reasons call degraded (`Degraded.verdicts` wrote them)."""
    return [reason.split()[1] for reason in reasons if reason.startswith("GPU ") and " degraded: " in reason]


REGISTRATION = Registration(NAME, Args, Degraded)
