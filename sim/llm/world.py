"""One tick of the honest serving world: every inference replica a continuous-batching LLM server
(`sim.llm.profile`), slowed by its node through named contention channels, measured per request,
and seen by policies only through what exporters report. Pure (NumPy).

Per tick and replica: the service's traffic splits evenly over its *ready* replicas (a new pod
serves only after its image pull, weight load and start-up, `ready_seconds`). A replica at
offered utilisation u (its share of the service's rate over its saturation rate) on a node
slowing its steps by s behaves as the profile at u·s with latencies × s. Past the profile's top
a fluid queue builds and drains; its wait adds to TTFT.

The node's slowdown, s = 1 + contention.scale × (host CPU + power + PCIe), channel by channel
(`ContentionShape` names each constant's source or says "assumption"):
- host CPU: cores kept busy (each replica's engine loop and API server, each training worker's
  loaders) over the node's cores, past 1, stretches every step alike (assumption);
- power: each GPU draws idle + (TDP − idle) × (0.3 × DRAM activity + 0.7 × tensor activity)
  (assumption, which puts decode at 250–300 W on a 700 W GPU, as Ma et al., arXiv 2605.11999,
  measured 137–300 W on an H200); a training GPU draws 95 % of TDP (assumption); past the node's
  budget the share over it times `powerSensitivity`;
- PCIe: `pciePenalty` for a replica whose switch carries a training worker's GPU or a replica
  still loading its weights.

Request-level percentiles: each replica's requests this tick carry its TTFT, TPOT and E2E
quantiles, weighted by its request count, into log-binned histograms over the run.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.llm.engine import GPU_MEMORY_UTILIZATION
from sim.llm.hardware import Gpu, Model, gpu_of_product, model_named
from sim.llm.profile import QUANTILES, ReplicaProfile, RequestMix, profile
from sim.llm.telemetry import MIB
from sim.scheduler import pod_key

if TYPE_CHECKING:
    from sim.engine import SimPod, World

EDGES_MS = np.geomspace(0.1, 1e7, 1401)
"""Histogram bins from 0.1 ms to 10⁴ s, 1.3 % wide."""
TDP_W = {"A100-40GB": 400, "A100-80GB": 400, "H100-80GB": 700, "H200": 700, "L4": 72, "L40S": 350, "RTX-4090": 450}
"""The vendors' board power limits."""
IDLE_SHARE = 0.1
"""Idle power over TDP: assumption."""
TRAINING_POWER_SHARE = 0.95
"""Training GPUs run near their power limit: assumption."""
TRAINING_UTIL = 98.0
IDLE_FB_MIB = 500.0


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
    requests: float = 0.0
    within_slo: float = 0.0
    retried: float = 0.0


