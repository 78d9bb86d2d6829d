"""The discrete-time cluster simulation: workloads, telemetry lag, scheduling, descheduling. Pure
given its seed (no I/O); it calls the same placement and eviction code production runs.

Every inference replica is a continuous-batching LLM server; what a tick serves, and how fast,
is `sim.llm.world`'s (README, "Simulating your fleet").
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from dataclasses import replace

from descheduler.cluster import namespace_object
from scoring.cluster.claims import book_from_objects, class_of, class_resource
from scoring.cluster.images import MODEL_ANNOTATION, MODEL_BYTES_ANNOTATION, fluid_cache_label
from scoring.policy import OptInPolicy, PlacementPolicy
from sim.cluster_context import ClusterContext
from sim.llm import world as serving_world
from sim.llm.gpus import draw_conditions, lowest_free
from sim.llm.host import draw_layout
from sim.llm import failures
from sim.llm import startup
from sim.node_state import IMAGE_SIZE_ANNOTATION, NodeState, pod_key, status_images
from sim.plugins.dynamic_resources import claimed_devices
from sim.llm import topology
from sim.llm.hardware import DEFAULT_MODELS, model_named, sharded_wider
from sim.llm.profile import RequestMix
from sim.scenario import DEFAULT_PRODUCT, PoolShape, Scenario, service_model, service_pool_groups
from sim.world_state import BURST, AutoscalerSync, Service, SimPod, TickSample, World, demand_now, gpu_count

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
        labels = {"nvidia.com/gpu.product": DEFAULT_PRODUCT, **pool.labels, **pool.sharing_labels, **_mig_labels(pool),
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
    sv = scenario.serving
    conversation = RequestMix(sv.prompt_tokens, sv.output_tokens, sv.length_sigma)
    raw_by_group: dict[str | None, float] = defaultdict(float)
    for s, r in enumerate(raw):
        raw_by_group[placement[s].name if placement[s] else None] += r
    services = {}
    for s, r in enumerate(raw):
        group = placement[s].name if placement[s] else None
        demand = r * inf.mean_demand_fraction * capacity[group] / max(raw_by_group[group], 1e-9)
        minimum = 1 if demand < 0.3 else 2
        services[f"svc-{s:02d}"] = Service(
            name=f"svc-{s:02d}", demand=demand, phase=rng.uniform(-1, 1), min_replicas=minimum,
            max_replicas=max(minimum, math.ceil(demand * (1 + inf.diurnal_amplitude) * BURST / inf.max_replica_util)),
            cpu=rng.choice((4, 8, 16)),
            memory_gib=rng.choice((32, 64, 128)), template_hash=f"{rng.getrandbits(32):08x}"[:9], pool=placement[s],
            mix=conversation)
    models = _service_models(scenario)
    sensitive_mix = RequestMix(inf.sensitive_prompt_tokens, inf.sensitive_output_tokens, sv.length_sigma)
    for s, service in enumerate(services.values()):
        service.model = models.get(service.pool.name if service.pool else None, DEFAULT_MODELS[0])
        if s in sensitive:
            service.mix, service.sensitive = sensitive_mix, True
        elif s - 1 in sensitive:
            service.host_load = inf.twin_host_load
    _shape_replicas(scenario, services, seed)
    for service in services.values():
        if service.pool is not None and service.pool.mig_profile:
            # A MIG instance is a slice of a GPU; its server gets a slice of the host too.
            service.cpu = max(1, service.cpu // service.pool.instances_per_gpu)
            service.memory_gib = max(4, service.memory_gib // service.pool.instances_per_gpu)
    world = World(scenario, rng, nodes, services, units=units, seed=seed,
                  context=ClusterContext(profile=scenario.scheduler))
    if world.dra:
        _add_templates(world)
    gpus = {name: units[name] // pools[name].shares_per_gpu for name in nodes}
    world.llm.conditions = draw_conditions(scenario.conditions.degraded_gpus, gpus, scenario.hours, seed)
    world.llm.host = draw_layout(scenario.conditions.cpu_neighbours, list(nodes), list(services), seed)
    world.llm.failures = failures.draw_plan(scenario.conditions.failures, gpus, scenario.hours, seed)
    for name in world.llm.host.limited_services:
        services[name].cpu_limited = True
    _lay_out_cache(world)
    return world


def _shape_replicas(scenario: Scenario, services: dict[str, Service], seed: int) -> None:
    """Each service's replica shape: one pod, or (`serving.tp8Share`, `disaggregatedShare`, drawn
    from an rng of their own so fleets without them replay exactly) two pods serving its model at
    twice its tensor parallelism. Demand is in GPUs, so a replica of k GPUs takes 1 / k of it."""
    sv, inf = scenario.serving, scenario.inference
    rng = random.Random(seed * 53 + 11)
    for service in services.values():
        if sv.tp8_share or sv.disaggregated_share:
            draw = rng.random()
            kind = topology.LWS if draw < sv.tp8_share else \
                topology.DISAGGREGATED if draw < sv.tp8_share + sv.disaggregated_share else ""
            if kind:
                service.replica_kind = kind
                service.model = str(getattr(sharded_wider(model_named(service.model)), "name", service.model))
        gpus = model_named(service.model).tensor_parallel
        if gpus > 1:
            service.demand /= gpus
            service.min_replicas = 1 if service.demand < 0.3 else 2
            service.max_replicas = max(service.min_replicas, math.ceil(
                service.demand * (1 + inf.diurnal_amplitude) * BURST / inf.max_replica_util))


def _lay_out_cache(world: World) -> None:
    """`conditions.coldStart`: the model cache's nodes get Fluid's label for each model served,
    and every service the shared image (or its own) at the condition's size."""
    shape = world.scenario.conditions.cold_start
    world.llm.cache = cache = startup.draw_cache(shape, list(world.nodes), list(world.services), world.seed)
    if not cache.enabled:
        return
    datasets = {startup.dataset_name(s.model) for s in world.services.values()}
    for name in cache.model_nodes:
        world.nodes[name].labels.update({fluid_cache_label(NAMESPACE, d): "true" for d in sorted(datasets)})
    for service in world.services.values():
        service.image_bytes = int(shape.image_bytes)


