"""The discrete-time cluster simulation: workloads, telemetry lag, scheduling, descheduling. Pure
given its seed (no I/O); it calls the same placement and eviction code production runs.

Latency model (documented in README, "Simulating your fleet"): each inference replica owns one
GPU and serves its share of its service's traffic. Its GPU's speed drops with node-level
contention (shared PCIe, host CPU and power budget): speed = 1 − 0.6 × max(0, node load − 0.4).
Busy fraction ρ = load / speed; mean sojourn time W = s₀ / speed / (1 − ρ) (M/M/1, s₀ = 25 ms);
a replica's p99 is W × ln 100, and the fleet's p99 is the request-weighted 99th percentile of
those over all ticks. The same replicas are also timed as if every node carried the fleet's mean
load at that tick (`even_load_latencies`): what perfect load balancing would give these pods.

Latency-sensitive services (`inference.latencySensitiveShare`) have their own service time and
feel contention `sensitiveContention` times harder in their latency only: the host-side part of
a long prompt (tokenisation, copies) keeps the GPU waiting, not busy, so DCGM does not show it.
Their tolerant twins may load the host too (`twinHostLoad`): that adds to the contention the
sensitive replicas on the same node feel, and to nothing DCGM reports.
Where the scenario says so, replicas export what a model server would: requests waiting (M/M/1:
ρ² / (1 − ρ)) and TTFT p95 (the exponential sojourn's W × ln 20), read by the serving signal.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import replace

from descheduler.cluster import namespace_object
from scoring.images import MODEL_BYTES_ANNOTATION
from scoring.claims import book_from_objects, class_of, class_resource
from scoring.policy import OptInPolicy, PlacementPolicy
from sim.cluster_context import ClusterContext
from sim.llm import world as serving_world
from sim.llm.state import ServingState
from sim.node_state import IMAGE_SIZE_ANNOTATION, NodeState, pod_key, status_images
from sim.plugins.dynamic_resources import claimed_devices
from sim.scenario import PoolShape, Scenario
from sim.world_state import BURST, Service, SimPod, TickSample, World, demand_now, gpu_count

CONTENTION = 0.6
"""Speed lost per unit of node load above `CONTENTION_FROM` (shared PCIe, host CPU, power budget)."""
CONTENTION_FROM = 0.4
P99_FACTOR = math.log(100)
P95_FACTOR = math.log(20)
NAMESPACE = "inference"


def _pool_nodes(scenario: Scenario) -> list[tuple[str, PoolShape, int]]:
    """(node name, its pool, index in the pool) for every node. The single-pool fleet keeps its
    historic names, so old scenarios replay exactly."""
    if not scenario.fleet.pools:
        pool = scenario.fleet.pool_shapes()[0]
        return [(f"gpu-node-{i:03d}", pool, i) for i in range(pool.nodes)]
    return [(f"{pool.name}-{i:03d}", pool, i) for pool in scenario.fleet.pools for i in range(pool.nodes)]


def build_world(scenario: Scenario, seed: int) -> World:
    rng = random.Random(seed)
    f = scenario.fleet
    nodes, units, pools = {}, {}, {}
    for position, (name, pool, i) in enumerate(_pool_nodes(scenario)):
        zone = f"zone-{position % f.zones}"
        clique = f"cluster-1.{i // pool.nodes_per_clique}" if not f.pools else f"{pool.name}.{i // pool.nodes_per_clique}"
        labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **pool.labels, **pool.sharing_labels,
                  "kubernetes.io/hostname": name,
                  "topology.kubernetes.io/zone": zone, "nvidia.com/gpu.clique": clique}
        nodes[name] = NodeState.from_object({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]},
            "status": {"allocatable": {"cpu": str(f.cpu_per_node), "memory": f"{f.memory_gib_per_node}Gi",
                                       unit_resource(scenario, pool): str(pool.units_per_node)}}})
        units[name], pools[name] = pool.units_per_node, pool
    inf = scenario.inference
    raw = [rng.paretovariate(inf.pareto_alpha) for _ in range(inf.services)]
    sensitive = set(range(0, 2 * int(inf.services * inf.latency_sensitive_share), 2))
    for s in sensitive:  # each sensitive service's tolerant twin has the same demand
        if s + 1 < len(raw):
            raw[s + 1] = raw[s]
    placement = _service_pools(scenario, seed)
    capacity: dict[str | None, int] = defaultdict(int)
    for name, pool in pools.items():
        capacity[pool.name] += units[name]
        if not pool.taints and not pool.mig_profile:
            capacity[None] += units[name]  # unpinned services may use any untainted whole-GPU node
    raw_by_group: dict[str | None, float] = defaultdict(float)
    for s, r in enumerate(raw):
        raw_by_group[placement[s].name if placement[s] else None] += r
    services = {}
    for s, r in enumerate(raw):
        group = placement[s].name if placement[s] else None
        demand = r * inf.mean_demand_fraction * capacity[group] / max(raw_by_group[group], 1e-9)
        minimum = 1 if demand < 0.3 else 2
        services[f"svc-{s:02d}"] = Service(
            name=f"svc-{s:02d}", demand=demand, phase=rng.uniform(0, 2 * math.pi), min_replicas=minimum,
            max_replicas=max(minimum, math.ceil(demand * (1 + inf.diurnal_amplitude) * BURST / inf.max_replica_util)),
            cpu=rng.choice((4, 8, 16)),
            memory_gib=rng.choice((32, 64, 128)), template_hash=f"{rng.getrandbits(32):08x}"[:9], pool=placement[s])
    for s in sensitive:
        service = services[f"svc-{s:02d}"]
        service.service_time_ms, service.latency_contention = inf.sensitive_service_time_ms, inf.sensitive_contention
        if twin := services.get(f"svc-{s + 1:02d}"):
            twin.host_load = inf.twin_host_load
    for service in services.values():
        if service.pool is not None and service.pool.mig_profile:
            # A MIG instance is a slice of a GPU; its server gets a slice of the host too.
            service.cpu = max(1, service.cpu // service.pool.instances_per_gpu)
            service.memory_gib = max(4, service.memory_gib // service.pool.instances_per_gpu)
    world = World(scenario, rng, nodes, services, units=units, seed=seed,
                  context=ClusterContext(profile=scenario.scheduler))
    if world.dra:
        _add_templates(world)
    return world


def unit_resource(scenario: Scenario, pool: PoolShape) -> str:
    """The resource a pool's units are counted in: the device plugin's, or the DRA class's as
    `scoring.claims` counts a ResourceSlice's devices."""
    return class_resource(pool.device_class) if scenario.inference.claims == "dra" else pool.resource


