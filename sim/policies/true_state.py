"""A reference that reads the world's true state, each GPU's speed and slowdown episodes, each
PCIe switch's traffic, each node's CPU neighbours, image disk and model cache included, which no
exporter shows whole, and places by it. Pure.

It was called `best-placement` while it bounded every policy on every seed of the condition
scenarios; on `llm-pcie-neighbours`, where the condition moves latency less than placement's other
effects (one seed's queue decides most), policies beat it on 28 of 48 policy-seeds, so it is no
bound there and is named for what it reads, not for what it wins.

A serving replica's share of its service's traffic does not depend on where it runs (traffic is
split evenly over ready replicas), so where it runs changes only how soon it serves and how fast
its steps are: the GPUs it would get, their PCIe switches' traffic, and its node's host. Where
replicas start cold, a replica of a service whose ready replicas are past the queue's onset goes
to the nodes where it would serve soonest (within a tick), and any other outside the model cache,
which is kept for those. Of those nodes each replica goes to the feasible one where its steps
would be fastest now (within 1 %, the spread the exporters' own noise leaves), then to the coolest
of those, booked at once as `coolest-node` books it; training workers as `coolest-node`. Every
descheduler pass it moves a replica off a GPU that has turned slow (`DEGRADED_STRETCH`) where a
faster GPU is free and the time it stays slow (known: the episode's end, or the rest of the run
for a GPU slow by nature) pays for a start from nothing on the speed it gains. Where topology is a
condition, a replica's second pod joins its first one's NVLink domain where that has room.
"""

from __future__ import annotations

from sim.engine import recreate, taken_units
from sim.llm import host, topology
from sim.llm.gpus import DEGRADED_STRETCH, lowest_free
from sim.llm.world import (gpu_of_unit, held_stretch, is_ready, model_of, pcie_stretch_at, shares_of, start_seconds,
                           units_held)
from sim.policies.coolest_node import CoolestNode, feasible
from sim.world_state import SimPod, World, demand_now, gpu_count

HOST_CORES_PER_REPLICA = 2.0
"""As `contention.hostCoresPerReplica`: what a replica adds to its node's busy cores."""


class TrueState(CoolestNode):
    name = "true-state"
    about = "the reference: each replica where its steps are fastest now by the true state, moved off GPUs that turn slow"

    def place(self, world: World, pod: SimPod) -> str | None:
        if pod.leader is not None and world.scenario.conditions.topology.enabled:
            return self._beside_leader(world, pod)
        if pod.service is None or not (world.llm.conditions.stretch or world.llm.host.enabled or world.llm.cache.enabled
                                       or world.scenario.conditions.pcie_neighbours.enabled):
            return super().place(world, pod)
        verdicts = feasible(world, pod)
        if world.llm.cache.enabled and verdicts:
            if not _queueing(world, pod.service):  # keep the cache's fast starts for replicas that are needed now
                verdicts = [v for v in verdicts if v.name not in world.llm.cache.model_nodes] or verdicts
            else:
                waits = {v.name: start_seconds(world, pod, v.name) for v in verdicts}
                soonest = min(waits.values())
                verdicts = [v for v in verdicts if waits[v.name] <= soonest + world.scenario.tick_seconds]
        stretch = {v.name: _stretch_there(world, pod, v.name) for v in verdicts}
        fastest = min(stretch.values(), default=1.0)
        return self.coolest(world, pod, [v for v in verdicts if stretch[v.name] <= fastest * 1.01])

    def _beside_leader(self, world: World, pod: SimPod) -> str | None:
        """A replica's second pod in its first pod's NVLink domain where that has room (the
        first placed as any replica: the domain's room for both is not looked ahead to)."""
        leader = world.pods.get(pod.leader or "")
        verdicts = feasible(world, pod)
        if leader is not None and leader.node is not None:
            home = topology.domain_of(leader.node, world.nodes[leader.node].labels)
            verdicts = [v for v in verdicts if topology.domain_of(v.name, world.nodes[v.name].labels) == home] \
                or verdicts
        return self.coolest(world, pod, verdicts)

    def deschedule(self, world: World) -> None:
        conditions, now = world.llm.conditions, world.now_seconds
        if not conditions.stretch:
            return
        moved: set[str] = set()
        for pod in [p for p in world.pods.values() if p.service is not None and is_ready(world, p)]:
            if pod.service in moved:
                continue  # one replica of a service at a time: its peers carry its traffic meanwhile
            held = units_held(world, pod)
            own = held_stretch(world, pod.node, held)
            if own < DEGRADED_STRETCH:
                continue
            gpus = world.units[pod.node] // shares_of(world, pod.node)
            episode = max(conditions.episode_left(pod.node, gpu_of_unit(u, gpus), now) for u in held)
            stays_slow = episode or world.scenario.hours * 3600 - now
            elsewhere = min((_stretch_there(world, pod, v.name) for v in feasible(world, pod) if v.name != pod.node),
                            default=own)
            if stays_slow * (1 - elsewhere / own) > _fresh_start_seconds(world, pod):
                recreate(world, pod)
                world.evictions += 1
                moved.add(pod.service)


def _stretch_there(world: World, pod: SimPod, node: str) -> float:
    """How much longer the pod's steps would take on the node now than on its model's fastest GPU
    on an idle host: the slowest GPU it would be given there, times its host's interference and its
    PCIe neighbours' traffic now."""
    units = lowest_free(taken_units(world, node), world.units[node], gpu_count(pod)) or (0,)
    gpu = held_stretch(world, node, units) * (1 + pcie_stretch_at(world, node, units))
    layout = world.llm.host
    if not layout.enabled:
        return gpu
    replicas = sum(1 for key in world.nodes[node].pods if world.pods.get(key) and world.pods[key].service)
    busy, _ = host.host_busy(layout.shape, world.nodes[node].allocatable.get("cpu", 1), node in layout.batch_nodes,
                             HOST_CORES_PER_REPLICA * (replicas + 1))
    return gpu * (1 + world.scenario.contention.scale * host.interference(layout.shape, busy))


def _queueing(world: World, service: str) -> bool:
    """Whether the service's ready replicas carry more than the load at which a replica starts to
    queue (`inference.maxReplicaUtil`), from its true demand now."""
    if not world.tick:
        return False  # the fleet serving when the window opens
    ready = sum(1 for p in world.pods.values() if p.service == service and is_ready(world, p))
    return demand_now(world, world.services[service]) >= world.scenario.inference.max_replica_util * max(ready, 1e-9)


def _fresh_start_seconds(world: World, pod: SimPod) -> float:
    """A replica's start where nothing is cached: its image, its weights, the engine's start."""
    sv = world.scenario.serving
    return (world.services[pod.service].image_bytes / sv.image_pull_bytes_per_second
            + model_of(world, pod.service).weight_bytes / sv.weight_load_bytes_per_second + sv.startup_seconds)