def _mig_labels(pool: PoolShape) -> dict[str, str]:
    """What GPU feature discovery labels a node of MIG instances with under the mixed strategy
    (`nvidia.com/mig-<profile>.count`): how the serving world knows the instances' size."""
    return {f"nvidia.com/mig-{pool.mig_profile}.count": str(pool.units_per_node)} if pool.mig_profile else {}


def _service_models(scenario: Scenario) -> dict[str | None, str]:
    """Pool name (None: the services pinned to none) → the model its services serve."""
    return {pool: service_model(scenario, pools) for pool, pools in service_pool_groups(scenario).items()}


def unit_resource(scenario: Scenario, pool: PoolShape) -> str:
    """The resource a pool's units are counted in: the device plugin's, or the DRA class's as
    `scoring.cluster.claims` counts a ResourceSlice's devices."""
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
    """A new replica of the service: its pod, and for a multi-pod replica its other pod too,
    labelled as their controllers label them (`_group_pods`)."""
    service.serial += 1
    name = f"{service.name}-{service.template_hash}-{service.serial:05d}"
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
             "name": f"{service.name}-{service.template_hash}", "uid": service.name}
    labels = {"app": service.name, "pod-template-hash": service.template_hash}
    pod = _replica_pod(world, service, name, labels, owner)
    if service.replica_kind:
        _group_pods(world, service, pod)
    return pod


