"""What the serving world keeps beside the cluster, and what it reports per GPU and per replica.
Pure (NumPy), no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sim.llm.failures import FailurePlan
from sim.llm.gpus import GpuConditions
from sim.llm.host import NO_NEIGHBOURS, HostLayout
from sim.llm.pcie import Traffic
from sim.llm.startup import CacheLayout

EDGES_MS = np.geomspace(0.1, 1e7, 14001)
"""Histogram bins from 0.1 ms to 10⁴ s, 0.13 % wide: ten times finer than a difference worth
reporting between policies, so no verdict turns on one bin."""


class GpuReport(NamedTuple):
    """One GPU as dcgm-exporter reports it at a tick, derived from what runs on it."""

    fb_used_mib: float
    power_w: float
    sm_clock_mhz: float
    temperature_c: float
    clock_reasons: int
    """NVML clock-event reasons bitmask: `GPU_IDLE`, `SW_POWER_CAP`, `HW_SLOWDOWN`."""
    sm_active: float
    """The kernel share, 0–1 (GR_ENGINE_ACTIVE and SM_ACTIVE; GPU_UTIL × 100 before noise)."""
    sm_occupancy: float
    pipe_tensor_active: float
    dram_active: float
    xid: int = 0
    """The last XID error dcgm-exporter shows for the GPU (`conditions.failures`); 0: none."""
    pcie_rx_bytes: float | None = None
    pcie_tx_bytes: float | None = None
    """Host↔device bytes a second (`conditions.pcieNeighbours`); None: not exported."""


class HostReading(NamedTuple):
    """A node's CPU as its exporters show it over a tick (`sim.llm.host`)."""

    waiting_share: float
    """PSI "some": the share of time a runnable task waited for a CPU."""
    throttled_share: float
    """The worst share of CFS periods throttled among its GPU pods' containers."""


class ServingState(NamedTuple):
    """What a replica's server exports at a tick (vLLM's gauges)."""

    node: str
    waiting: float
    ttft_p95_s: float
    kv_usage: float | None = None
    running: float | None = None
    tpot_mean_s: float | None = None
    ttft_mean_s: float | None = None
    """The tick's means, as rate(_sum) / rate(_count) of vLLM's histograms reads them."""


@dataclass
class Histogram:
    weights: np.ndarray = field(default_factory=lambda: np.zeros(len(EDGES_MS) + 1))

    def add(self, values_ms: np.ndarray, weights: np.ndarray) -> None:
        """Rows of quantiles, each row's requests spread evenly over its quantiles."""
        if values_ms.size == 0:
            return
        bins = np.searchsorted(EDGES_MS, values_ms.ravel())
        self.weights += np.bincount(bins, np.repeat(weights / values_ms.shape[1], values_ms.shape[1]),
                                    minlength=len(self.weights))

    def quantile(self, q: float) -> float:
        total = self.weights.sum()
        if total <= 0:
            return 0.0
        index = int(np.searchsorted(np.cumsum(self.weights), q * total))
        return float(EDGES_MS[min(index, len(EDGES_MS) - 1)])

    def samples(self) -> list[tuple[float, float]]:
        """(bin's upper edge ms, requests) for every non-empty bin."""
        return [(float(EDGES_MS[min(i, len(EDGES_MS) - 1)]), float(w)) for i, w in enumerate(self.weights) if w > 0]


@dataclass
class RequestTally:
    """Every request of the run, as histograms, and how many met both targets."""

    ttft: Histogram = field(default_factory=Histogram)
    tpot: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    ttft_even: Histogram = field(default_factory=Histogram)
    ttft_sensitive: Histogram = field(default_factory=Histogram)
    """TTFT of the latency-sensitive services' requests only."""
    ttft_unlimited: Histogram = field(default_factory=Histogram)
    """TTFT of the requests of services that set no CPU limit, where CPU neighbours are a condition."""
    requests: float = 0.0
    within_slo: float = 0.0
    retried: float = 0.0
    across_domains: float = 0.0
    """Requests served by a multi-pod replica whose pods sit in different NVLink domains."""
    on_degraded_gpu: float = 0.0
    """Requests served by a replica whose GPU ran `DEGRADED_STRETCH` or more slower than its model's fastest."""


@dataclass
class ServingWorld:
    """The serving world's state beside `World`: the image cache, the queues, the last activity
    and the tally."""

    tally: RequestTally = field(default_factory=RequestTally)
    backlog: dict[str, float] = field(default_factory=dict)
    """Pod key → requests queued past the profile's top."""
    activity: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Pod key → (DRAM, tensor activity) at the last tick, for the power channel."""
    replica_units: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    """Leader pod key → (GPU_UTIL, SM occupancy, tensor, DRAM activity) its GPUs showed when last
    measured, which its replica's other pods' GPUs show too (every rank runs the same kernels)."""
    lost: list[tuple[str, float, float]] = field(default_factory=list)
    """(service, requests in flight, ms they had been in) of replicas evicted or lost this tick."""
    units_of: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Pod key → the units of its node it holds, from its binding until it goes (`sim.llm.gpus`)."""
    conditions: GpuConditions = field(default_factory=GpuConditions)
    """Each GPU's speed and slowdown episodes (`conditions.degradedGpus`)."""
    host: HostLayout = NO_NEIGHBOURS
    """Where batch pods run and which Deployments set CPU limits (`conditions.cpuNeighbours`)."""
    failures: FailurePlan = field(default_factory=FailurePlan)
    """GPU failures and node losses, those under way included (`conditions.failures`)."""
    cache: CacheLayout = field(default_factory=CacheLayout)
    """The model cache's nodes, each service's image tag, the images' last use (`conditions.coldStart`)."""
    ready_waits: list[float] = field(default_factory=list)
    """Seconds from each new replica's creation to its serving: its wait for a node, then its start."""
    host_readings: list[dict[str, "HostReading"]] = field(default_factory=list)
    """Per tick where `host` is on: node → what node_exporter and cAdvisor show of its CPU."""
    training_steps: list[float] = field(default_factory=list)
    """Per tick and running training job: its step time over its ideal (`sim.llm.training`)."""
    pcie_traffic: dict[str, dict[int, Traffic]] = field(default_factory=dict)
    """This tick, where PCIe neighbours are a condition: node → GPU → its host↔device traffic."""
