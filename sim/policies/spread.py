"""A hostname topology spread on every inference Deployment: what platform teams write. Pure."""

from __future__ import annotations

from sim.world_state import SimPod, World
from sim.policies.stock import Stock


class Spread(Stock):
    """The stock scheduler with what a platform team writes on every inference Deployment: a
    hostname `topologySpreadConstraints`, maxSkew 1, ScheduleAnyway, over the app's pods."""

    name = "spread"
    about = "stock plus a hostname topology spread on every inference Deployment"

    def place(self, world: World, pod: SimPod) -> str | None:
        spec = pod.obj["spec"]
        if pod.service is not None and "topologySpreadConstraints" not in spec:
            spec["topologySpreadConstraints"] = [{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": pod.service}}}]
        return super().place(world, pod)
