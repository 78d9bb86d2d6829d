"""A training job's step time against its ideal: what placement does to the training beside the
replicas (issue 46's "for training, job step time"). A figure for the report; it feeds nothing
back into the world. Pure.

- **Stragglers.** A synchronous data-parallel step waits for its slowest worker (FALCON, arXiv
  2410.12588: one fail-slow GPU slows the whole job), and a worker for its slowest GPU.
- **Clocks.** Training is compute-bound, so a worker runs as its GPUs' clocks: a GPU slower than
  its model's fastest by its own speed or a slowdown episode (`sim.llm.gpus`), and a node over its
  power budget, whose clocks fall as 1 / (1 + excess) (`sim.llm.world`), stretch its steps alike.
- **Interconnect.** The gradient all-reduce that backward does not hide (`exposedAllreduceShare`
  of a step inside one NVLink domain) takes `crossCliqueAllreduceStretch` times as long where the
  workers span NVLink domains (`nvidia.com/gpu.clique`) and reduce over the network.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.scenario import TrainingShape


def worker_stretch(gpu_stretch: float, power_excess: float) -> float:
    """A worker's step time over its ideal: its slowest GPU's, on clocks its node's power holds down."""
    return gpu_stretch * (1 + power_excess)


def step_ratio(shape: TrainingShape, workers: Iterable[float], cliques: int) -> float:
    """The job's step time over one on the fastest GPUs, uncapped, inside one NVLink domain."""
    comms = shape.exposed_allreduce_share
    interconnect = 1 - comms + comms * (shape.cross_clique_allreduce_stretch if cliques > 1 else 1.0)
    return max(workers, default=1.0) * interconnect
