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
  still loading its weights (where PCIe neighbours are a condition, their traffic instead);
- a shared GPU (a pool with `sharing: time-slicing` or `mps`, `replicasPerGpu` pods a GPU): each
  replica's steps stretch by what its neighbours on the GPU took the tick before — their kernel
  share under time-slicing (contexts take turns), the busier of their DRAM and tensor activity
  under MPS (kernels run together); each replica gets 1 / `replicasPerGpu` of vLLM's 90 % of the
  memory, so a smaller KV cache (both laws: assumption).

Fleet conditions a scenario switches on (`conditions:`, issue 46), each its own module:
- degraded GPUs (`sim.llm.gpus`): each GPU's own speed from the published spread and its
  hardware-slowdown episodes stretch the steps of the replica holding it (the slowest of a
  tensor-parallel replica's GPUs sets the pace); a pod keeps the GPUs it was given;
- CPU neighbours (`sim.llm.host`): batch pods busy a node's cores, which costs its replicas
  `interferenceAtFullHost` of step time times the host's busy share (in place of the host-CPU
  channel above), and a Deployment's CFS quota stretches its replicas' steps by the cores their
  threads want over the limit, the GPU waiting meanwhile (its busy share falls by as much);
- PCIe neighbours (`sim.llm.pcie`): training GPUs' loaders and offload, and replicas loading
  weights, fill the uplink of the switch they share with a replica, which loses
  `stretchAtFullUplink` of step time times their share of it (in place of `pciePenalty`).

The exporters see each GPU from what runs on it (`GpuReport`): the kernel share, the profiling
fields, the preallocated framebuffer, power from activity, temperature from power, the SM clock
(its boost clock, held down past the node's power budget with the SW power cap reason, lower on a
slower GPU, halved in a hardware slowdown with the HW slowdown reason; an idle GPU parks its clock
with the GPU idle reason). node_exporter's CPU pressure and cAdvisor's CFS throttling are kept per
node where CPU neighbours are a condition (`world.llm.host_readings`); each GPU's PCIe traffic
where PCIe neighbours are (`GpuReport.pcie_rx_bytes`).

Request-level percentiles: each replica's requests this tick carry its TTFT, TPOT and E2E
quantiles, weighted by its request count, into log-binned histograms over the run.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sim.llm.engine import GPU_MEMORY_UTILIZATION, Knobs
from sim.llm import host, pcie, startup, topology, training
from sim.llm.gpus import DEGRADED_STRETCH, HW_SLOWDOWN
from sim.llm.hardware import Gpu, Model, gpu_of_product, mig_slice, model_named
from sim.llm.profile import QUANTILES, ReplicaProfile, profile
from sim.llm.state import GpuReport, HostReading, ServingState
from sim.llm.telemetry import MIB
from sim.node_state import image_name, pod_key
from sim.world_state import Service, SimPod, TickSample, World, demand_now

TDP_W = {"A100-40GB": 400, "A100-80GB": 400, "H100-80GB": 700, "H200": 700, "GB200": 1200, "L4": 72, "L40S": 350,
         "RTX-4090": 450, "RTX-A6000": 300}
"""The vendors' board power limits."""


def tdp_w(gpu: Gpu) -> float:
    """The GPU's board power limit (700 W for one the table lacks); a MIG instance's share of its
    board's, by its share of the SMs (assumption)."""
    return float(TDP_W.get(gpu.board or gpu.name, 700)) * gpu.board_share
IDLE_SHARE = 0.1
"""Idle power over TDP: assumption."""
TRAINING_POWER_SHARE = 0.95
"""Training GPUs run near their power limit: assumption."""
TRAINING_UTIL = 98.0
TRAINING_ACTIVITY = (0.5, 0.6, 0.5)
"""A training GPU's DRAM, tensor-pipe and SM-occupancy activity: assumption (large GEMMs keep the
tensor pipes busier than decode does)."""
IDLE_FB_MIB = 500.0
IDLE_SM_CLOCK_MHZ = 345.0
"""The SM clock an idle data-centre GPU parks at: assumption."""
AMBIENT_C, KELVIN_PER_WATT = 24.0, 0.065
"""GPU temperature = ambient + power × thermal resistance: assumption, put through the idle H100s
of a real scrape (`shared/real_exporters/aicr-h100-…`: 26–30 °C at 66–69 W); 70 °C at 700 W."""
GPU_IDLE, SW_POWER_CAP = 0x1, 0x4
"""NVML's clock-event reasons (`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` is their bitmask): the clocks
are low because nothing runs, or because the power limit holds them down (`HW_SLOWDOWN`: the
hardware does)."""


