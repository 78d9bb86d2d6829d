"""The host CPU under a replica (`CpuNeighbours`): CPU-bound batch pods beside it and the CFS quota
of its own container, what each does to its engine's steps, and what node_exporter and cAdvisor
show of them. Pure (NumPy).

- **Neighbours.** Batch pods without CPU limits take every idle core (CFS is work-conserving), so
  their node's cores are all busy and its runnable threads outnumber them. A replica there keeps
  its requested share of CPU time (CFS weights follow requests), but its steps lose time to the
  cache, memory-bandwidth and wake-up delays the neighbours cause: `interferenceAtFullHost` times
  the host's busy share.
- **CFS quota.** A container limited to L cores whose threads want W at once runs W / L slower:
  it spends its quota early in each 100 ms period and waits out the rest (kubernetes #67577).
  W is the engine's own cores plus threads sized to the cores the node shows, not to the quota.
- **What exporters show.** PSI "some" waiting (`node_pressure_cpu_waiting_seconds_total`) as the
  share of runnable demand the cores cannot serve, and a throttled container's share of periods
  throttled (`container_cpu_cfs_throttled_periods_total` over `..._periods_total`) as the share
  of its wanted time its quota denies: both assumptions, chosen so that vLLM #49460's replica
  (slowed ×10) reads throttled 90 % of periods, "nearly all the time" as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.scenario import CpuNeighbours


@dataclass(frozen=True)
class HostLayout:
    """Which nodes run batch pods and which services' Deployments set CPU limits."""

    shape: CpuNeighbours = CpuNeighbours()
    batch_nodes: frozenset[str] = frozenset()
    limited_services: frozenset[str] = frozenset()

    @property
    def enabled(self) -> bool:
        return self.shape.enabled


NO_NEIGHBOURS = HostLayout()


def draw_layout(shape: CpuNeighbours, nodes: list[str], services: list[str], seed: int) -> HostLayout:
    """The layout from a generator of its own, so the condition leaves every other draw as it was."""
    if not shape.enabled:
        return NO_NEIGHBOURS
    rng = np.random.default_rng([seed, 4601])
    batch = frozenset(n for n in sorted(nodes) if rng.random() < shape.node_share)
    limited = frozenset(s for s in sorted(services) if rng.random() < shape.limited_service_share)
    return HostLayout(shape, batch, limited)


def wanted_cores(shape: CpuNeighbours, gpus: int, visible_cores: float) -> float:
    """Cores a replica's threads want at once: 2 + N for the engine on N GPUs, and the pools sized
    to the node's cores."""
    return shape.engine_cores + (gpus - 1) + shape.spin_share_of_visible_cores * visible_cores


def quota_stretch(shape: CpuNeighbours, limit_cores: float, gpus: int, visible_cores: float) -> float:
    """How much longer each step takes under a CFS quota of `limit_cores` (1: it never binds)."""
    return max(1.0, wanted_cores(shape, gpus, visible_cores) / max(limit_cores, 1e-9))


def throttled_share(stretch: float) -> float:
    """Share of CFS periods throttled for a container slowed `stretch` by its quota."""
    return 1 - 1 / stretch


def host_busy(shape: CpuNeighbours, cores: float, batch: bool, gpu_pod_cores: float) -> tuple[float, float]:
    """(busy share of the node's cores, PSI waiting share): the batch pods' runnable threads and the
    GPU pods' busy cores against the node's cores."""
    demand = (shape.batch_demand_share * cores if batch else 0.0) + gpu_pod_cores
    busy = min(1.0, demand / cores)
    waiting = max(0.0, 1 - cores / demand) if demand > cores else 0.0
    return busy, waiting


def interference(shape: CpuNeighbours, busy: float) -> float:
    """Share of step time a replica loses on a host this busy."""
    return shape.interference_at_full_host * busy
