"""The PCIe signal: every byte between a GPU and the host crosses the uplink of the PCIe switch the
GPU sits behind, so a new replica given a free GPU beside a training worker that streams batches
or offloads its optimizer state waits on its neighbour's traffic. Pure, no I/O.

A switch whose GPUs move `busyBytesPerSecond` or more, both ways together
(`DCGM_FI_PROF_PCIE_TX_BYTES` plus `_RX_BYTES`, profiling fields), and that has a free GPU behind
it (one dcgm-exporter names no pod on), makes its node warm with the reason. No exporter says
which GPUs share a switch: `gpusPerSwitch` GPUs in index order do, two as in a DGX A100 or DGX
H100 (each of their PCIe switches carries two GPUs and their NICs), an assumption for other
layouts. Without dcgm-exporter's Kubernetes mapping no GPU names a pod and every GPU counts as free.

Why it matters (README, "PCIe neighbours"): PCIe-aware control cut p99 latency by 15 % on A100s
shared with training jobs and data loaders, placement about half of it, and vLLM's TTFT p99 by
10–15 % (Darzi et al., arXiv 2508.20274). `busyBytesPerSecond` 16 GB/s is a quarter of a Gen4 x16
uplink both ways (63 GB/s) and an eighth of Gen5's: what one offloading training GPU moves
(ZeRO-Offload's 4 bytes per parameter a step, `sim.llm.pcie`), well above a data loader's or a
serving replica's traffic (assumption)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scoring import dcgm
from scoring.ingest.rows import Series, selector
from scoring.ingest.signals.base import BY_NODE, BY_UNIT, NodeOf, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry
from scoring.plugins import Registration
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict

NAME = "pcie"
SWITCH_LABEL = "pcie_switch"
BYTES, FREE = "pcie_switch_bytes", "pcie_switch_free"
"""Reading names, each followed by ":<switch>": the busy switch's bytes a second, and its free GPUs."""
NO_POD = 'pod=""'
"""A GPU dcgm-exporter names no pod on: free (the label is absent or empty)."""
MAX_GPUS = 16
"""The most GPUs a node's switches are mapped for (the largest GPU servers carry 16)."""


@dataclass(frozen=True)
class Args:
    gpus_per_switch: int = 2
    """GPUs behind one PCIe switch, in index order (module docstring)."""
    busy_bytes_per_second: float = 16e9
    """A switch whose GPUs move this much, both ways together, is busy (module docstring)."""

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.gpus_per_switch <= MAX_GPUS:
            problems.append(f"gpusPerSwitch: must be 1 to {MAX_GPUS}, got {self.gpus_per_switch}")
        if not self.busy_bytes_per_second > 0:
            problems.append(f"busyBytesPerSecond: must be more than 0, got {self.busy_bytes_per_second}")
        return problems


def busy_switches(node: NodeTelemetry) -> list[tuple[str, float, int]]:
    """(switch, its bytes a second, its free GPUs) for each busy switch of the node with a free GPU."""
    free = dict(node.readings_per(FREE))
    return [(switch, moved, int(free[switch])) for switch, moved in node.readings_per(BYTES) if free.get(switch)]


class Pcie:
    name = NAME
    exporters = ("dcgm-exporter",)

    def __init__(self, args: Args = Args()) -> None:
        self.args = args

    def switch_of(self, gpu: str) -> str | None:
        return str(int(gpu) // self.args.gpus_per_switch) if gpu.isdigit() else None

    def _switched(self, expression: str) -> str:
        """`expression` with each series' switch in `pcie_switch`, from its `gpu` label."""
        size = self.args.gpus_per_switch
        for switch in range(-(-MAX_GPUS // size)):
            members = "|".join(str(g) for g in range(switch * size, min(MAX_GPUS, (switch + 1) * size)))
            expression = f'label_replace({expression}, "{SWITCH_LABEL}", "{switch}", "gpu", "{members}")'
        return expression

    def queries(self, matchers: str) -> dict[str, str]:
        moved = self._switched(f"sum by ({BY_UNIT}) ({selector(dcgm.PCIE_TX_BYTES, matchers)})"
                               f" + sum by ({BY_UNIT}) ({selector(dcgm.PCIE_RX_BYTES, matchers)})")
        busy = f"sum by ({BY_NODE}, {SWITCH_LABEL}) ({moved}) >= {self.args.busy_bytes_per_second:g}"
        free = self._switched(f"max by ({BY_UNIT}) ({selector(dcgm.GPU_UTIL, matchers, NO_POD)})"
                              f" or max by ({BY_UNIT}) ({selector(dcgm.GR_ENGINE_ACTIVE, matchers, NO_POD)})")
        return {"pcie_busy_switches": busy,
                "pcie_free_gpus": f"count by ({BY_NODE}, {SWITCH_LABEL}) ({free})"
                                  f" and on ({BY_NODE}, {SWITCH_LABEL}) ({busy})"}

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        moved: dict[tuple[str, str], float] = defaultdict(float)
        free: dict[tuple[str, str], int] = defaultdict(int)
        for s in samples:
            if (switch := self.switch_of(s.gpu)) is None:
                continue
            if s.pcie_tx_bytes is not None and s.pcie_rx_bytes is not None:
                moved[s.node, switch] += s.pcie_tx_bytes + s.pcie_rx_bytes
            if s.pod is None:
                free[s.node, switch] += 1
        busy = {key: value for key, value in moved.items() if value >= self.args.busy_bytes_per_second}
        return {"pcie_busy_switches": [Series({"node": n, SWITCH_LABEL: sw}, v) for (n, sw), v in busy.items()],
                "pcie_free_gpus": [Series({"node": n, SWITCH_LABEL: sw}, float(free[n, sw]))
                                   for (n, sw) in busy if free.get((n, sw))]}

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        readings: dict[str, dict[str, float]] = {}
        for rows_name, reading in (("pcie_busy_switches", BYTES), ("pcie_free_gpus", FREE)):
            for row in rows.get(rows_name, ()):
                if node := node_of(row):
                    readings.setdefault(node, {})[f"{reading}:{row.labels.get(SWITCH_LABEL, '?')}"] = row.value
        return {node: {"readings": found} for node, found in readings.items()}

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        size = self.args.gpus_per_switch
        verdicts = []
        for switch, moved, free in busy_switches(node):
            first = int(switch) * size if switch.isdigit() else None
            gpus = "" if first is None else f" (GPU {first})" if size == 1 else f" (GPUs {first}–{first + size - 1})"
            verdicts.append((Tier.WARM, f"PCIe switch {switch}{gpus} busy: {moved / 1e9:,.1f} GB/s "
                                        f"beside {free} free GPU{'s' if free > 1 else ''}"))
        return verdicts

    def explain(self, reasons: Sequence[str]) -> str | None:
        """e.g. "PCIe busy: switch 1"."""
        switches = [reason.split()[2] for reason in reasons if reason.startswith("PCIe switch ")]
        return f"PCIe busy: switch {', '.join(switches)}" if switches else None


REGISTRATION = Registration(NAME, Args, Pcie)