class GpuState(NamedTuple):
    """What a GPU's own condition does to its clock (`sim.llm.gpus`): its speed against its model's
    fastest (a slower GPU holds a lower clock under load: assumption, the way Sinha et al. saw the
    spread, through power and clocks), and the share of it a hardware slowdown leaves."""

    speed_stretch: float = 1.0
    slowdown_clock_share: float = 1.0


HEALTHY = GpuState()


def gpu_report(gpu: Gpu, fb_used_mib: float, watts: float, busy: float, occupancy: float, tensor: float,
               dram: float, power_excess: float, state: GpuState = HEALTHY) -> GpuReport:
    """A GPU's report from its activity, its node's power excess (scale included) and its own
    state: past the budget the node's power manager lowers the clocks until the draw fits, clock
    ∝ power (assumption), so the clock falls as 1 / (1 + excess) with the reason SW power cap; a
    hardware slowdown cuts it to its share with the reason HW slowdown, busy or idle."""
    slowed = HW_SLOWDOWN if state.slowdown_clock_share < 1 else 0
    if busy <= 0:
        return GpuReport(fb_used_mib, watts, IDLE_SM_CLOCK_MHZ, AMBIENT_C + KELVIN_PER_WATT * watts,
                         GPU_IDLE | slowed, 0.0, 0.0, 0.0, 0.0)
    capped = SW_POWER_CAP if power_excess > 0 else 0
    clock = gpu.max_sm_clock_mhz / (1 + power_excess) / state.speed_stretch * state.slowdown_clock_share
    return GpuReport(fb_used_mib, watts, clock, AMBIENT_C + KELVIN_PER_WATT * watts, capped | slowed, busy, occupancy,
                     tensor, dram)


def model_of(world: World, service: str) -> Model:
    return model_named(world.services[service].model)


def gpu_of_node(world: World, node: str) -> Gpu:
    """The GPU unit a pod of the node is given: its GPU (`nvidia.com/gpu.product`), or a MIG
    instance of it where GPU feature discovery counts instances of one profile."""
    labels = world.nodes[node].labels
    gpu = gpu_of_product(labels.get("nvidia.com/gpu.product", ""))
    for key in labels:
        if key.startswith("nvidia.com/mig-") and key.endswith(".count"):
            return mig_slice(gpu, key.removeprefix("nvidia.com/mig-").removesuffix(".count"))
    return gpu


def shares_of(world: World, node: str) -> int:
    """Pods one of the node's GPUs is given: its time-slicing or MPS replicas, else 1."""
    labels = world.nodes[node].labels
    return int(labels.get("nvidia.com/gpu.replicas", "1")) if "nvidia.com/gpu.sharing-strategy" in labels else 1


def profile_of(world: World, node: str, service: str, allreduce_stretch: float = 1.0) -> ReplicaProfile:
    """The service's replica as it runs on the node: on a GPU shared k ways, vLLM is started with
    `--gpu-memory-utilization` 0.9 / k, so its KV cache is what the weights leave of that; its
    all-reduces stretched where its ranks straddle NVLink domains (`sim.llm.topology`)."""
    shares, own = shares_of(world, node), world.services[service]
    knobs = Knobs(gpu_memory_utilization=GPU_MEMORY_UTILIZATION / shares, allreduce_stretch=allreduce_stretch)
    return profile(gpu_of_node(world, node), model_named(own.model), own.mix, knobs)


def service_of(pod: SimPod, world: World) -> str | None:
    """The service the pod serves: its own, or its replica's leader's."""
    if pod.leader is not None and (leader := world.pods.get(pod.leader)) is not None:
        return leader.service
    return pod.service


def start_seconds(world: World, pod: SimPod, node: str) -> float:
    """Seconds from binding to serving on the node now: the image pull where the node's disk lacks
    the image (the first pod of an image on a node pulls it; the node keeps it), the weights, the
    start; with `conditions.coldStart` on, its terms (`sim.llm.startup`)."""
    sv, cache = world.scenario.serving, world.llm.cache
    image, service = pod.obj["spec"]["containers"][0]["image"], service_of(pod, world)
    weights = model_of(world, service).weight_bytes
    if cache.enabled:
        return startup.terms(cache, image, world.nodes[node].images, node, weights, sv.startup_seconds).total
    pull = image_fetch_seconds(world, world.services[service], image, node)
    return pull + weights / sv.weight_load_bytes_per_second + sv.startup_seconds