def _replica_pod(world: World, service: Service, name: str, labels: dict[str, str], owner: dict) -> SimPod:
    """One of a replica's pods, asking for its share of the replica's GPUs."""
    model = model_named(service.model)
    gpus = model.tensor_parallel // service.pods_per_replica
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NAMESPACE,
        "annotations": {IMAGE_SIZE_ANNOTATION: str(service.image_bytes)},
        "labels": labels, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "server", "image": _image(world, service), "resources": {
            "requests": {"cpu": str(service.cpu), "memory": f"{service.memory_gib}Gi"},
            "limits": {service.pool.resource if service.pool else "nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Pending"}}
    if service.cpu_limited:
        obj["spec"]["containers"][0]["resources"]["limits"]["cpu"] = str(service.cpu)
    # What the replica loads before it serves, as its owner would annotate it.
    obj["metadata"]["annotations"][MODEL_BYTES_ANNOTATION] = str(int(model.weight_bytes))
    if world.llm.cache.enabled:
        obj["metadata"]["annotations"][MODEL_ANNOTATION] = startup.dataset_name(service.model)
    if service.pool is not None:
        obj["spec"]["nodeSelector"] = dict(service.pool.labels)
        if service.pool.taints:
            obj["spec"]["tolerations"] = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
                                          for t in service.pool.taints]
    pod = SimPod(obj, service.name, created_tick=world.tick)
    if world.dra:
        _claim_gpus(obj, service.pool.device_class if service.pool else "gpu.nvidia.com", gpus)
        pod.claimed_units = gpus
    world.pods[pod_key(obj)] = pod
    return pod


LWS_LABEL = "leaderworkerset.sigs.k8s.io/"
SERVING_GROUP_LABEL = "gpu-balancer.io/serving-group"


def _group_pods(world: World, service: Service, leader: SimPod) -> None:
    """The replica's second pod. A LeaderWorkerSet labels its group's leader and worker with the
    group's `group-key` (a hash) and says the group's size; the worker's StatefulSet is the
    group's own. A prefill/decode pair is two Deployments (llm-d's prefill and decode), the pair
    named by one `gpu-balancer.io/serving-group` label."""
    meta = leader.obj["metadata"]
    name = meta["name"]
    if service.replica_kind == topology.LWS:
        group = {f"{LWS_LABEL}name": service.name,
                 f"{LWS_LABEL}group-key": hashlib.sha1(f"{NAMESPACE}/{name}".encode()).hexdigest()}
        meta["labels"].update(group, **{f"{LWS_LABEL}worker-index": "0"})
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "controller": True,
                                    "name": service.name, "uid": service.name}]
        follower = _replica_pod(world, service, f"{name}-1", {**group, f"{LWS_LABEL}worker-index": "1"},
                                {"apiVersion": "apps/v1", "kind": "StatefulSet", "controller": True,
                                 "name": name, "uid": name})
        for obj in (leader.obj, follower.obj):
            obj["metadata"]["annotations"][f"{LWS_LABEL}size"] = "2"
    else:
        meta["labels"].update({SERVING_GROUP_LABEL: name, "llm-d.ai/role": "prefill"})
        decode = f"{service.name}-decode"
        follower = _replica_pod(world, service, f"{decode}-{service.template_hash}-{service.serial:05d}",
                                {"app": decode, "pod-template-hash": service.template_hash,
                                 SERVING_GROUP_LABEL: name, "llm-d.ai/role": "decode"},
                                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                 "name": f"{decode}-{service.template_hash}", "uid": decode})
    follower.service, follower.leader = None, pod_key(leader.obj)
    leader.followers = (pod_key(follower.obj),)


def _image(world: World, service: Service) -> str:
    return startup.image_of(world.llm.cache, service.name) if world.llm.cache.enabled \
        else f"registry.example/{service.name}:1"


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
    """The pod gone, and with it the rest of its replica (a group goes as one)."""
    for key in pod.followers:
        if (follower := world.pods.get(key)) is not None:
            delete_pod(world, follower)
    if pod.node is not None and pod.node in world.nodes:
        world.nodes[pod.node].unbind(pod.obj)
    world.llm.units_of.pop(pod_key(pod.obj), None)
    world.pods.pop(pod_key(pod.obj), None)


