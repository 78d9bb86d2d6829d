"""Names of the dcgm-exporter metrics and labels that gpu-balancer reads and writes. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
SM_OCCUPANCY = "DCGM_FI_PROF_SM_OCCUPANCY"
PIPE_TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
PCIE_TX_BYTES = "DCGM_FI_PROF_PCIE_TX_BYTES"
PCIE_RX_BYTES = "DCGM_FI_PROF_PCIE_RX_BYTES"
"""Bytes a second the GPU sends to and takes from the PCIe bus, headers included (profiling fields)."""
CLOCK_THROTTLE_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
"""NVML's clock-event reasons as a bitmask (1 GPU idle, 4 SW power cap, 8 HW slowdown, 32 SW
thermal, 64 HW thermal, 128 HW power brake); the name dcgm-exporter's released counters use."""
POWER_MGMT_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"

POWER_CAP_REASONS = (0x4, 0x80)
"""Clock-event bits that mean the power limit holds the clocks down: SW power cap, HW power brake."""
HEAT_REASONS = (0x8, 0x20, 0x40)
"""Clock-event bits that mean heat (or a slowdown the hardware asserts) holds them down: HW
slowdown, SW thermal, HW thermal."""
HELD_DOWN_REASONS = POWER_CAP_REASONS + HEAT_REASONS
"""Either: what the descheduler's throttling window counts."""


def has_reason(reasons: int, bits: tuple[int, ...]) -> bool:
    return any(reasons & bit for bit in bits)


def reason_bits_set(expression: str, bits: tuple[int, ...]) -> str:
    """PromQL keeping the series of `expression` (a reasons bitmask) with any of `bits` set.
    PromQL has no bitwise AND: bit b is set where floor(x / b) is odd."""
    return " or ".join(f"floor({expression} / {bit}) % 2 == 1" for bit in bits)


GPU_METRICS = (GPU_UTIL, GR_ENGINE_ACTIVE, FB_USED, FB_FREE, GPU_TEMP, POWER_USAGE, XID_ERRORS, CLOCK_THROTTLE_REASONS,
               SM_CLOCK, SM_ACTIVE, SM_OCCUPANCY, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE, PCIE_TX_BYTES, PCIE_RX_BYTES)
"""Every per-GPU gauge a snapshot may be built from (the profiling ratios as `BusyMeasure` picks)."""

BUSY_GAUGES = (GR_ENGINE_ACTIVE, SM_ACTIVE, SM_OCCUPANCY, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE)
"""The profiling ratios (0–1) a policy may read as a GPU's busy share (`telemetry.busyGauge`)."""


@dataclass(frozen=True, slots=True)
class BusyMeasure:
    """Which gauge a unit's busy share (0–100) is read from: `gauge` (a profiling ratio; None for
    GPU_UTIL) scaled so that `full_scale` reads as 100 %, and where a unit lacks it the next of
    `readings` that it reports. Every unit reports GPU_UTIL or GR_ENGINE_ACTIVE (H100 MIG instances
    only the latter), so both stay as fallbacks and no unit goes unmeasured."""

    gauge: str | None = GR_ENGINE_ACTIVE
    full_scale: float = 1.0

    @property
    def readings(self) -> tuple[tuple[str, str, float], ...]:
        """(row set, metric, factor to 0–100), the preferred first; each later one only where a
        unit lacks the earlier ones."""
        util, engine = ("gpu_util", GPU_UTIL, 1.0), ("gpu_engine_active", GR_ENGINE_ACTIVE, 100.0)
        if self.gauge is None:
            return util, engine
        if self.gauge == GR_ENGINE_ACTIVE:
            return ("gpu_engine_active", GR_ENGINE_ACTIVE, 100.0 / self.full_scale), util
        return ("gpu_busy", self.gauge, 100.0 / self.full_scale), util, engine

    def describe(self) -> str:
        if self.gauge is None:
            return GPU_UTIL
        return self.gauge + ("" if self.full_scale == 1 else f" (full at {self.full_scale:g})")


UTILISATION_METRICS = (GPU_UTIL, GR_ENGINE_ACTIVE)
"""A unit (GPU or MIG instance) is counted when it reports one of these: every exporter
configuration and every MIG instance reports at least one, while the framebuffer gauges are
missing on H100 MIG instances and in trimmed counter sets."""

HELP = {
    GPU_UTIL: ("gauge", "GPU utilization (in %)."),
    FB_USED: ("gauge", "Framebuffer memory used (in MiB)."),
    FB_FREE: ("gauge", "Framebuffer memory free (in MiB)."),
    GPU_TEMP: ("gauge", "GPU temperature (in C)."),
    POWER_USAGE: ("gauge", "Power draw (in W)."),
    XID_ERRORS: ("gauge", "Value of the last XID error encountered."),
    GR_ENGINE_ACTIVE: ("gauge", "Ratio of time the graphics engine is active."),
    DRAM_ACTIVE: ("gauge", "Ratio of cycles the device memory interface is active sending or receiving data."),
    SM_ACTIVE: ("gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    SM_OCCUPANCY: ("gauge", "The ratio of number of warps resident on an SM."),
    PIPE_TENSOR_ACTIVE: ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    SM_CLOCK: ("gauge", "SM clock frequency (in MHz)."),
    CLOCK_THROTTLE_REASONS: ("gauge", "Current clock throttle reasons (bitmask)."),
    PCIE_TX_BYTES: ("gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers "
                             "and data payloads - in bytes per second."),
    PCIE_RX_BYTES: ("gauge", "The rate of data received over the PCIe bus - including both protocol headers "
                             "and data payloads - in bytes per second."),
    POWER_MGMT_LIMIT: ("gauge", "Power management limit (in W)."),
}
"""`# TYPE` and `# HELP` as dcgm-exporter prints them, for the exporters we ship."""

NODE_LABEL_CANDIDATES = ("node", "kubernetes_node", "nodename", "Hostname", "hostname")
"""Where the node name may be, most specific first: relabelled names beat the exporter's own
`Hostname`, which older installs set to the exporter pod's name."""

DRA_CLAIM_LABEL = "dra_claim_name"
"""Set (with `dra_claim_namespace`, `dra_device_name`, `dra_driver_name`, `dra_pool_name`) beside
`pod`/`namespace`/`container` on a GPU the pod got through a DRA claim (kubelet's
KubeletPodResourcesDynamicResources)."""

HOSTNAME_LABELS = ("Hostname", "hostname")
"""Released dcgm-exporter versions write `Hostname`; the newer main branch writes `hostname`."""