def image_fetch_seconds(world: World, service: Service, image: str, node: str) -> float:
    """Seconds to fetch the image onto the node: 0 where its disk has it, else its pull (and,
    with `conditions.coldStart`, its extraction)."""
    if image_name(image) in world.nodes[node].images:
        return 0.0
    if world.llm.cache.enabled:
        terms = startup.terms(world.llm.cache, image, world.nodes[node].images, node, 0.0, 0.0)
        return terms.pull + terms.extract
    return service.image_bytes / world.scenario.serving.image_pull_bytes_per_second


def ready_seconds(world: World, pod: SimPod, node: str) -> float:
    """`start_seconds` for a pod being bound, each new replica's wait from its creation recorded
    for the report."""
    seconds = start_seconds(world, pod, node)
    if world.tick and pod.leader is None:
        world.llm.ready_waits.append(world.now_seconds - pod.created_tick * world.scenario.tick_seconds + seconds)
    return seconds


def is_ready(world: World, pod: SimPod) -> bool:
    """Bound and started; a multi-pod replica once each of its pods is."""
    if pod.node is None or pod.ready_at > world.now_seconds:
        return False
    return all((f := world.pods.get(key)) is not None and f.node is not None and f.ready_at <= world.now_seconds
               for key in pod.followers)


def on_lost(world: World, pod: SimPod) -> None:
    """An evicted or lost replica: its requests in flight are retried elsewhere (`measure`)."""
    state = world.serving[-1].get(pod_key(pod.obj)) if world.serving else None
    if pod.service is None or state is None:
        return
    in_flight = state.waiting + (state.running or 0.0)
    if in_flight > 0:
        prof = profile_of(world, pod.node, pod.service)
        lower, share = prof.weights(np.asarray([pod.load]))
        half_e2e = float(np.median(prof.mix_of(prof.e2e_ms, lower, share))) / 2
        world.llm.lost.append((pod.service, in_flight, half_e2e))


