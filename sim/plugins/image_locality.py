"""ImageLocality: prefers nodes that already hold the pod's images, scaled by how widely each
image is spread over the cluster. Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from scoring.cluster.objects import as_dict, as_list
from sim.framework import MAX_SCORE, Base, Cycle
from sim.node_state import NodeState, image_name

IMAGE_MIN_BYTES, IMAGE_MAX_BYTES = 23 * 2**20, 1000 * 2**20
"""The plugin's thresholds: below the minimum a cached image scores 0, above the maximum (per
container) 100. Model-serving images are many GB, so a node that already has one scores 100."""


class ImageLocality(Base):
    name = "ImageLocality"

    def pre_score(self, cycle: Cycle, feasible: Sequence[NodeState]) -> None:
        spec = cycle.spec
        containers = as_list(spec.get("initContainers")) + as_list(spec.get("containers"))
        images = [image_name(str(as_dict(c).get("image", ""))) for c in containers]
        holders: Counter = Counter(image for n in cycle.nodes for image in n.images)
        cycle.state[self.name] = images, holders

    def score(self, cycle: Cycle, node: NodeState) -> int:
        images, holders = cycle.state[self.name]
        total = sum(int(node.images[image] * holders[image] / len(cycle.nodes))
                    for image in images if image in node.images)
        ceiling = IMAGE_MAX_BYTES * len(images)
        total = min(max(total, IMAGE_MIN_BYTES), ceiling)
        return MAX_SCORE * (total - IMAGE_MIN_BYTES) // (ceiling - IMAGE_MIN_BYTES) if ceiling > IMAGE_MIN_BYTES else 0
