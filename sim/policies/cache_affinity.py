"""The peer that uses the cache: stock, with the node affinity Fluid injects into a pod that mounts
a cached dataset. Pure.

Fluid's webhook prefers the nodes that cache the pod's dataset (labelled
`fluid.io/s-<namespace>-<dataset>`), then their zone, then their region: its tiered locality
(`tiered-conf.yaml` in Fluid's chart; "Pod scheduling base on runtime tiered locality" in its
docs), weighted 100 / 50 / 20 as issue 46 gives them. Every simulated node is in one region, so the
region term would weigh every node alike and is left out. ImageLocality, in stock's profile
already, scores the nodes that hold the image.
"""

from __future__ import annotations

from scoring.cluster.images import MODEL_ANNOTATION, fluid_cache_label
from sim.policies.stock import Stock
from sim.world_state import SimPod, World

ZONE = "topology.kubernetes.io/zone"
SAME_NODE_WEIGHT, SAME_ZONE_WEIGHT = 100, 50


class CacheAffinity(Stock):
    name = "cache-affinity"
    about = "stock plus the node affinity Fluid injects: the model cache's nodes 100, their zone 50"

    def place(self, world: World, pod: SimPod) -> str | None:
        metadata, spec = pod.obj["metadata"], pod.obj["spec"]
        dataset = metadata.get("annotations", {}).get(MODEL_ANNOTATION)
        if dataset and "affinity" not in spec:
            label = fluid_cache_label(metadata["namespace"], dataset)
            zones = sorted({n.labels[ZONE] for n in world.nodes.values() if n.labels.get(label) == "true"})
            terms = [{"weight": SAME_NODE_WEIGHT, "preference": {"matchExpressions": [
                {"key": label, "operator": "In", "values": ["true"]}]}}]
            if zones:
                terms.append({"weight": SAME_ZONE_WEIGHT, "preference": {"matchExpressions": [
                    {"key": ZONE, "operator": "In", "values": zones}]}})
            spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}
        return super().place(world, pod)
