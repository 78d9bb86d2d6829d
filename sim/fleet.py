"""Synthetic GPU fleets with a chosen load profile, deterministic for a seed. Pure, no I/O."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from scoring.ingest.telemetry import GpuSample, PodRef

PROFILES = ("skewed", "uniform", "idle", "failing")
"""skewed: a heavy-tailed few nodes run hot while most idle — the pile-up the stock scheduler
makes. uniform: every node moderately busy. idle: nothing running. failing: skewed, plus one node
with a critical XID and one under GPU-memory pressure."""

H100_MEMORY_MIB = 81559.0
BOOST_CLOCK_MHZ, IDLE_CLOCK_MHZ = 1980.0, 345.0
"""A busy GPU's SM clock (an H100 SXM's boost clock, `sim.llm.hardware`), and where an idle one
parks it (assumption, as `sim.llm.world` parks it): dcgm-exporter exports DCGM_FI_DEV_SM_CLOCK by default."""
BUSY_PCIE_BYTES, IDLE_PCIE_BYTES = (98e6, 33e6), (1e6, 0.5e6)
"""(RX, TX) bytes a second: a busy GPU's as a real scrape's busy A100 shows them
(`tests/fixtures/real_exporters/nvidia-docs-a100-mig-1g5gb.txt`), an idle one's a trickle
(assumption); no switch is busy, so the PCIe signal's queries scan every GPU and return nothing."""


@dataclass(frozen=True, slots=True)
class FleetSpec:
    nodes: int = 8
    gpus_per_node: int = 8
    profile: str = "skewed"
    seed: int = 1
    model: str = "NVIDIA H100 80GB HBM3"
    node_prefix: str = "gpu-node-"

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("a fleet needs at least one node with one GPU")
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}; choose one of {', '.join(PROFILES)}")

    def node_name(self, index: int) -> str:
        return f"{self.node_prefix}{index:0{max(2, len(str(self.nodes - 1)))}d}"


def node_load_levels(spec: FleetSpec) -> list[float]:
    """Target mean utilisation (0–1) per node for the profile."""
    rng = random.Random(spec.seed)
    if spec.profile == "idle":
        return [0.0] * spec.nodes
    if spec.profile == "uniform":
        return [0.40 + rng.uniform(-0.05, 0.05) for _ in range(spec.nodes)]
    # Heavy-tailed: a quarter of the nodes carry most of the load, the rest are nearly idle.
    hot = max(1, spec.nodes // 4)
    return [0.88 + rng.uniform(0, 0.1) if i < hot else (0.55 + rng.uniform(0, 0.1) if i < hot + hot // 2 + 1
            else 0.05 + rng.uniform(0, 0.2)) for i in range(spec.nodes)]


def generate_fleet(spec: FleetSpec) -> list[GpuSample]:
    """Every GPU's reading. A GPU with load is allocated to a pod; idle GPUs are free."""
    rng = random.Random(spec.seed * 7919 + 1)
    readings: list[GpuSample] = []
    levels = node_load_levels(spec)
    for n, level in enumerate(levels):
        node = spec.node_name(n)
        # Busy GPUs share the node's load so that the node's mean utilisation is `level`.
        busy_gpus = math.ceil(level * spec.gpus_per_node - 1e-9)
        busy_util = 100 * level * spec.gpus_per_node / busy_gpus if busy_gpus else 0.0
        memory_pressure = spec.profile == "failing" and n == spec.nodes - 2
        for g in range(spec.gpus_per_node):
            busy = g < busy_gpus
            util = min(100.0, max(0.0, busy_util + rng.uniform(-3, 3))) if busy else 0.0
            used = (0.35 + 0.4 * level + rng.uniform(0, 0.05)) * H100_MEMORY_MIB if busy else 512.0
            if memory_pressure:
                used = 0.97 * H100_MEMORY_MIB
            xid = 79 if spec.profile == "failing" and n == spec.nodes - 1 and g == 0 else 0
            readings.append(GpuSample(
                node=node,
                gpu=str(g),
                uuid=f"GPU-{spec.seed:08x}-{n:04x}-{g:04x}-0000-{n * spec.gpus_per_node + g:012x}",
                model=spec.model,
                pci_bus_id=f"00000000:{0x18 + g * 0x10:02X}:00.0",
                util_percent=round(util, 1),
                fb_used_mib=round(used),
                fb_free_mib=round(H100_MEMORY_MIB - round(used)),
                temperature_c=round(32 + 45 * util / 100 + rng.uniform(0, 3)),
                power_w=round(70 + 6.3 * util + rng.uniform(0, 10), 3),
                last_xid=xid,
                sm_clock_mhz=BOOST_CLOCK_MHZ if busy else IDLE_CLOCK_MHZ,
                pcie_rx_bytes=(BUSY_PCIE_BYTES if busy else IDLE_PCIE_BYTES)[0],
                pcie_tx_bytes=(BUSY_PCIE_BYTES if busy else IDLE_PCIE_BYTES)[1],
                pod=PodRef("inference", f"svc-{n % 7}-{n:04d}{g}", "server") if busy or memory_pressure else None,
            ))
    return readings