def _node_slowdowns(world: World, by_node: dict[str, list[SimPod]]
                    ) -> tuple[dict[str, float], dict[tuple[str, int], float], dict[str, float], dict[str, float]]:
    """Each node's step slowdown (CPU and power), the PCIe penalty per (node, first GPU index),
    each node's power over its budget (as a share of it, times the scale: what its clocks lose),
    and the SM-sharing stretch per replica on a shared GPU (pod key). Where CPU neighbours are a
    condition, the host channel is theirs (`sim.llm.host`), and its readings join
    `world.llm.host_readings`."""

    co, layout, lanes = world.scenario.contention, world.llm.host, world.scenario.conditions.pcie_neighbours
    slowdown, penalty, power_excess, sharing = {}, {}, {}, {}
    world.llm.pcie_traffic = {}
    readings: dict[str, HostReading] = {}
    for name, pods in by_node.items():
        tdp = tdp_w(gpu_of_node(world, name))
        shares = shares_of(world, name)
        gpu_total = world.units[name] // shares
        mps = world.nodes[name].labels.get("nvidia.com/gpu.sharing-strategy") == "mps"
        cores = 0.0
        noisy_switches, placed = set(), []
        traffic: dict[int, pcie.Traffic] = defaultdict(pcie.Traffic)
        # Physical GPU → summed DRAM and tensor activity of its replicas, and 1 when it trains.
        activity: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        on_gpu: dict[int, list[tuple[str, float]]] = defaultdict(list)
        for pod in pods:
            held = units_held(world, pod)
            gpus = {gpu_of_unit(u, gpu_total) for u in held}
            switches = {pcie.switch_of(g, co.gpus_per_pcie_switch) for g in gpus}
            placed.append((pod, held[0], switches, gpus))
            if lanes.enabled:
                moved = _pcie_traffic(world, pod)
                for g in gpus:
                    traffic[g] = pcie.Traffic(traffic[g].rx + moved.rx, traffic[g].tx + moved.tx)
            if pod.training_job is not None:
                cores += co.training_cores_per_worker
                for g in gpus:
                    activity[g][2] = 1.0
                noisy_switches |= switches
            else:
                cores += co.host_cores_per_replica * (1 + world.services[service_of(pod, world)].host_load)
                dram, tensor, busy = world.llm.activity.get(pod_key(pod.obj), (0.0, 0.0, 0.0))
                for g in gpus:
                    activity[g][0] += dram
                    activity[g][1] += tensor
                if not is_ready(world, pod):
                    noisy_switches |= switches
                elif shares > 1:
                    demand = _sharing_demand(mps, busy, dram, tensor)
                    on_gpu[gpu_of_unit(held[0], gpu_total)].append((pod_key(pod.obj), demand))
        host_power = sum(tdp * TRAINING_POWER_SHARE if training else power_w(tdp, min(1.0, dram), min(1.0, tensor))
                         for dram, tensor, training in activity.values())
        host_power += (gpu_total - len(activity)) * tdp * IDLE_SHARE
        node_cores = world.nodes[name].allocatable.get("cpu", 1)
        cpu = max(0.0, cores / node_cores - 1)
        if layout.enabled:
            busy, waiting = host.host_busy(layout.shape, node_cores, name in layout.batch_nodes, cores)
            cpu = host.interference(layout.shape, busy)
            throttled = max((host.throttled_share(_quota_stretch(world, pod)) for pod in pods), default=0.0)
            readings[name] = HostReading(waiting, throttled)
        budget = co.gpu_power_budget_share * tdp * gpu_total
        power_excess[name] = co.scale * max(0.0, host_power / budget - 1)
        slowdown[name] = 1 + co.scale * cpu + power_excess[name] * co.power_sensitivity
        for pod, first, switches, gpus in placed:
            serving = pod.training_job is None and is_ready(world, pod)
            if lanes.enabled:
                penalty[name, first] = co.scale * pcie.stretch(lanes, traffic, gpus, co.gpus_per_pcie_switch) \
                    if serving else 0.0
                continue
            # A replica's own loading does not slow it (it does not serve yet); a neighbour's does.
            penalty[name, first] = co.scale * co.pcie_penalty if serving and switches & noisy_switches else 0.0
        if lanes.enabled:
            world.llm.pcie_traffic[name] = dict(traffic)
        for replicas in on_gpu.values():
            total = sum(demand for _, demand in replicas)
            for key, demand in replicas:
                sharing[key] = co.scale * (total - demand)
    if layout.enabled:
        world.llm.host_readings.append(readings)
    return slowdown, penalty, power_excess, sharing


def _pcie_traffic(world: World, pod: SimPod) -> pcie.Traffic:
    """What the pod moves between its GPUs and the host each second (`sim.llm.pcie`), each of its
    GPUs alike; a replica not yet serving is counted as loading its weights the whole while
    (assumption: its image pull moves nothing over PCIe, which this overstates)."""
    lanes = world.scenario.conditions.pcie_neighbours
    if pod.training_job is not None:
        return pcie.training_traffic(lanes, pcie.offloads(lanes, world.seed, pod.training_job))
    if not is_ready(world, pod):
        return pcie.loading_traffic(world.scenario.serving.weight_load_bytes_per_second)
    return pcie.serving_traffic(lanes)


