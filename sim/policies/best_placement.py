"""A reference that bounds what placement can win: it reads the world's true state, each GPU's
speed and slowdown episodes included, which no exporter shows whole. Pure.

A serving replica's share of its service's traffic does not depend on where it runs (traffic is
split evenly over ready replicas), so where it runs changes only how fast its steps are: the
GPUs it would get, and its node's contention. Each replica goes to the feasible node whose next
free GPUs are fastest now (within 1 %, the spread the exporters' own noise leaves), then to the
coolest of those, booked at once as `coolest-node` books it; training workers as `coolest-node`.
"""

from __future__ import annotations

from sim.llm.gpus import lowest_free
from sim.llm.world import gpu_of_unit, shares_of
from sim.policies.coolest_node import CoolestNode, feasible
from sim.world_state import SimPod, World, gpu_count


class BestPlacement(CoolestNode):
    name = "best-placement"
    about = "the reference: each replica on the node whose free GPUs are fastest now (true state), then the coolest"

    def place(self, world: World, pod: SimPod) -> str | None:
        if pod.service is None or not world.llm.conditions.stretch:
            return super().place(world, pod)
        verdicts = feasible(world, pod)
        stretch = {v.name: _stretch_there(world, pod, v.name) for v in verdicts}
        fastest = min(stretch.values(), default=1.0)
        return self.coolest(world, pod, [v for v in verdicts if stretch[v.name] <= fastest * 1.01])


def _stretch_there(world: World, pod: SimPod, node: str) -> float:
    """The step stretch of the slowest GPU the pod would be given on the node now."""
    held = (world.llm.units_of.get(key, ()) for key in world.nodes[node].pods)
    units = lowest_free(held, world.units[node], gpu_count(pod)) or (0,)
    gpus = world.units[node] // shares_of(world, node)
    return max(world.llm.conditions.step_stretch(node, gpu_of_unit(u, gpus), world.now_seconds) for u in units)