@dataclass
class ServingWorld:
    """The serving world's state beside `World`: the image cache, the queues, the last activity
    and the tally."""

    tally: RequestTally = field(default_factory=RequestTally)
    images: set[tuple[str, str]] = field(default_factory=set)
    """(node, image) pairs pulled: a second pod of the image on the node starts without a pull."""
    backlog: dict[str, float] = field(default_factory=dict)
    """Pod key → requests queued past the profile's top."""
    activity: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Pod key → (DRAM, tensor activity) at the last tick, for the power channel."""
    lost: list[tuple[str, float, float]] = field(default_factory=list)
    """(service, requests in flight, ms they had been in) of replicas evicted or lost this tick."""


def model_of(world: World) -> Model:
    return model_named(world.scenario.serving.model)


def mix_of(world: World) -> RequestMix:
    sv = world.scenario.serving
    return RequestMix(sv.prompt_tokens, sv.output_tokens, sv.length_sigma)


def gpu_of_node(world: World, node: str) -> Gpu:
    return gpu_of_product(world.nodes[node].labels.get("nvidia.com/gpu.product", ""))


def profile_of(world: World, node: str) -> ReplicaProfile:
    return profile(gpu_of_node(world, node), model_of(world), mix_of(world))


def ready_seconds(world: World, pod: SimPod, node: str) -> float:
    """Seconds from binding to serving: the image pull (once per node: the image is recorded as
    pulled there), the weights, the start."""
    sv = world.scenario.serving
    image = pod.obj["spec"]["containers"][0]["image"]
    image_bytes = world.services[pod.service].image_bytes
    pull = 0.0 if (node, image) in world.llm.images else image_bytes / sv.image_pull_bytes_per_second
    world.llm.images.add((node, image))
    return pull + model_of(world).weight_bytes / sv.weight_load_bytes_per_second + sv.startup_seconds


def is_ready(world: World, pod: SimPod) -> bool:
    return pod.node is not None and pod.ready_at <= world.now_seconds


def on_lost(world: World, pod: SimPod) -> None:
    """An evicted or lost replica: its requests in flight are retried elsewhere (`measure`)."""
    state = world.serving[-1].get(pod_key(pod.obj)) if world.serving else None
    if pod.service is None or state is None:
        return
    in_flight = state.waiting + (state.running or 0.0)
    if in_flight > 0:
        prof = profile_of(world, pod.node)
        lower, share = prof.weights(np.asarray([pod.load]))
        half_e2e = float(np.median(prof.mix_of(prof.e2e_ms, lower, share))) / 2
        world.llm.lost.append((pod.service, in_flight, half_e2e))


def _node_slowdowns(world: World, by_node: dict[str, list[SimPod]]
                    ) -> tuple[dict[str, float], dict[tuple[str, int], float]]:
    """Each node's step slowdown (CPU and power), and the PCIe penalty per (node, first GPU index)."""
    from sim.engine import gpu_count

    co = world.scenario.contention
    slowdown, pcie = {}, {}
    for name, pods in by_node.items():
        tdp = TDP_W.get(gpu_of_node(world, name).name, 700)
        cores = host_power = 0.0
        index, noisy_switches, placed = 0, set(), []
        for pod in pods:
            count = gpu_count(pod)
            switches = {(index + i) // co.gpus_per_pcie_switch for i in range(count)}
            placed.append((pod, index, switches))
            if pod.training_job is not None:
                cores += co.training_cores_per_worker
                host_power += count * tdp * TRAINING_POWER_SHARE
                noisy_switches |= switches
            else:
                cores += co.host_cores_per_replica
                dram, tensor = world.llm.activity.get(pod_key(pod.obj), (0.0, 0.0))
                host_power += count * power_w(tdp, dram, tensor)
                if not is_ready(world, pod):
                    noisy_switches |= switches
            index += count
        host_power += (world.units[name] - index) * tdp * IDLE_SHARE
        cpu = max(0.0, cores / world.nodes[name].allocatable.get("cpu", 1) - 1)
        budget = co.gpu_power_budget_share * tdp * world.units[name]
        power = max(0.0, host_power / budget - 1) * co.power_sensitivity
        slowdown[name] = 1 + co.scale * (cpu + power)
        for pod, first, switches in placed:
            # A replica's own loading does not slow it (it does not serve yet); a neighbour's does.
            shared = pod.training_job is None and is_ready(world, pod) and switches & noisy_switches
            pcie[name, first] = co.scale * co.pcie_penalty if shared else 0.0
    return slowdown, pcie


def power_w(tdp: float, dram: float, tensor: float) -> float:
    return min(tdp, tdp * IDLE_SHARE + tdp * (1 - IDLE_SHARE) * (0.3 * dram + 0.7 * tensor))


@dataclass
class _Rows:
    """The tick's ready replicas, as arrays."""

    pods: list[SimPod] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    slowdown: list[float] = field(default_factory=list)
    even: list[float] = field(default_factory=list)


def measure(world: World):
    """Traffic to ready replicas, their requests' latency into the tally, the exporters' readings
    into `world.gpu_util` / `gpu_readings` / `serving` / `history`; the tick's true work per node."""
    from sim.engine import TickSample, demand_now, gpu_count

    sv, dt = world.scenario.serving, world.scenario.tick_seconds
    up = [name for name in world.nodes if name not in world.down]
    by_node: dict[str, list[SimPod]] = defaultdict(list)
    for pod in world.pods.values():
        if pod.node is not None:
            by_node[pod.node].append(pod)
    profiles = {name: profile_of(world, name) for name in up}
    by_service: dict[str, list[SimPod]] = defaultdict(list)
    for pod in world.pods.values():
        if pod.service is not None:
            by_service[pod.service].append(pod)
    for service in world.services.values():
        demand = demand_now(world, service)
        ready = [p for p in by_service[service.name] if is_ready(world, p)]
        for pod in by_service[service.name]:
            pod.load = 0.0
        for pod in ready:
            pod.load = demand / len(ready)
        if not ready and demand > 0:
            # No replica serves: the service's requests wait a tick at least (a lower bound).
            rate = demand * _any_profile(world, service, profiles).saturation_rps
            _tally_flat(world, rate * dt, dt * 1000)
    slowdown, pcie = _node_slowdowns(world, {n: by_node.get(n, []) for n in up})
    even = _even_slowdowns(world, slowdown, up)
    rows = _Rows()
    per_gpu: dict[str, dict[int, tuple[float, str | None] | None]] = defaultdict(dict)
    readings: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    serving: dict[str, ServingState] = {}
    work: dict[str, float] = {}
    noise = np.random.default_rng([world.seed, world.tick])
    for name in up:
        prof, gpu = profiles[name], gpu_of_node(world, name)
        tdp = TDP_W.get(gpu.name, 700)
        busy_units, index = 0.0, 0
        for pod in by_node.get(name, ()):
            count = gpu_count(pod)
            key = pod_key(pod.obj)
            if pod.training_job is not None:
                util, fb, watts = TRAINING_UTIL, 0.8 * gpu.memory_bytes / MIB, tdp * TRAINING_POWER_SHARE
                busy_units += count
            elif not is_ready(world, pod):
                util, fb, watts = 0.0, GPU_MEMORY_UTILIZATION * gpu.memory_bytes / MIB, tdp * IDLE_SHARE
            else:
                s = slowdown[name] + pcie.get((name, index), 0.0)
                rows.pods.append(pod)
                rows.nodes.append(name)
                rows.load.append(pod.load)
                rows.slowdown.append(s)
                rows.even.append(even[name])
                lower, share = prof.weights(np.asarray([pod.load * s]))
                util = 100 * float(prof.mix_of(prof.busy, lower, share)[0])
                dram = float(prof.mix_of(prof.dram_active, lower, share)[0])
                tensor = float(prof.mix_of(prof.tensor_active, lower, share)[0])
                world.llm.activity[key] = (dram, tensor)
                fb, watts = GPU_MEMORY_UTILIZATION * gpu.memory_bytes / MIB, power_w(tdp, dram, tensor)
                busy_units += min(1.0, pod.load * s) * count
            for _ in range(count):
                reported = None if noise.random() < sv.missing_scrape_share else (
                    float(np.clip(util + noise.normal(0, sv.util_noise_percent) if util else 0.0, 0, 100)), key)
                per_gpu[name][index] = reported
                readings[name][index] = (fb, watts)
                index += 1
        for spare in range(index, world.units[name]):
            per_gpu[name][spare] = None if noise.random() < sv.missing_scrape_share else (0.0, None)
            readings[name][spare] = (IDLE_FB_MIB, tdp * IDLE_SHARE)
        work[name] = 100 * busy_units / world.units[name]
    _serve(world, rows, profiles, serving, dt)
    _serve_lost(world, profiles)
    world.history.append({n: _mean_reported(per_gpu[n]) for n in up})
    world.gpu_util.append(dict(per_gpu))
    world.gpu_readings.append(dict(readings))
    world.serving.append(serving)
    return TickSample(work, len(world.pending()), [], [])


def _mean_reported(gpus: dict[int, tuple[float, str | None] | None]) -> float:
    seen = [g[0] for g in gpus.values() if g is not None]
    return sum(seen) / len(seen) if seen else 0.0


def _even_slowdowns(world: World, slowdown: dict[str, float], up: list[str]) -> dict[str, float]:
    """Each node's slowdown had its pool's load been spread evenly: the pool's mean (a node's
    excess grows with its load, so the even spread's is near the mean's)."""
    pool_of = {n: world.nodes[n].labels.get("pool", "") for n in up}
    means: dict[str, list[float]] = defaultdict(list)
    for n in up:
        means[pool_of[n]].append(slowdown[n])
    return {n: sum(means[pool_of[n]]) / len(means[pool_of[n]]) for n in up}


def _any_profile(world: World, service, profiles: dict[str, ReplicaProfile]) -> ReplicaProfile:
    pool = service.pool
    for name, prof in profiles.items():
        if pool is None or world.nodes[name].labels.get("pool") == pool.name:
            return prof
    return next(iter(profiles.values()))


def _tally_flat(world: World, requests: float, ttft_ms: float) -> None:
    tally = world.llm.tally
    tally.requests += requests
    row = np.full((1, 1), ttft_ms)
    tally.ttft.add(row, np.asarray([requests]))
    tally.ttft_even.add(row, np.asarray([requests]))
    tally.e2e.add(row, np.asarray([requests]))


def _serve(world: World, rows: _Rows, profiles: dict[str, ReplicaProfile], serving: dict[str, ServingState],
           dt: float) -> None:
    """The ready replicas' requests this tick, by profile (one per GPU kind), into the tally."""
    sv, tally = world.scenario.serving, world.llm.tally
    groups: dict[int, list[int]] = defaultdict(list)
    for i, node in enumerate(rows.nodes):
        groups[id(profiles[node])].append(i)
    for members in groups.values():
        prof = profiles[rows.nodes[members[0]]]
        pods = [rows.pods[i] for i in members]
        load = np.asarray([rows.load[i] for i in members])
        s = np.asarray([rows.slowdown[i] for i in members])
        s_even = np.asarray([rows.even[i] for i in members])
        rate = load * prof.saturation_rps
        capacity = prof.top * prof.saturation_rps / s
        backlog = np.asarray([world.llm.backlog.get(pod_key(p.obj), 0.0) for p in pods])
        backlog = np.maximum(0.0, backlog + (rate - capacity) * dt)
        wait_ms = 1000 * backlog / capacity
        lower, share = prof.weights(load * s)
        ttft = prof.mix_of(prof.ttft_ms, lower, share) * s[:, None] + wait_ms[:, None]
        tpot = prof.mix_of(prof.tpot_ms, lower, share) * s[:, None]
        e2e = prof.mix_of(prof.e2e_ms, lower, share) * s[:, None] + wait_ms[:, None]
        # Even load changes the contention only: the same traffic, the same queue, drained at
        # the capacity the pool's mean slowdown leaves.
        even_lower, even_share = prof.weights(load * s_even)
        even_wait_ms = 1000 * backlog * s_even / (prof.top * prof.saturation_rps)
        ttft_even = prof.mix_of(prof.ttft_ms, even_lower, even_share) * s_even[:, None] + even_wait_ms[:, None]
        requests = rate * dt
        tally.ttft.add(ttft, requests)
        tally.tpot.add(tpot, requests)
        tally.e2e.add(e2e, requests)
        tally.ttft_even.add(ttft_even, requests)
        tally.requests += float(requests.sum())
        met = (ttft <= sv.ttft_slo_ms) & (tpot <= sv.tpot_slo_ms)  # each quantile pair as a request: assumption
        tally.within_slo += float((met.mean(axis=1) * requests).sum())
        running = prof.mix_of(prof.running, lower, share)
        waiting = prof.mix_of(prof.waiting, lower, share) + backlog
        kv = prof.mix_of(prof.kv_usage, lower, share)
        p95 = ttft[:, int(0.95 * QUANTILES)] / 1000
        tpot_mean, ttft_mean = tpot.mean(axis=1) / 1000, ttft.mean(axis=1) / 1000
        for i, pod in enumerate(pods):
            key = pod_key(pod.obj)
            world.llm.backlog[key] = float(backlog[i])
            serving[key] = ServingState(pod.node, float(waiting[i]), float(p95[i]), float(kv[i]), float(running[i]),
                                        float(tpot_mean[i]), float(ttft_mean[i]))


def _serve_lost(world: World, profiles: dict[str, ReplicaProfile]) -> None:
    """Requests in flight on replicas evicted or lost: each starts again, its first token as late
    as the time it had spent plus a fresh TTFT on a replica of its service, and misses its target
    when that passes it."""
    sv, tally = world.scenario.serving, world.llm.tally
    for service_name, count, elapsed_ms in world.llm.lost:
        service = world.services[service_name]
        prof = _any_profile(world, service, profiles)
        ready = [p.load for p in world.pods.values() if p.service == service_name and is_ready(world, p)]
        lower, share = prof.weights(np.asarray([sum(ready) / len(ready) if ready else prof.top]))
        ttft = prof.mix_of(prof.ttft_ms, lower, share) + elapsed_ms
        tally.ttft.add(ttft, np.asarray([count]))
        tally.ttft_even.add(ttft, np.asarray([count]))
        tally.e2e.add(prof.mix_of(prof.e2e_ms, lower, share) + elapsed_ms, np.asarray([count]))
        tally.requests += count
        tally.retried += count
        tally.within_slo += count * float((ttft <= sv.ttft_slo_ms).mean())
    world.llm.lost.clear()
