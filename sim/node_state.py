"""One node as the scheduler model holds it, and what is placed on it (mutable: the simulator
binds and evicts). Pure, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scoring.cluster.images import IMAGE_BYTES_ANNOTATION
from scoring.cluster.objects import as_dict, as_list
from sim.pod_requests import pod_requests, quantity

IMAGE_SIZE_ANNOTATION = IMAGE_BYTES_ANNOTATION
"""The size of the pod's image: the scheduler model's ImageLocality reads it where a real node
lists its images in status.images; the descheduler's payback rule reads it as a real one would."""

@dataclass
class NodeState:
    """One node and what is placed on it (mutable: the simulator binds and evicts)."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, float]
    taints: list[dict] = field(default_factory=list)
    unschedulable: bool = False
    requested: Counter = field(default_factory=Counter)
    non_zero_requested: Counter = field(default_factory=Counter)
    """What scoring counts: cpu and memory with the non-zero defaults for containers requesting none."""
    pods: dict[str, dict] = field(default_factory=dict)
    """key "namespace/name" → pod object."""
    affinity_pods: dict[str, dict] = field(default_factory=dict)
    """The pods here with pod affinity or anti-affinity terms of their own."""
    images: dict[str, int] = field(default_factory=dict)
    """Images present on the node (status.images, or pulled by earlier pods) and their sizes in bytes."""
    claimed: dict[str, Counter] = field(default_factory=dict)
    """key → the DRA devices (deviceclass/<class> → count) bound with that pod."""

    @staticmethod
    def from_object(obj: Mapping[str, Any]) -> "NodeState":
        metadata, spec, status = as_dict(obj.get("metadata")), as_dict(obj.get("spec")), as_dict(obj.get("status"))
        labels = {k: str(v) for k, v in as_dict(metadata.get("labels")).items()}
        images = {image_name(str(name)): int(quantity(as_dict(i).get("sizeBytes", 0)))
                  for i in as_list(status.get("images")) for name in as_list(as_dict(i).get("names"))}
        return NodeState(str(metadata.get("name", "")), labels,
                         {k: quantity(v) for k, v in as_dict(status.get("allocatable")).items()},
                         [t for t in as_list(spec.get("taints")) if isinstance(t, dict)], bool(spec.get("unschedulable")),
                         images=images)

    def bind(self, pod: dict, devices: Mapping[str, float] | None = None) -> None:
        """Place the pod here; `devices` are the DRA devices its claims take (`claimed_devices`)."""
        key = pod_key(pod)
        self.pods[key] = pod
        if has_pod_affinity(pod):
            self.affinity_pods[key] = pod
        self.requested.update(pod_requests(pod))
        self.non_zero_requested.update(scored_requests(pod_requests(pod, non_zero=True)))
        self.images.update(images_of(pod))
        if devices:
            self.claimed[key] = Counter(devices)
            self.requested.update(devices)

    def unbind(self, pod: dict) -> None:
        key = pod_key(pod)
        if self.pods.pop(key, None) is not None:
            self.affinity_pods.pop(key, None)
            self.requested.subtract(pod_requests(pod))
            self.non_zero_requested.subtract(scored_requests(pod_requests(pod, non_zero=True)))
            self.requested.subtract(self.claimed.pop(key, Counter()))


KUBELET_LISTED_IMAGES = 50
"""The kubelet reports at most this many images in node.status.images (--node-status-max-images),
the largest first."""


def status_images(node: NodeState) -> list[dict]:
    """The node's images as its kubelet reports them in `status.images`."""
    largest = sorted(node.images.items(), key=lambda item: (-item[1], item[0]))[:KUBELET_LISTED_IMAGES]
    return [{"names": [name], "sizeBytes": size} for name, size in largest]


def scored_requests(requests: Counter) -> Counter:
    """What scoring counts of a pod's requests: cpu and memory."""
    return Counter({r: requests[r] for r in ("cpu", "memory")})


def image_name(name: str) -> str:
    """As the scheduler keys images: a name without tag or digest means ':latest'."""
    return name if name.rfind(":") > name.rfind("/") else f"{name}:latest"


def images_of(pod: Mapping[str, Any]) -> dict[str, int]:
    size = int(as_dict(as_dict(pod.get("metadata")).get("annotations")).get(IMAGE_SIZE_ANNOTATION, 0) or 0)
    if not size:
        return {}
    return {image_name(str(as_dict(c).get("image", ""))): size for c in as_list(as_dict(pod.get("spec")).get("containers"))}


def pod_key(pod: Mapping[str, Any]) -> str:
    metadata = as_dict(pod.get("metadata"))
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def has_pod_affinity(pod: Mapping[str, Any]) -> bool:
    affinity = as_dict(as_dict(pod.get("spec")).get("affinity"))
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))