def _template_name(device_class: str, count: int) -> str:
    return f"{device_class.split('.')[0]}-{count}"


def _add_templates(world: World) -> None:
    """One ResourceClaimTemplate per (namespace, class, count) the fleet's pods ask for."""
    wanted = {(NAMESPACE, s.pool.device_class if s.pool else "gpu.nvidia.com", 1) for s in world.services.values()}
    wanted.add(("training", "gpu.nvidia.com", world.scenario.training.gpus_per_worker))
    for namespace, device_class, count in sorted(wanted):
        name = _template_name(device_class, count)
        world.templates[namespace, name] = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}}}}
    placement = PlacementPolicy()
    world.context = replace(world.context, claims=book_from_objects(world.templates.values(), placement),
                            placement=placement)


def _claim_gpus(pod: dict, device_class: str, count: int) -> None:
    """Ask for the pod's GPUs through a claim template instead of its container's limits."""
    container = pod["spec"]["containers"][0]
    container["resources"]["limits"] = {}
    container["resources"]["claims"] = [{"name": "gpu"}]
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": _template_name(device_class, count)}]


def _service_pools(scenario: Scenario, seed: int) -> list[PoolShape | None]:
    """Which pool each service is pinned to (None: unpinned), drawn by `poolShares` from an rng
    of its own so that fleets without pools replay exactly."""
    shares = scenario.inference.pool_shares
    if not shares:
        return [None] * scenario.inference.services
    by_name = {p.name: p for p in scenario.fleet.pool_shapes()}
    rng = random.Random(seed * 31 + 7)
    out: list[PoolShape | None] = []
    for _ in range(scenario.inference.services):
        draw, chosen = rng.random(), None
        for share in shares:
            if draw < share.share:
                chosen = by_name[share.pool]
                break
            draw -= share.share
        out.append(chosen)
    return out


