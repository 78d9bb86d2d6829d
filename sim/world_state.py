"""The simulated cluster's state: its services, pods, nodes and what each tick measured (mutable:
the engine steps it). Pure, no I/O."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from sim.cluster_context import NO_CONTEXT, ClusterContext
from sim.llm.profile import RequestMix
from sim.llm.state import GpuReport, ServingState, ServingWorld
from sim.node_state import NodeState
from sim.scenario import PoolShape, Scenario, ServingShape

BURST = 1.5
"""Traffic multiplier during a service's burst (10 minutes)."""


@dataclass(frozen=True, slots=True)
class AutoscalerSync:
    """One sync of a service's autoscaler."""

    replicas: int
    """Its pods when it looked."""
    desired: int
    load: float | None
    """Demand per ready replica, in the units of `inference.targetUtil` (its target); None with no
    replica ready (no pod reports the metric)."""


@dataclass
class Service:
    name: str
    demand: float
    """Mean demand in fully-busy GPUs."""
    phase: float
    """Hours the service's daily peak is offset from the fleet's."""
    min_replicas: int
    max_replicas: int
    cpu: int
    memory_gib: int
    template_hash: str
    image_bytes: int = 15 * 2**30
    """Model-serving images carry weights: many GB, which is what makes ImageLocality pull replicas together."""
    burst_until: int = -1
    autoscaled: AutoscalerSync | None = None
    """What its HorizontalPodAutoscaler found at its last sync, as the HPA's status shows it
    (`sim.engine.cluster_objects`); None before its first."""
    serial: int = 0
    pool: PoolShape | None = None
    """The pool its pods are pinned to by nodeSelector (tolerating its taints), or None."""
    model: str = "Llama-3.1-8B"
    """The model its replicas serve (`sim.scenario.service_model`)."""
    mix: RequestMix = RequestMix(ServingShape.prompt_tokens, ServingShape.output_tokens, ServingShape.length_sigma)
    """Its requests' lengths (the scenario's `serving:` lengths unless it is latency-sensitive)."""
    sensitive: bool = False
    """A latency-sensitive service (`inference.latencySensitiveShare`): its TTFT is tallied apart too."""
    host_load: float = 0.0
    """Host cores its replicas keep busy beyond a replica's own, as a multiple of those (`twinHostLoad`)."""
    cpu_limited: bool = False
    """Its Deployment sets `limits.cpu` equal to its request (`conditions.cpuNeighbours`)."""
    replica_kind: str = ""
    """A replica of more than one pod (`sim.llm.topology`): `lws` (tensor parallelism over a
    LeaderWorkerSet's leader and worker) or `disaggregated` (a prefill pod and a decode pod); empty:
    one pod."""

    @property
    def pods_per_replica(self) -> int:
        return 2 if self.replica_kind else 1


@dataclass
class SimPod:
    obj: dict
    service: str | None
    training_job: str | None = None
    node: str | None = None
    created_tick: int = 0
    load: float = 0.0
    """Share of a fully busy GPU it serves, per GPU."""
    claimed_units: int = 0
    """GPU units its ResourceClaim asks for (DRA fleets; device-plugin pods say so in their limits)."""
    ready_at: float = 0.0
    """Seconds of simulated time from which it serves (the serving world: after pull, load and start)."""
    leader: str | None = None
    """For the second pod of a multi-pod replica (a LeaderWorkerSet worker, a decode pod): the key
    of the pod that stands for the replica, which has its `service`; this one has none."""
    followers: tuple[str, ...] = ()
    """For the pod that stands for a multi-pod replica: the keys of its other pods."""


@dataclass
class TickSample:
    node_util: dict[str, float]
    """Each node's true work this tick, % of its units."""
    pending: int


@dataclass
class World:
    """Mutable cluster state for one policy's run."""

    scenario: Scenario
    rng: random.Random
    nodes: dict[str, NodeState]
    services: dict[str, Service]
    pods: dict[str, SimPod] = field(default_factory=dict)
    tick: int = 0
    evictions: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    """True per-node utilisation per tick (what telemetry reports, later)."""
    gpu_util: list[dict[str, dict[int, tuple[float, str | None]]]] = field(default_factory=list)
    down: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, dict] = field(default_factory=dict)
    units: dict[str, int] = field(default_factory=dict)
    """Schedulable GPU units per node: GPUs, or MIG instances on a MIG pool."""
    serving: list[dict[str, ServingState]] = field(default_factory=list)
    """Per tick, when replicas export serving series: pod key → what their server reports."""
    context: ClusterContext = NO_CONTEXT
    """The claim templates of a DRA fleet, for the scheduler model's DynamicResources."""
    templates: dict[tuple[str, str], dict] = field(default_factory=dict)
    """(namespace, name) → ResourceClaimTemplate object, for the listing (`cluster_objects`)."""
    seed: int = 0
    gpu_readings: list[dict[str, dict[int, GpuReport]]] = field(default_factory=list)
    """Per tick in the serving world: node → GPU index → what dcgm-exporter reports of it."""
    llm: ServingWorld = field(default_factory=ServingWorld)
    """The serving world's own state: image caches, queues, the request tally."""

    @property
    def dra(self) -> bool:
        return self.scenario.inference.claims == "dra"

    @property
    def now_seconds(self) -> float:
        return self.tick * self.scenario.tick_seconds

    def pending(self) -> list[SimPod]:
        return [p for p in self.pods.values() if p.node is None]

    def running(self, service: str) -> list[SimPod]:
        return [p for p in self.pods.values() if p.service == service and p.node is not None]


def demand_now(world: World, service: Service) -> float:
    inf = world.scenario.inference
    hour_of_day = inf.start_hour + world.now_seconds / 3600
    diurnal = 1 + inf.diurnal_amplitude * math.cos(2 * math.pi * (hour_of_day - inf.peak_hour - service.phase) / 24)
    burst = BURST if world.tick < service.burst_until else 1.0
    return service.demand * diurnal * burst


def gpu_count(pod: SimPod) -> int:
    """GPU units the pod holds: GPUs, or MIG instances."""
    if pod.claimed_units:
        return pod.claimed_units
    limits = pod.obj["spec"]["containers"][0]["resources"]["limits"]
    return sum(int(float(v)) for r, v in limits.items() if r.startswith("nvidia.com/"))
