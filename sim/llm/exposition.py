"""A simulated serving-world run as its exporters would serve it, tick by tick: dcgm-exporter's
text (GPU_UTIL, framebuffer, power and its limit, temperature, SM clock, clock-event reasons and
the profiling fields, PCIe bytes among them where PCIe neighbours are a condition) and vLLM's
(batch, queue, KV cache, TTFT). Pure; `fake-dcgm --scenario` and `fake-serving --scenario` serve
it."""

from __future__ import annotations

from scoring import dcgm
from sim.dcgm_text import render_exposition
from sim.world_state import World
from sim.llm.world import gpu_of_node, tdp_w
from sim.policies import observed_samples
from sim.serving_text import render_serving, served_from_world


def ticks(world: World) -> int:
    """How many ticks the run exported."""
    return len(world.gpu_readings)


def dcgm_text(world: World, tick: int, *, hostname_label: str = "Hostname") -> str:
    """dcgm-exporter's text at `tick`, profiling fields included; a GPU whose scrape was missed
    that tick is absent, as from a real scrape."""
    samples = observed_samples(world, lag=ticks(world) - 1 - tick)
    readings = world.gpu_readings[tick]
    extra = []
    for sample in samples:
        report = readings[sample.node][int(sample.gpu)]
        extra.append({
            dcgm.GPU_TEMP: round(report.temperature_c), dcgm.POWER_USAGE: round(report.power_w, 3),
            dcgm.FB_USED: round(report.fb_used_mib), dcgm.FB_FREE: round(sample.fb_free_mib or 0),
            dcgm.SM_CLOCK: round(report.sm_clock_mhz), dcgm.POWER_MGMT_LIMIT: tdp_w(gpu_of_node(world, sample.node)),
            dcgm.GR_ENGINE_ACTIVE: round(report.sm_active, 6), dcgm.SM_ACTIVE: round(report.sm_active, 6),
            dcgm.SM_OCCUPANCY: round(report.sm_occupancy, 6),
            dcgm.PIPE_TENSOR_ACTIVE: round(report.pipe_tensor_active, 6),
            dcgm.DRAM_ACTIVE: round(report.dram_active, 6),
            **({} if report.pcie_rx_bytes is None else {dcgm.PCIE_RX_BYTES: round(report.pcie_rx_bytes),
                                                         dcgm.PCIE_TX_BYTES: round(report.pcie_tx_bytes or 0.0)})})
    return render_exposition(samples, hostname_label=hostname_label, extra=extra)


def serving_text(world: World, tick: int) -> str:
    """vLLM's text of every replica serving at `tick`; counters as if each had served since the
    run began at its rate then."""
    return render_serving(served_from_world(world.serving[tick]),
                          elapsed_seconds=(tick + 1) * world.scenario.tick_seconds)