def service_pod(world: World, service: Service) -> SimPod:
    service.serial += 1
    name = f"{service.name}-{service.template_hash}-{service.serial:05d}"
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NAMESPACE,
        "annotations": {IMAGE_SIZE_ANNOTATION: str(service.image_bytes)},
        "labels": {"app": service.name, "pod-template-hash": service.template_hash},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                             "name": f"{service.name}-{service.template_hash}", "uid": service.name}]},
        "spec": {"containers": [{"name": "server", "image": f"registry.example/{service.name}:1", "resources": {
            "requests": {"cpu": str(service.cpu), "memory": f"{service.memory_gib}Gi"},
            "limits": {service.pool.resource if service.pool else "nvidia.com/gpu": str(_gpus_per_replica(world))}}}]},
        "status": {"phase": "Pending"}}
    if world.scenario.llm:  # what the replica loads before it serves, as its owner would annotate it
        obj["metadata"]["annotations"][MODEL_BYTES_ANNOTATION] = str(int(serving_world.model_of(world).weight_bytes))
    if service.pool is not None:
        obj["spec"]["nodeSelector"] = dict(service.pool.labels)
        if service.pool.taints:
            obj["spec"]["tolerations"] = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
                                          for t in service.pool.taints]
    pod = SimPod(obj, service.name, created_tick=world.tick)
    if world.dra:
        _claim_gpus(obj, service.pool.device_class if service.pool else "gpu.nvidia.com", 1)
        pod.claimed_units = 1
    world.pods[pod_key(obj)] = pod
    return pod


def _gpus_per_replica(world: World) -> int:
    """One, or the serving world's tensor-parallel degree."""
    return serving_world.model_of(world).tensor_parallel if world.scenario.llm else 1


def training_pods(world: World, job: str, workers: int, gpus: int) -> list[SimPod]:
    pods = []
    for w in range(workers):
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{job}-worker-{w}", "namespace": "training",
            "labels": {"jobset.sigs.k8s.io/jobset-name": job},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "controller": True, "name": job, "uid": job}]},
            "spec": {"containers": [{"name": "trainer", "image": "registry.example/train:1", "resources": {
                "requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Pending"}}
        pod = SimPod(obj, None, training_job=job, created_tick=world.tick, load=0.95)
        if world.dra:
            _claim_gpus(obj, "gpu.nvidia.com", gpus)
            pod.claimed_units = gpus
        world.pods[pod_key(obj)] = pod
        pods.append(pod)
    return pods


def delete_pod(world: World, pod: SimPod) -> None:
    if pod.node is not None and pod.node in world.nodes:
        world.nodes[pod.node].unbind(pod.obj)
    world.pods.pop(pod_key(pod.obj), None)


def bind(world: World, pod: SimPod, node: str) -> None:
    pod.node = node
    pod.obj["spec"]["nodeName"] = node
    pod.obj["status"]["phase"] = "Running"
    if world.scenario.llm and pod.service is not None:
        startup = serving_world.ready_seconds(world, pod, node)
        # The fleet at the first tick was serving before the simulated window opened.
        pod.ready_at = world.now_seconds + startup if world.tick else 0.0
    world.nodes[node].bind(pod.obj, claimed_devices(pod.obj, world.context) if world.dra else None)


def cluster_objects(world: World) -> list[dict]:
    """The world as `kubectl get namespaces,nodes,pods -A -o json` would list it: its namespaces
    (all opted in), nodes and bound pods; on a DRA fleet also `resourceslices,resourceclaims,
    resourceclaimtemplates`."""
    bound = [dict(p.obj, kind="Pod") for p in world.pods.values() if p.node is not None]
    namespaces = sorted({pod.get("metadata", {}).get("namespace", "") for pod in bound})
    objects = [namespace_object(name, OptInPolicy()) for name in namespaces]
    objects += [{"kind": "Node", "metadata": {"name": n.name, "labels": dict(n.labels)},
                 "spec": {"unschedulable": n.unschedulable, "taints": list(n.taints)},
                 "status": {"allocatable": {r: str(int(q)) for r, q in n.allocatable.items()
                                            if r.startswith("nvidia.com/")},
                            "images": status_images(n)}}
                for n in world.nodes.values()]
    if world.dra:
        objects += _dra_objects(world)
    return objects + bound


def _dra_objects(world: World) -> list[dict]:
    """What NVIDIA's DRA driver and the control plane would list: a slice per node (pool = node,
    devices gpu-N or mig-N with their `type`), the templates, and each bound pod's claim with the
    devices allocated to it."""
    objects: list[dict] = list(world.templates.values())
    for node in world.nodes.values():
        devices, taken = [], 0
        for resource, units in node.allocatable.items():
            if (device_class := class_of(resource)) is not None:
                kind = device_class.split(".")[0]
                devices += [{"name": f"{kind}-{i}", "attributes": {"type": {"string": kind}}} for i in range(int(units))]
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"{node.name}-gpu.nvidia.com"},
                        "spec": {"driver": "gpu.nvidia.com", "nodeName": node.name,
                                 "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                                 "devices": devices}})
        for key, claimed in sorted(node.claimed.items()):
            namespace, name = key.split("/", 1)
            template = world.templates[namespace, node.pods[key]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]]
            results = []
            for resource, count in claimed.items():
                kind = str(class_of(resource)).split(".")[0]
                results += [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": node.name,
                             "device": f"{kind}-{taken + i}"} for i in range(int(count))]
                taken += int(count)
            objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                            "metadata": {"name": f"{name}-gpu", "namespace": namespace},
                            "spec": template["spec"]["spec"],
                            "status": {"allocation": {"devices": {"results": results}}}})
    return objects