def bind(world: World, pod: SimPod, node: str) -> None:
    pod.node = node
    pod.obj["spec"]["nodeName"] = node
    pod.obj["status"]["phase"] = "Running"
    if pod.service is not None or pod.leader is not None:
        wait = serving_world.ready_seconds(world, pod, node)
        # The fleet at the first tick was serving before the simulated window opened.
        pod.ready_at = world.now_seconds + wait if world.tick else 0.0
    world.nodes[node].bind(pod.obj, claimed_devices(pod.obj, world.context) if world.dra else None)
    if world.llm.cache.enabled:
        startup.started(world.llm.cache, node, pod.obj, world.nodes[node].images, world.nodes[node].pods,
                        world.now_seconds)
    world.llm.units_of[pod_key(pod.obj)] = lowest_free(taken_units(world, node), world.units[node], gpu_count(pod))


def cluster_objects(world: World) -> list[dict]:
    """The world as `kubectl get namespaces,nodes,pods -A -o json` would list it: its namespaces
    (all opted in), nodes, each service's HorizontalPodAutoscaler and bound pods; on a DRA fleet
    also `resourceslices,resourceclaims,resourceclaimtemplates`."""
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
    return objects + [_autoscaler(world, s) for s in world.services.values()] + bound


def _autoscaler(world: World, service: Service) -> dict:
    """The service's HorizontalPodAutoscaler as the API server lists it: its target utilisation as
    a Pods metric, and what it found at its last sync (no reading while no replica is ready)."""
    metric = {"name": "gpu_busy_share"}
    sync = service.autoscaled
    status: dict = {"currentReplicas": sync.replicas if sync else 0, "desiredReplicas": sync.desired if sync else 0}
    if sync is not None and sync.load is not None:
        status["currentMetrics"] = [{"type": "Pods", "pods": {
            "metric": metric, "current": {"averageValue": f"{round(sync.load * 1000)}m"}}}]
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": service.name, "namespace": NAMESPACE},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": service.name},
                     "minReplicas": service.min_replicas, "maxReplicas": service.max_replicas,
                     "metrics": [{"type": "Pods", "pods": {"metric": metric, "target": {
                         "type": "AverageValue",
                         "averageValue": f"{round(world.scenario.inference.target_util * 1000)}m"}}}]},
            "status": status}


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
            demand = demand_now(world, service)
            ready = sum(1 for p in existing if serving_world.is_ready(world, p))
            desired = min(service.max_replicas, max(service.min_replicas, math.ceil(demand / inf.target_util)))
            service.autoscaled = AutoscalerSync(len(existing), desired, demand / ready if ready else None)
            _scale(world, service, existing, desired)
        if rng.random() < inf.rollouts_per_service_per_day / (24 * ticks_per_hour):
            service.template_hash = f"{rng.getrandbits(32):08x}"[:9]
            if startup.upgrades(world.llm.cache):
                world.llm.cache.tags[service.name] += 1
        stale = [p for p in running if p.obj["metadata"]["labels"]["pod-template-hash"] != service.template_hash]
        if stale:
            _roll_when_ready(world, service, stale)
    ev = sc.events
    if ev.burst_pods_at_hour >= 0 and tick == int(ev.burst_pods_at_hour * ticks_per_hour):
        target = max(world.services.values(), key=lambda s: s.demand)
        target.max_replicas += ev.burst_pods
        target.demand *= 1 + ev.burst_pods * inf.target_util / max(target.demand, 1e-9) * 0.5
        for _ in range(ev.burst_pods):
            service_pod(world, target)
    if ev.node_failures_at_hour >= 0 and tick == int(ev.node_failures_at_hour * ticks_per_hour):
        for name in rng.sample(sorted(world.nodes), ev.failed_nodes):
            lose_node(world, name, tick + int(ev.failure_duration_hours * ticks_per_hour))
    if world.llm.failures.enabled:
        _fail(world)
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


