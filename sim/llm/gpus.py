"""Which of its node's GPU units each pod holds, and each GPU's own condition: its speed against
the fastest of its model and its hardware-slowdown episodes (`DegradedGpus`). Pure (NumPy).

A pod keeps the units it was given until it goes, as the device plugin's allocation does: a GPU
does not change under a replica when a neighbour leaves, so a slow GPU stays slow for whoever
holds it, and a PCIe switch keeps the GPUs it has.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from sim.scenario import DegradedGpus

DEGRADED_STRETCH = 1.25
"""A GPU this much slower than its model's fastest counts as degraded in the report: the published
outliers (1.5×) and every hardware slowdown (2×) are, a GPU of the ordinary spread almost never
is (1 + |N(0, 0.1)| passes 1.25 for 1.2 % of GPUs)."""

HW_SLOWDOWN = 0x8
"""NVML's clock-event reason the hardware asserts when it holds the clocks down (nvml.h:
`nvmlClocksEventReasonHwSlowdown`)."""


def lowest_free(held: Iterable[tuple[int, ...]], units: int, count: int) -> tuple[int, ...]:
    """The `count` lowest units of a node with `units` that no pod in `held` has: NVIDIA's device
    plugin hands out free devices in index order (assumption: its best-effort policy also weighs
    NVLink links, which a single replica's one GPU does not need)."""
    taken = {u for units_held in held for u in units_held}
    return tuple(u for u in range(units) if u not in taken)[:count]


@dataclass
class GpuConditions:
    """Each GPU's step time over its model's fastest and its slowdown episodes, by (node, GPU)."""

    stretch: dict[tuple[str, int], float] = field(default_factory=dict)
    episodes: dict[tuple[str, int], tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """(start, end) seconds of simulated time of each hardware-slowdown episode."""
    clock_share: float = 1.0

    def slowed(self, node: str, gpu: int, now: float) -> bool:
        return any(start <= now < end for start, end in self.episodes.get((node, gpu), ()))

    def episode_left(self, node: str, gpu: int, now: float) -> float:
        """Seconds left of the slowdown episode the GPU is in (0 where it is in none)."""
        return next((end - now for start, end in self.episodes.get((node, gpu), ()) if start <= now < end), 0.0)

    def step_stretch(self, node: str, gpu: int, now: float) -> float:
        """How much longer this GPU takes for a step than its model's fastest, now."""
        slow = 1 / self.clock_share if self.slowed(node, gpu, now) else 1.0
        return self.stretch.get((node, gpu), 1.0) * slow


NO_CONDITIONS = GpuConditions()


def draw_conditions(shape: DegradedGpus, gpus: dict[str, int], hours: float, seed: int) -> GpuConditions:
    """Every GPU's speed and its episodes over the run, from a generator of their own (so the
    condition leaves every other draw of the run as it was)."""
    if not shape.enabled:
        return NO_CONDITIONS
    rng = np.random.default_rng([seed, 46])
    shortest, longest = shape.slowdown_seconds
    mean_seconds = (longest - shortest) / math.log(longest / shortest) if longest > shortest else shortest
    # Episodes arrive at the rate that keeps `slowdownShare` of GPUs in one: share / mean length.
    rate = shape.slowdown_share / mean_seconds
    horizon = hours * 3600
    found = GpuConditions(clock_share=shape.slowdown_clock_share)
    for node in sorted(gpus):
        for gpu in range(gpus[node]):
            outlier = rng.random() < shape.outlier_share
            found.stretch[node, gpu] = shape.outlier_stretch if outlier else 1 + abs(rng.normal(0, shape.speed_sigma))
            episodes = []
            if rng.random() < shape.slowdown_share:
                # Under way at the start, as a fleet in its steady state has: an episode met in progress is
                # picked in proportion to its length (uniform over the range, for log-uniform lengths),
                # and is met at a uniform point of it.
                length = rng.uniform(shortest, longest)
                episodes.append((0.0, length * rng.random()))
                t = episodes[-1][1] + _gap(rng, rate, horizon)
            else:
                t = _gap(rng, rate, horizon)
            while t < horizon:
                length = math.exp(rng.uniform(math.log(shortest), math.log(longest)))
                episodes.append((t, t + length))
                t += length + _gap(rng, rate, horizon)
            if episodes:
                found.episodes[node, gpu] = tuple(episodes)
    return found


def _gap(rng: np.random.Generator, rate: float, horizon: float) -> float:
    """Seconds to a GPU's next episode: Poisson arrivals at `rate` (past the horizon at 0)."""
    return rng.exponential(1 / rate) if rate > 0 else horizon