def step_workloads(world: World) -> None:
    """Traffic, autoscaling, rollouts, bursts, training jobs and node failures for one tick."""
    sc, rng, tick = world.scenario, world.rng, world.tick
    ticks_per_hour = 3600 / sc.tick_seconds
    inf = sc.inference
    for service in world.services.values():
        if rng.random() < inf.bursts_per_hour / ticks_per_hour / max(1, len(world.services)) * 10:
            service.burst_until = tick + int(600 / sc.tick_seconds)
        running = world.running(service.name)
        existing = [p for p in world.pods.values() if p.service == service.name]
        if tick % inf.autoscale_every_ticks == 0 or not existing:
            desired = min(service.max_replicas, max(service.min_replicas,
                                                    math.ceil(demand_now(world, service) / inf.target_util)))
            for _ in range(desired - len(existing)):
                service_pod(world, service)
            for pod in sorted(existing, key=lambda p: -p.created_tick)[:max(0, len(existing) - desired)]:
                delete_pod(world, pod)
        if rng.random() < inf.rollouts_per_service_per_day / (24 * ticks_per_hour):
            service.template_hash = f"{rng.getrandbits(32):08x}"[:9]
        stale = [p for p in running if p.obj["metadata"]["labels"]["pod-template-hash"] != service.template_hash]
        if stale and sc.llm:
            _roll_when_ready(world, service, stale)
        elif stale:  # rolling update: one surge pod in, one old pod out per tick
            service_pod(world, service)
            delete_pod(world, stale[0])
    ev = sc.events
    if ev.burst_pods_at_hour >= 0 and tick == int(ev.burst_pods_at_hour * ticks_per_hour):
        target = max(world.services.values(), key=lambda s: s.demand)
        target.max_replicas += ev.burst_pods
        target.demand *= 1 + ev.burst_pods * inf.target_util / max(target.demand, 1e-9) * 0.5
        for _ in range(ev.burst_pods):
            service_pod(world, target)
    if ev.node_failures_at_hour >= 0 and tick == int(ev.node_failures_at_hour * ticks_per_hour):
        for name in rng.sample(sorted(world.nodes), ev.failed_nodes):
            world.down[name] = tick + int(ev.failure_duration_hours * ticks_per_hour)
            world.nodes[name].unschedulable = True
            for pod in [p for p in world.pods.values() if p.node == name]:
                recreate(world, pod)
    for name, until in list(world.down.items()):
        if tick >= until:
            world.nodes[name].unschedulable = False
            del world.down[name]
    tr = sc.training
    if tr.jobs_per_hour > 0 and rng.random() < tr.jobs_per_hour / ticks_per_hour:
        job = f"train-{tick:05d}"
        world.jobs[job] = {"until": tick + int(rng.choice(tr.duration_hours) * ticks_per_hour)}
        training_pods(world, job, rng.choice(tr.workers), tr.gpus_per_worker)
    for job, info in list(world.jobs.items()):
        if tick >= info["until"]:
            for pod in [p for p in world.pods.values() if p.training_job == job]:
                delete_pod(world, pod)
            del world.jobs[job]


def _roll_when_ready(world: World, service: Service, stale: list[SimPod]) -> None:
    """A Deployment's rollout at maxSurge 1, maxUnavailable 0: an old pod goes once every pod,
    the new one among them, is ready; the next new pod comes once none is starting."""
    pods = [p for p in world.pods.values() if p.service == service.name]
    current = [p for p in pods if p.obj["metadata"]["labels"]["pod-template-hash"] == service.template_hash]
    retired = bool(current) and all(serving_world.is_ready(world, p) for p in pods)
    if retired:
        delete_pod(world, stale[0])
    if len(stale) > retired and all(serving_world.is_ready(world, p) for p in current):
        service_pod(world, service)


