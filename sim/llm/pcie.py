"""The PCIe switch under a replica's GPU (`PcieNeighbours`): what each GPU moves between host and
device, what its switch's uplink carries, what that costs a replica's steps, and what
dcgm-exporter shows of it. Pure.

- **Traffic.** A training GPU takes its data loaders' input batches, and an offloading worker's
  gradients and parameters both ways; a replica loading its weights moves them at the rate they
  load; a serving replica moves little. Every byte between a GPU and the host crosses the uplink
  of the switch the GPU sits behind (GPUDirect traffic between a GPU and a NIC on the same switch
  would not, and is left out).
- **Cost.** A ready replica's steps stretch by `stretchAtFullUplink` times the share of the uplink
  its neighbours on the switch fill (its own traffic excluded), at most all of it.
- **What exporters show.** `DCGM_FI_PROF_PCIE_RX_BYTES` and `_TX_BYTES` per GPU, in bytes a
  second; which GPUs share a switch no exporter says.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from sim.scenario import PcieNeighbours


class Traffic(NamedTuple):
    """A GPU's host↔device bytes a second."""

    rx: float = 0.0
    """Host to device: what dcgm-exporter reports as `DCGM_FI_PROF_PCIE_RX_BYTES`."""
    tx: float = 0.0

    @property
    def total(self) -> float:
        return self.rx + self.tx


QUIET = Traffic()


def offloads(shape: PcieNeighbours, seed: int, job: str) -> bool:
    """Whether a training job's workers offload optimizer state to the host: a draw of its own per
    (seed, job), so it leaves every other draw as it was."""
    return zlib.crc32(f"{seed}/{job}".encode()) / 2**32 < shape.offload_share


def training_traffic(shape: PcieNeighbours, offloading: bool) -> Traffic:
    """A training GPU's: its loaders' batches in, and where it offloads, half the offload each way."""
    half = shape.offload_bytes_per_second / 2 if offloading else 0.0
    return Traffic(shape.loader_bytes_per_second + half, half)


def loading_traffic(weight_bytes_per_second: float) -> Traffic:
    """A replica loading its weights: they come in at the rate they load."""
    return Traffic(weight_bytes_per_second, 0.0)


def serving_traffic(shape: PcieNeighbours) -> Traffic:
    """A ready replica's own: three quarters in, as the real scrape the default quotes shows."""
    return Traffic(0.75 * shape.serving_bytes_per_second, 0.25 * shape.serving_bytes_per_second)


def switch_of(gpu: int, gpus_per_switch: int) -> int:
    return gpu // gpus_per_switch


def switch_loads(traffic: dict[int, Traffic], gpus_per_switch: int) -> dict[int, float]:
    """Switch → bytes a second its uplink carries, both ways together."""
    loads: dict[int, float] = defaultdict(float)
    for gpu, moved in traffic.items():
        loads[switch_of(gpu, gpus_per_switch)] += moved.total
    return dict(loads)


def stretch(shape: PcieNeighbours, traffic: dict[int, Traffic], gpus: Iterable[int], gpus_per_switch: int) -> float:
    """Share of step time a replica on these GPUs loses to its neighbours' traffic: the busiest of
    its switches, less what its own GPUs move there."""
    held = set(gpus)
    loads = switch_loads(traffic, gpus_per_switch)
    worst = 0.0
    for switch in {switch_of(g, gpus_per_switch) for g in held}:
        own = sum(traffic.get(g, QUIET).total for g in held if switch_of(g, gpus_per_switch) == switch)
        worst = max(worst, loads.get(switch, 0.0) - own)
    return shape.stretch_at_full_uplink * min(1.0, worst / shape.uplink_bytes_per_second)
