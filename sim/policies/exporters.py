"""What the simulated exporters reported, as a policy sees it: late by the telemetry lag. Pure."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from scoring import dcgm
from scoring.ingest.telemetry import GpuSample, PodRef
from sim.world_state import World
from sim.llm.telemetry import MIB
from sim.llm.state import GpuReport
from sim.llm.world import gpu_of_node


EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def telemetry_lag(world: World) -> int:
    """Ticks between a reading and what a policy sees of it (collect interval plus scrape)."""
    return math.ceil(world.scenario.telemetry_lag_seconds / world.scenario.tick_seconds)


def sim_time(world: World) -> datetime:
    return EPOCH + timedelta(seconds=world.now_seconds)


def observed_samples(world: World, lag: int = 0, busy: dcgm.BusyMeasure = dcgm.BusyMeasure()) -> list[GpuSample]:
    """Per-GPU readings as an exporter reported them `lag` ticks ago (pods mapped to their GPUs),
    each GPU's busy share read from the gauge `busy` names: GPU_UTIL from the engine's kernel
    share (or the profiling gauge), FB_USED from the server's preallocation, power from its
    activity; a missed scrape has no sample."""
    observed, readings = world.gpu_util[-1 - lag], world.gpu_readings[-1 - lag]
    samples = []
    for name, gpus in observed.items():
        gpu = gpu_of_node(world, name)
        model, memory_mib = gpu.aliases[0], gpu.memory_bytes / MIB
        for index, reported in gpus.items():
            if reported is None:
                continue
            util, key = reported
            report = readings[name][index]
            samples.append(GpuSample(node=name, gpu=str(index), uuid=f"GPU-{name}-{index}", model=model,
                                     pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
                                     util_percent=busy_share(util, report, busy), fb_used_mib=report.fb_used_mib,
                                     fb_free_mib=memory_mib - report.fb_used_mib,
                                     temperature_c=report.temperature_c, power_w=report.power_w,
                                     clock_reasons=report.clock_reasons, last_xid=report.xid,
                                     sm_clock_mhz=report.sm_clock_mhz,
                                     pcie_tx_bytes=report.pcie_tx_bytes, pcie_rx_bytes=report.pcie_rx_bytes,
                                     pod=PodRef(*key.split("/", 1)) if key else None))
    return samples


_PROFILED = {dcgm.GR_ENGINE_ACTIVE: "sm_active", dcgm.SM_ACTIVE: "sm_active", dcgm.SM_OCCUPANCY: "sm_occupancy",
             dcgm.PIPE_TENSOR_ACTIVE: "pipe_tensor_active", dcgm.DRAM_ACTIVE: "dram_active"}
"""Which of a `GpuReport`'s profiling fields each busy gauge reads."""


def reads_kernel_share(busy: dcgm.BusyMeasure) -> bool:
    """Whether `busy` reads what the world's GPU_UTIL reading is: GPU_UTIL itself, or
    GR_ENGINE_ACTIVE at full scale (the same kernel share in this model)."""
    return busy.gauge is None or (busy.gauge == dcgm.GR_ENGINE_ACTIVE and busy.full_scale == 1)


def busy_share(util: float, report: GpuReport, busy: dcgm.BusyMeasure) -> float:
    """A GPU's busy share as `busy` reads it: the exporter's GPU_UTIL reading unless another
    profiling gauge, or another full scale, is asked for."""
    if reads_kernel_share(busy):
        return util
    return min(100.0, 100.0 * getattr(report, _PROFILED[busy.gauge]) / busy.full_scale)