def recreate(world: World, pod: SimPod) -> None:
    """An evicted or lost pod: its controller makes a new one (inference) or restarts it (training)."""
    if world.scenario.llm:
        serving_world.on_lost(world, pod)
    delete_pod(world, pod)
    if pod.service is not None:
        service_pod(world, world.services[pod.service])
    elif pod.training_job is not None:
        name = pod.obj["metadata"]["name"]
        pod.obj = {**pod.obj, "spec": {k: v for k, v in pod.obj["spec"].items() if k != "nodeName"},
                   "status": {"phase": "Pending"}}
        pod.obj["metadata"] = {**pod.obj["metadata"], "name": name}
        pod.node = None
        world.pods[pod_key(pod.obj)] = pod


def measure(world: World) -> TickSample:
    """Assign traffic to running replicas, record true utilisation, and model latency (in the
    serving world, `sim.llm.world.measure`)."""
    if world.scenario.llm:
        return serving_world.measure(world)
    for service in world.services.values():
        running = world.running(service.name)
        share = demand_now(world, service) / len(running) if running else 0.0
        for pod in running:
            pod.load = share
    node_load: dict[str, float] = defaultdict(float)
    per_gpu: dict[str, dict[int, tuple[float, str | None]]] = defaultdict(dict)
    host_load: dict[str, float] = defaultdict(float)
    for pod in world.pods.values():
        if pod.node is None:
            continue
        share = min(1.0, pod.load) * gpu_count(pod) / world.units[pod.node]
        node_load[pod.node] += share
        if pod.service is not None and (noise := world.services[pod.service].host_load):
            host_load[pod.node] += share * noise
    by_node: dict[str, list[SimPod]] = defaultdict(list)
    for pod in world.pods.values():
        if pod.node is not None:
            by_node[pod.node].append(pod)
    latencies, even_load_latencies, sensitive_latencies = [], [], []
    serving: dict[str, tuple[str, float, float]] = {}
    exports = world.scenario.inference.serving_metrics
    up = [name for name in world.nodes if name not in world.down]
    even_load = sum(node_load.get(name, 0.0) for name in up) / max(1, len(up))
    node_util = {}
    for name in up:
        load = node_load.get(name, 0.0)
        speed = _speed(load)
        busy = 0.0
        index = 0
        for pod in by_node.get(name, ()):
            count = gpu_count(pod)
            rho = min(0.99, pod.load / speed)
            for _ in range(count):
                per_gpu[name][index] = (rho * 100, pod_key(pod.obj))
                index += 1
            busy += rho * count
            if pod.service is not None and pod.load > 0:
                service = world.services[pod.service]
                # Only the sensitive services feel the twins' host load.
                felt = load + host_load.get(name, 0.0) if service.sensitive else load
                mean_ms, busy_share = _sojourn_ms(pod.load, felt, service)
                latencies.append((mean_ms * P99_FACTOR, pod.load))
                even_load_latencies.append((_sojourn_ms(pod.load, even_load, service)[0] * P99_FACTOR, pod.load))
                if service.sensitive:
                    sensitive_latencies.append((mean_ms * P99_FACTOR, pod.load))
                if exports:
                    waiting = busy_share * busy_share / (1 - busy_share)
                    serving[pod_key(pod.obj)] = ServingState(name, waiting, mean_ms * P95_FACTOR / 1000)
        node_util[name] = 100 * busy / world.units[name]
    world.history.append(node_util)
    world.gpu_util.append(dict(per_gpu))
    if exports:
        world.serving.append(serving)
    return TickSample(node_util, len(world.pending()), latencies, even_load_latencies, sensitive_latencies)


def _speed(node_load: float) -> float:
    return 1 - CONTENTION * max(0.0, node_load - CONTENTION_FROM)


def _latency_speed(node_load: float, service: Service) -> float:
    """The speed a request of this service sees: `_speed` itself for tolerant services."""
    if service.latency_contention == 1.0:
        return _speed(node_load)
    return max(0.05, 1 - CONTENTION * service.latency_contention * max(0.0, node_load - CONTENTION_FROM))


def _sojourn_ms(load: float, node_load: float, service: Service) -> tuple[float, float]:
    """Mean time a request spends in the replica (M/M/1), and the busy share ρ it is served at."""
    speed = _latency_speed(node_load, service)
    rho = min(0.99, load / speed)
    return service.service_time_ms / speed / (1 - rho), rho

