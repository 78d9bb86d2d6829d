"""A replica's behaviour against its offered load, tabulated from the step model under open-loop
Poisson traffic, so that a fleet of hundreds of replicas can be simulated for hours. Pure.

The fleet cannot step every replica's engine (a 96-node × 8-GPU fleet over two hours is ~10⁸
steps), so for one GPU, model and request mix the step model of `sim.llm.engine` is run at a
grid of utilisations (offered request rate over the replica's saturation rate) and what it did
is kept: the request-level TTFT and TPOT distributions (as quantiles), the batch, the queue, the
KV cache and the exporter counters (`sim.llm.telemetry`). A fleet replica at utilisation u
between grid points is the linear mix of its neighbours.

Slowdown from outside the GPU stretches every step by a factor s (`Knobs.slowdown`). That is the
same replica on a clock running s times slower: at offered rate λ it behaves as the unslowed
replica at rate λ·s, its latencies s times longer (`at`). So one table serves every slowdown.
Beyond the top of the grid the fleet keeps a fluid queue (`sim.llm.world`).

Request lengths: log-normal around the medians given, σ the log-spread (`RequestMix`), capped so
one request fits the KV cache. The tabulation's seed is fixed: a profile is a property of the
hardware and the mix, not of a scenario's seed.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim.llm.engine import Counters, Knobs, Replica, Request
from sim.llm.hardware import Gpu, Model
from sim.llm import telemetry

UTILISATION_GRID = (0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85)
"""Up to 0.85: past it (against the flood's saturation rate) Poisson traffic builds a queue that
grows with the run's length, which is no steady state to tabulate; the fleet's fluid queue
takes over there."""
QUANTILES = 100
"""Each latency distribution is kept as its quantiles at (k + ½) / 100."""
REQUESTS_PER_POINT = 4000
WARM_UP_SHARE = 0.1
"""The first tenth of each point's requests arrive to an empty server and are left out."""
SATURATION_REQUESTS = 1500
PROFILE_SEED = 20261203


@dataclass(frozen=True, slots=True)
class RequestMix:
    prompt_median: int
    output_median: int
    sigma: float
    """Log-normal spread of both lengths (0: every request the same)."""

    def draw(self, rng: random.Random, cap_tokens: int) -> tuple[int, int]:
        prompt = max(1, round(self.prompt_median * math.exp(self.sigma * rng.gauss(0, 1))))
        output = max(2, round(self.output_median * math.exp(self.sigma * rng.gauss(0, 1))))
        prompt = min(prompt, max(1, cap_tokens // 2))
        return prompt, min(output, max(2, cap_tokens - prompt))


@dataclass(frozen=True)
class ReplicaProfile:
    gpu: Gpu
    model: Model
    mix: RequestMix
    saturation_rps: float
    """Requests a second the replica completes when it is never short of work."""
    utilisation: np.ndarray
    ttft_ms: np.ndarray
    """(grid points, QUANTILES)."""
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    busy: np.ndarray
    """Share of time with a kernel running (GPU_UTIL / 100), per grid point."""
    dram_active: np.ndarray
    tensor_active: np.ndarray
    sm_occupancy: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    kv_usage: np.ndarray

    @property
    def top(self) -> float:
        return float(self.utilisation[-1])

    def weights(self, utilisation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grid index below each utilisation and the share of the point above (clipped to the grid)."""
        grid = self.utilisation
        u = np.clip(utilisation, grid[0], grid[-1])
        upper = np.clip(np.searchsorted(grid, u, side="right"), 1, len(grid) - 1)
        lower = upper - 1
        return lower, (u - grid[lower]) / (grid[upper] - grid[lower])

    def mix_of(self, table: np.ndarray, lower: np.ndarray, share: np.ndarray) -> np.ndarray:
        if table.ndim == 1:
            return table[lower] * (1 - share) + table[lower + 1] * share
        return table[lower] * (1 - share)[:, None] + table[lower + 1] * share[:, None]


def open_loop(replica: Replica, requests: list[Request]) -> tuple[list[Request], dict[str, float]]:
    """Serve requests arriving at their `arrived_at`; the requests finished and the time-weighted
    means of the batch, queue and KV usage over the run."""
    pending, finished = deque(requests), []
    area = {"running": 0.0, "waiting": 0.0, "kv_usage": 0.0}
    while pending or replica.running or replica.waiting:
        while pending and (pending[0].arrived_at <= replica.now or not (replica.running or replica.waiting)):
            request = pending.popleft()
            replica.now = max(replica.now, request.arrived_at)
            replica.submit(request)
        running, waiting, kv, before = len(replica.running), len(replica.waiting), replica.kv_usage, replica.now
        finished += replica.step()
        dt = replica.now - before
        area["running"] += running * dt
        area["waiting"] += waiting * dt
        area["kv_usage"] += kv * dt
    span = max(_span(requests, finished), 1e-9)
    return finished, {k: v / span for k, v in area.items()}


def _span(requests: list[Request], finished: list[Request]) -> float:
    return max(r.done_at for r in finished) - min(r.arrived_at for r in requests) if finished else 0.0


def _requests(mix: RequestMix, rate: float, count: int, cap: int, rng: random.Random) -> list[Request]:
    now, out = 0.0, []
    for _ in range(count):
        now += rng.expovariate(rate) if rate > 0 else 0.0
        prompt, output = mix.draw(rng, cap)
        out.append(Request(prompt, output, now))
    return out


def _quantiles(values: list[float]) -> np.ndarray:
    return np.quantile(np.asarray(values), (np.arange(QUANTILES) + 0.5) / QUANTILES)


@lru_cache(maxsize=32)
def profile(gpu: Gpu, model: Model, mix: RequestMix, knobs: Knobs = Knobs()) -> ReplicaProfile:
    """The replica's table (a few seconds of stepping; cached per process)."""
    rng = random.Random(PROFILE_SEED)
    cap = Replica(gpu, model, knobs).kv_capacity_tokens
    flood = _requests(mix, 0.0, SATURATION_REQUESTS, cap, rng)
    done, _ = open_loop(Replica(gpu, model, knobs), flood)
    ends = sorted(r.done_at for r in done)
    low, high = int(0.1 * len(ends)), int(0.9 * len(ends))
    saturation = (high - low) / max(ends[high] - ends[low], 1e-9)
    rows: dict[str, list] = {k: [] for k in ("ttft", "tpot", "e2e", "busy", "dram", "tensor", "occupancy",
                                             "running", "waiting", "kv_usage")}
    for u in UTILISATION_GRID:
        replica = Replica(gpu, model, knobs)
        requests = _requests(mix, u * saturation, REQUESTS_PER_POINT, cap, rng)
        done, means = open_loop(replica, requests)
        kept = [r for r in done if r.arrived_at >= requests[int(WARM_UP_SHARE * len(requests))].arrived_at]
        rows["ttft"].append(_quantiles([r.ttft * 1000 for r in kept]))
        rows["tpot"].append(_quantiles([r.tpot * 1000 for r in kept]))
        rows["e2e"].append(_quantiles([r.e2e * 1000 for r in kept]))
        # The exporters' view of the whole run: from the first arrival to the last token.
        reading = telemetry.read(replica, Counters(), since=requests[0].arrived_at)
        rows["busy"].append(reading.gpu_util / 100)
        rows["dram"].append(reading.dram_active)
        rows["tensor"].append(reading.pipe_tensor_active)
        rows["occupancy"].append(reading.sm_occupancy)
        for key in ("running", "waiting", "kv_usage"):
            rows[key].append(means[key])
    table = {k: np.asarray(v, dtype=float) for k, v in rows.items()}
    for key in ("ttft", "tpot", "e2e"):  # more load never helps: keep each quantile monotone in u
        table[key] = np.maximum.accumulate(table[key], axis=0)
    return ReplicaProfile(gpu, model, mix, saturation, np.asarray(UTILISATION_GRID), table["ttft"], table["tpot"],
                          table["e2e"], table["busy"], table["dram"], table["tensor"], table["occupancy"],
                          table["running"], table["waiting"], table["kv_usage"])
