"""The reference: each pod on the feasible node with the least true load, booked at once. Pure."""

from __future__ import annotations

from collections import Counter

from sim.world_state import SimPod, World, gpu_count
from sim.scheduler import evaluate
from sim.policies.stock import Stock, requested_units


def feasible(world: World, pod: SimPod) -> list:
    """The nodes the pod could bind to, a bound one judged as its controller would make it again."""
    obj = pod.obj
    if "nodeName" in obj["spec"]:
        obj = {**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "nodeName"}}
    return [v for v in evaluate(obj, list(world.nodes.values()), context=world.context) if v.feasible]


class Oracle(Stock):
    """Full knowledge of true current load: each pod goes to the feasible node that stays coolest."""

    name = "oracle"
    about = "coolest-node by its former name"

    def place(self, world: World, pod: SimPod) -> str | None:
        return self.coolest(world, pod, feasible(world, pod))

    def coolest(self, world: World, pod: SimPod, verdicts: list) -> str | None:
        """The coolest of these feasible nodes, the pod's expected load booked at once."""
        if not verdicts:
            return None
        load: Counter = Counter()
        for other in world.pods.values():
            if other.node is not None:
                load[other.node] += min(1.0, other.load) * gpu_count(other)
        if pod.training_job:  # pack a job into the clique its first worker chose, when there is room
            placed = [p.node for p in world.pods.values() if p.training_job == pod.training_job and p.node]
            cliques = {world.nodes[n].labels["nvidia.com/gpu.clique"] for n in placed}
            same = [v for v in verdicts if world.nodes[v.name].labels["nvidia.com/gpu.clique"] in cliques]
            verdicts = same or verdicts
        expected = pod.load or self._share(world, pod)
        chosen = min(verdicts, key=lambda v: ((load[v.name] + expected * gpu_count(pod)) / world.units[v.name],
                                              requested_units(world.nodes[v.name]), v.name)).name
        pod.load = expected  # booked at once, so the next pod of a burst sees it
        return chosen

    @staticmethod
    def _share(world: World, pod: SimPod) -> float:
        if pod.service is None:
            return 0.95
        running = world.running(pod.service)
        return sum(p.load for p in running) / (len(running) + 1) if running else 0.5


class CoolestNode(Oracle):
    """`Oracle` by its honest name: each pod on the feasible node with the least true load."""

    name = "coolest-node"
    about = "the reference: each pod on the feasible node with the least true load, booked at once"