def lose_node(world: World, name: str, until_tick: int) -> None:
    """A node gone until `until_tick`: unschedulable, its series vanish, its pods made again."""
    world.down[name] = max(until_tick, world.down.get(name, 0))
    world.nodes[name].unschedulable = True
    for pod in [p for p in world.pods.values() if p.node == name]:
        recreate(world, pod)


def _fail(world: World) -> None:
    """`conditions.failures` for one tick: GPUs that fail now lose their pods and leave the node's
    allocatable until repaired; nodes lost now go as `lose_node` takes them."""
    plan, now, dt = world.llm.failures, world.now_seconds, world.scenario.tick_seconds
    gpu_failures, losses = failures.starting(plan, now - dt, now)
    for failure in gpu_failures:
        if (failure.node, failure.gpu) in plan.failed or failure.node in world.down:
            continue
        node, shares = world.nodes[failure.node], serving_world.shares_of(world, failure.node)
        plan.failed[failure.node, failure.gpu] = failure
        node.allocatable[_gpu_resource(node)] -= shares
        units = set(failures.units_of_gpu(failure.gpu, world.units[failure.node] // shares, shares))
        for pod in [p for p in world.pods.values() if p.node == failure.node
                    and units & set(world.llm.units_of.get(pod_key(p.obj), ()))]:
            recreate(world, pod)
    for (name, gpu), failure in list(plan.failed.items()):
        if failure.until_seconds <= now:
            del plan.failed[name, gpu]
            world.nodes[name].allocatable[_gpu_resource(world.nodes[name])] += serving_world.shares_of(world, name)
    for loss in losses:
        lose_node(world, loss.node, world.tick + math.ceil((loss.until_seconds - now) / dt))


def _gpu_resource(node: NodeState) -> str:
    return next(r for r in node.allocatable if r.startswith("nvidia.com/"))


def taken_units(world: World, node: str) -> list[tuple[int, ...]]:
    """The node's units its pods hold, and those on failed GPUs: the device plugin gives neither."""
    held = [world.llm.units_of.get(key, ()) for key in world.nodes[node].pods]
    shares = serving_world.shares_of(world, node)
    return held + [world.llm.failures.failed_units(node, world.units[node] // shares, shares)]


def _scale(world: World, service: Service, pods: list[SimPod], replicas: int) -> None:
    """A HorizontalPodAutoscaler setting the Deployment's replicas: new pods of the current
    template, or the ReplicaSet controller's lowest-ranked pods removed (`controller.ActivePods`:
    unbound before bound, not ready before ready, ready for less time first, newest first). During
    a rollout the one surge pod `maxSurge: 1` allows stays, and a scale-down takes the old
    ReplicaSet's pods first (the Deployment scales its ReplicaSets in proportion to their sizes,
    and the old one is the larger; all of it from the old: a simplification)."""
    current = service.template_hash
    rolling = any(p.obj["metadata"]["labels"]["pod-template-hash"] != current for p in pods)
    for _ in range(replicas - len(pods)):
        service_pod(world, service)
    excess = len(pods) - replicas - (1 if rolling else 0)
    ranked = sorted(pods, key=lambda p: (p.obj["metadata"]["labels"]["pod-template-hash"] == current,
                                         p.node is not None, serving_world.is_ready(world, p), -p.ready_at,
                                         -int(p.obj["metadata"]["name"].rsplit("-", 1)[1])))  # newest: highest serial
    for pod in ranked[:max(0, excess)]:
        delete_pod(world, pod)


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
    """An evicted or lost pod: its controller makes a new one (inference) or restarts it (training);
    a multi-pod replica is made again whole, as a LeaderWorkerSet restarts its group."""
    if world.pods.get(pod_key(pod.obj)) is not pod:
        return  # gone already, with the rest of its replica
    if pod.leader is not None:
        if (leader := world.pods.get(pod.leader)) is not None:
            recreate(world, leader)
        return
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
    """Route traffic to ready replicas and serve it (`sim.llm.world.measure`)."""
    return serving_world.measure(world)