def pcie_stretch_at(world: World, node: str, units: tuple[int, ...]) -> float:
    """Share of step time a replica given these units of the node would lose to its neighbours'
    PCIe traffic now (0 where PCIe neighbours are no condition)."""
    lanes = world.scenario.conditions.pcie_neighbours
    if not lanes.enabled:
        return 0.0
    gpus = {gpu_of_unit(u, world.units[node] // shares_of(world, node)) for u in units}
    return world.scenario.contention.scale * pcie.stretch(lanes, world.llm.pcie_traffic.get(node, {}), gpus,
                                                          world.scenario.contention.gpus_per_pcie_switch)


def _quota_stretch(world: World, pod: SimPod) -> float:
    """How much the pod's CFS quota stretches its steps (1: it sets no CPU limit, or is not serving)."""
    if pod.service is None or not world.services[pod.service].cpu_limited or not is_ready(world, pod):
        return 1.0
    limit = float(world.services[pod.service].cpu)
    cores = world.nodes[pod.node].allocatable.get("cpu", 1)
    return 1 + world.scenario.contention.scale * (
        host.quota_stretch(world.llm.host.shape, limit, len(units_held(world, pod)), cores) - 1)


def units_held(world: World, pod: SimPod) -> tuple[int, ...]:
    """The units of its node the pod holds (`sim.llm.gpus`)."""
    return world.llm.units_of[pod_key(pod.obj)]


def held_stretch(world: World, node: str, units: tuple[int, ...]) -> float:
    """How much longer a step takes now on these units of the node than on their model's fastest
    GPU: the slowest of their GPUs sets the pace (tensor-parallel ranks wait for each other)."""
    gpus = world.units[node] // shares_of(world, node)
    return max(world.llm.conditions.step_stretch(node, gpu_of_unit(u, gpus), world.now_seconds) for u in units)


def _sharing_demand(mps: bool, busy: float, dram: float, tensor: float) -> float:
    """What a replica takes of a GPU it shares, as its neighbours' steps feel it: under
    time-slicing the contexts take turns, so its kernel share of the time; under MPS kernels run
    together, so the busier of the memory interface and the tensor pipes (both: assumption)."""
    return max(dram, tensor) if mps else busy


def power_w(tdp: float, dram: float, tensor: float) -> float:
    return min(tdp, tdp * IDLE_SHARE + tdp * (1 - IDLE_SHARE) * (0.3 * dram + 0.7 * tensor))


@dataclass
class _Rows:
    """The tick's ready replicas, as arrays."""

    pods: list[SimPod] = field(default_factory=list)
    profiles: list[ReplicaProfile] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    slowdown: list[float] = field(default_factory=list)
    even: list[float] = field(default_factory=list)
    degraded: list[bool] = field(default_factory=list)
    handover: list[float] = field(default_factory=list)
    """Seconds per prompt token its KV cache takes to its decode pod (0: one engine does both)."""
    across: list[bool] = field(default_factory=list)
    """Its pods sit in different NVLink domains."""


def measure(world: World):
    """Traffic to ready replicas, their requests' latency into the tally, the exporters' readings
    into `world.gpu_util` / `gpu_readings` / `serving` / `history`; the tick's true work per node."""
    up = [name for name in world.nodes if name not in world.down]
    by_node: dict[str, list[SimPod]] = defaultdict(list)
    for pod in world.pods.values():
        if pod.node is not None:
            by_node[pod.node].append(pod)
    profiles = _Profiles(world, up)
    _route_traffic(world, profiles)
    slowdown, penalty, power_excess, sharing = _node_slowdowns(world, {n: by_node.get(n, []) for n in up})
    even = _even_slowdowns(world, slowdown, up)
    rows = _Rows()
    per_gpu: dict[str, dict[int, tuple[float, str | None] | None]] = defaultdict(dict)
    readings: dict[str, dict[int, GpuReport]] = defaultdict(dict)
    serving: dict[str, ServingState] = {}
    work: dict[str, float] = {}
    noise = np.random.default_rng([world.seed, world.tick])
    for name in up:
        gpu = gpu_of_node(world, name)
        units, busy_units = _node_units(world, name, by_node.get(name, ()), profiles, gpu,
                                        (slowdown, penalty, sharing, even), rows)
        per_gpu[name], readings[name] = _scrape(world, name, gpu, units, noise, power_excess[name])
        work[name] = 100 * busy_units / world.units[name]
    _serve(world, rows, serving, world.scenario.tick_seconds)
    _serve_lost(world, profiles)
    _time_training_steps(world, power_excess)
    world.history.append({n: _mean_reported(per_gpu[n]) for n in up})
    world.gpu_util.append(dict(per_gpu))
    world.gpu_readings.append(dict(readings))
    world.serving.append(serving)
    return TickSample(work, len(world.pending()))


def _time_training_steps(world: World, power_excess: dict[str, float]) -> None:
    """Each training job whose workers all run: its step time over its ideal this tick
    (`sim.llm.training`), into `world.llm.training_steps`."""
    workers: dict[str, list[SimPod]] = defaultdict(list)
    for pod in world.pods.values():
        if pod.training_job is not None:
            workers[pod.training_job].append(pod)
    for job, pods in workers.items():
        if not all(p.node is not None and p.node in power_excess for p in pods):
            continue
        stretches = [training.worker_stretch(held_stretch(world, p.node, units_held(world, p)), power_excess[p.node])
                     for p in pods]
        cliques = {world.nodes[p.node].labels.get("nvidia.com/gpu.clique", p.node) for p in pods}
        world.llm.training_steps.append(training.step_ratio(world.scenario.training, stretches, len(cliques)))


def _route_traffic(world: World, profiles: _Profiles) -> None:
    """Each service's demand shared by its ready replicas (`pod.load`); a service with none
    waits a tick at least, tallied flat (a lower bound)."""
    dt = world.scenario.tick_seconds
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
            rate = demand * profiles.anywhere(service).saturation_rps
            _tally_flat(world, rate * dt, dt * 1000)


def _node_units(world: World, name: str, pods, profiles: _Profiles, gpu, slowdowns: tuple, rows: _Rows
                ) -> tuple[list, float]:
    """What each schedulable unit of the node shows before the exporter's noise, and the node's
    busy units; each serving replica's row joins `rows` for `_serve`."""
    slowdown, penalty, sharing, even = slowdowns
    tdp, shares = tdp_w(gpu), shares_of(world, name)
    gpu_total = world.units[name] // shares
    preallocated = GPU_MEMORY_UTILIZATION / shares * gpu.memory_bytes / MIB
    busy_units = 0.0
    slots: list[_Unit | None] = [None] * world.units[name]
    for pod in pods:
        held = units_held(world, pod)
        count, index = len(held), held[0]
        key = pod_key(pod.obj)
        if pod.training_job is not None:
            util, fb, watts = TRAINING_UTIL, 0.8 * gpu.memory_bytes / MIB, tdp * TRAINING_POWER_SHARE
            dram, tensor, occupancy = TRAINING_ACTIVITY
            busy_units += count
        elif pod.leader is not None:
            serving = is_ready(world, world.pods[pod.leader]) if pod.leader in world.pods else False
            util, occupancy, tensor, dram = world.llm.replica_units.get(pod.leader, (0.0,) * 4) if serving \
                else (0.0,) * 4
            world.llm.activity[key] = (dram, tensor, util / 100)
            fb, watts = preallocated, power_w(tdp, dram, tensor) if serving else tdp * IDLE_SHARE
            busy_units += util / 100 * count
        elif not is_ready(world, pod):
            util, fb, watts = 0.0, preallocated, tdp * IDLE_SHARE
            dram = tensor = occupancy = 0.0
        else:
            own = held_stretch(world, name, held)
            # A CFS quota stretches the step while the GPU waits for the CPU: its busy share falls.
            quota = _quota_stretch(world, pod)
            s = (slowdown[name] + penalty.get((name, index), 0.0) + sharing.get(key, 0.0)) * own * quota
            # The slower pod of a multi-pod replica sets its pace (ranks and stages wait for each other).
            s = max([s, *(_pod_slowdown(world, world.pods[f], slowdown, penalty) for f in pod.followers)])
            stretch, handover, across = _topology(world, pod)
            prof = profiles.of(name, pod.service, stretch)
            rows.handover.append(handover)
            rows.across.append(across)
            rows.profiles.append(prof)
            rows.pods.append(pod)
            rows.nodes.append(name)
            rows.load.append(pod.load)
            rows.slowdown.append(s)
            rows.even.append(even[name])
            rows.degraded.append(own >= DEGRADED_STRETCH)
            lower, share = prof.weights(np.asarray([pod.load * s]))
            util = 100 * float(prof.mix_of(prof.busy, lower, share)[0]) / quota
            dram = float(prof.mix_of(prof.dram_active, lower, share)[0]) / quota
            tensor = float(prof.mix_of(prof.tensor_active, lower, share)[0]) / quota
            occupancy = float(prof.mix_of(prof.sm_occupancy, lower, share)[0]) / quota
            world.llm.activity[key] = (dram, tensor, util / 100)
            if pod.followers:
                world.llm.replica_units[key] = (util, occupancy, tensor, dram)
            fb, watts = preallocated, power_w(tdp, dram, tensor)
            busy_units += min(1.0, pod.load * s) * count
        unit = _Unit(util, fb, watts, occupancy, tensor, dram, key, pod.training_job is not None)
        for u in held:
            slots[u] = unit
    idle = _Unit(0.0, IDLE_FB_MIB / shares, tdp * IDLE_SHARE, 0.0, 0.0, 0.0, None, False)
    units = [idle if unit is None else unit for unit in slots]
    if shares > 1:
        units = _as_shared(units, gpu_total, tdp)
    return units, busy_units


def _pod_slowdown(world: World, pod: SimPod, slowdown: dict[str, float], penalty: dict[tuple[str, int], float]
                  ) -> float:
    """How much its node and its own GPUs slow a replica's other pod (1 where its node is down)."""
    if pod.node not in slowdown:
        return 1.0
    held = units_held(world, pod)
    return (slowdown[pod.node] + penalty.get((pod.node, held[0]), 0.0)) * held_stretch(world, pod.node, held)


def _topology(world: World, pod: SimPod) -> tuple[float, float, bool]:
    """A multi-pod replica's all-reduce stretch, its KV handover's seconds per prompt token, and
    whether its pods straddle NVLink domains (`sim.llm.topology`); (1, 0, False) for one pod."""
    kind = world.services[pod.service].replica_kind
    if not kind:
        return 1.0, 0.0, False
    pods = [pod, *(world.pods[f] for f in pod.followers)]
    domains = {topology.domain_of(p.node, world.nodes[p.node].labels) for p in pods}
    shape = world.scenario.conditions.topology
    if kind == topology.LWS:
        return topology.allreduce_stretch(shape, domains), 0.0, len(domains) > 1
    return 1.0, topology.kv_seconds_per_token(shape, domains), len(domains) > 1


def _scrape(world: World, name: str, gpu, units: list, noise: np.random.Generator, power_excess: float
            ) -> tuple[dict[int, tuple[float, str | None] | None], dict[int, GpuReport]]:
    """One node's exporter readings: per unit, GPU_UTIL with its noise (None: a missed scrape)
    and the pod it names; per unit, the GPU's report (a pod's units, and the spares, share one,
    unless their GPUs' own states differ)."""
    sv = world.scenario.serving
    gpu_total = world.units[name] // shares_of(world, name)
    per_gpu: dict[int, tuple[float, str | None] | None] = {}
    readings: dict[int, GpuReport] = {}
    reports: dict[int, GpuReport] = {}
    plan = world.llm.failures
    traffic, lanes_on = world.llm.pcie_traffic.get(name, {}), world.scenario.conditions.pcie_neighbours.enabled
    for index, unit in enumerate(units):
        gpu_index = gpu_of_unit(index, gpu_total)
        if plan.failed and plan.vanished(name, gpu_index):
            continue  # fallen off the bus: NVML no longer lists it, so neither does the exporter
        per_gpu[index] = None if noise.random() < sv.missing_scrape_share else (
            float(np.clip(unit.util + noise.normal(0, sv.util_noise_percent) if unit.util else 0.0, 0, 100)),
            unit.key)
        state = gpu_state(world, name, gpu_index)
        if (report := reports.get((id(unit), state))) is None:
            report = reports[id(unit), state] = gpu_report(gpu, unit.fb, unit.watts, unit.util / 100, unit.occupancy,
                                                           unit.tensor, unit.dram, power_excess, state)
        if plan.failed:
            report = report._replace(xid=plan.xid(name, gpu_index))
        if (moved := traffic.get(gpu_index)) is not None or lanes_on:
            moved = moved or pcie.QUIET
            report = report._replace(pcie_rx_bytes=moved.rx, pcie_tx_bytes=moved.tx)
        readings[index] = report
    return per_gpu, readings


def gpu_state(world: World, node: str, gpu: int) -> GpuState:
    conditions = world.llm.conditions
    if not conditions.stretch:
        return HEALTHY
    slowed = conditions.slowed(node, gpu, world.now_seconds)
    return GpuState(conditions.stretch.get((node, gpu), 1.0), conditions.clock_share if slowed else 1.0)


class _Unit(NamedTuple):
    """What one schedulable GPU unit shows before the exporter's noise: its pod's figures, or,
    on a shared GPU, the GPU's."""

    util: float
    fb: float
    watts: float
    occupancy: float
    tensor: float
    dram: float
    key: str | None
    training: bool


def gpu_of_unit(unit: int, gpus: int) -> int:
    """The GPU behind a unit of a shared node: NVIDIA's device plugin hands a pod the replica of
    the GPU with the fewest given out (k8s-device-plugin's distributed allocation, best effort:
    NVIDIA/k8s-device-plugin #491), so a node's GPUs fill one replica deep before any is shared."""
    return unit % gpus


def _as_shared(units: list[_Unit], gpus: int, tdp: float) -> list[_Unit]:
    """A shared node's units as the GPUs they are: activity summed (at most all of it), memory
    summed, power from the sum; each unit keeps its pod."""
    combined = []
    for gpu in range(gpus):
        on = units[gpu::gpus]
        dram, tensor = min(1.0, sum(u.dram for u in on)), min(1.0, sum(u.tensor for u in on))
        trains = any(u.training for u in on)
        combined.append(_Unit(min(100.0, sum(u.util for u in on)), sum(u.fb for u in on),
                              tdp * TRAINING_POWER_SHARE if trains else power_w(tdp, dram, tensor),
                              min(1.0, sum(u.occupancy for u in on)), tensor, dram, None, trains))
    return [combined[gpu_of_unit(i, gpus)]._replace(key=u.key) for i, u in enumerate(units)]


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


class _Profiles:
    """The tick's replica profiles, by (node, service), each looked up once."""

    def __init__(self, world: World, up: list[str]) -> None:
        self._world, self._up = world, up
        self._by: dict[tuple[str, str, float], ReplicaProfile] = {}

    def of(self, node: str, service: str, allreduce_stretch: float = 1.0) -> ReplicaProfile:
        if (found := self._by.get((node, service, allreduce_stretch))) is None:
            found = self._by[node, service, allreduce_stretch] = profile_of(self._world, node, service,
                                                                            allreduce_stretch)
        return found

    def anywhere(self, service) -> ReplicaProfile:
        """The service's replica on a node of its pool (any node where it has none)."""
        pool = service.pool
        for name in self._up:
            if pool is None or self._world.nodes[name].labels.get("pool") == pool.name:
                return self.of(name, service.name)
        return self.of(self._up[0], service.name)


def _tally_flat(world: World, requests: float, ttft_ms: float) -> None:
    tally = world.llm.tally
    tally.requests += requests
    row = np.full((1, 1), ttft_ms)
    tally.ttft.add(row, np.asarray([requests]))
    tally.ttft_even.add(row, np.asarray([requests]))
    tally.e2e.add(row, np.asarray([requests]))


def _serve(world: World, rows: _Rows, serving: dict[str, ServingState], dt: float) -> None:
    """The ready replicas' requests this tick, by profile (one per GPU kind), into the tally."""
    sv, tally = world.scenario.serving, world.llm.tally
    groups: dict[int, list[int]] = defaultdict(list)
    for i, prof in enumerate(rows.profiles):
        groups[id(prof)].append(i)
    for members in groups.values():
        prof = rows.profiles[members[0]]
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
        handover = np.asarray([rows.handover[i] for i in members])
        handover_ms = 1000 * handover[:, None] * topology.prompt_quantiles(prof.mix)
        ttft = prof.mix_of(prof.ttft_ms, lower, share) * s[:, None] + wait_ms[:, None] + handover_ms
        tpot = prof.mix_of(prof.tpot_ms, lower, share) * s[:, None]
        e2e = prof.mix_of(prof.e2e_ms, lower, share) * s[:, None] + wait_ms[:, None] + handover_ms
        # Even load changes the contention only: the same traffic, the same queue, drained at
        # the capacity the pool's mean slowdown leaves.
        even_lower, even_share = prof.weights(load * s_even)
        even_wait_ms = 1000 * backlog * s_even / (prof.top * prof.saturation_rps)
        ttft_even = prof.mix_of(prof.ttft_ms, even_lower, even_share) * s_even[:, None] + even_wait_ms[:, None] \
            + handover_ms
        requests = rate * dt
        tally.ttft.add(ttft, requests)
        tally.tpot.add(tpot, requests)
        tally.e2e.add(e2e, requests)
        tally.ttft_even.add(ttft_even, requests)
        if (sensitive := np.asarray([world.services[p.service].sensitive for p in pods])).any():
            tally.ttft_sensitive.add(ttft[sensitive], requests[sensitive])
        if world.llm.host.enabled:
            unlimited = ~np.asarray([world.services[p.service].cpu_limited for p in pods])
            tally.ttft_unlimited.add(ttft[unlimited], requests[unlimited])
        tally.requests += float(requests.sum())
        tally.on_degraded_gpu += float(requests[np.asarray([rows.degraded[i] for i in members])].sum())
        tally.across_domains += float(requests[np.asarray([rows.across[i] for i in members])].sum())
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


def _serve_lost(world: World, profiles: _Profiles) -> None:
    """Requests in flight on replicas evicted or lost: each starts again, its first token as late
    as the time it had spent plus a fresh TTFT on a replica of its service, and misses its target
    when that passes it."""
    sv, tally = world.scenario.serving, world.llm.tally
    for service_name, count, elapsed_ms in world.llm.lost:
        service = world.services[service_name]
        prof = profiles.anywhere(service)
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
