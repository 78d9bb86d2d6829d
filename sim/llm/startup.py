"""Cold start in the serving world (`conditions.coldStart`): what a new replica waits for before it
serves, term by term, where the model cache lives, and each node's image disk under the kubelet's
image garbage collection. Pure, no I/O.

A replica's wait is its image's pull and extraction where the node's disk lacks the image, its
weights from the node-local model cache or from the remote store, and its engine's start. The
nodes of the cache carry Fluid's dataset label, which is what a peer that uses the cache and
gpu-balancer read; nothing else says where the weights are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from sim.node_state import image_name
from sim.scenario import ColdStart

IMAGE_REPOSITORY = "registry.example/vllm-openai"
"""The one serving image of a fleet that shares it; a rollout that upgrades the engine moves a
service to its next tag."""


@dataclass(frozen=True)
class StartupTerms:
    """Seconds of each step a new replica waits for, in order."""

    pull: float
    extract: float
    weights: float
    start: float

    @property
    def total(self) -> float:
        return self.pull + self.extract + self.weights + self.start


@dataclass
class CacheLayout:
    """Where the model cache is and which image tag each service runs (mutable: rollouts upgrade)."""

    shape: ColdStart = field(default_factory=ColdStart)
    model_nodes: frozenset[str] = frozenset()
    tags: dict[str, int] = field(default_factory=dict)
    """Service → its image's tag number (1 at the start)."""
    last_used: dict[tuple[str, str], float] = field(default_factory=dict)
    """(node, image) → when a pod last started with it there: the kubelet's image GC removes the
    least recently used first."""
    rng: np.random.Generator | None = None
    """The condition's own draws (which rollouts change the tag), so it leaves every other as it was."""

    @property
    def enabled(self) -> bool:
        return self.shape.enabled


def draw_cache(shape: ColdStart, nodes: list[str], services: list[str], seed: int) -> CacheLayout:
    """The model cache's node group and every service on its first tag, from a generator of the
    condition's own."""
    if not shape.enabled:
        return CacheLayout(shape)
    rng = np.random.default_rng([seed, 4602])
    cached = frozenset(n for n in sorted(nodes) if rng.random() < shape.model_cache_node_share)
    return CacheLayout(shape, cached, {s: 1 for s in services}, rng=rng)


def dataset_name(model: str) -> str:
    """The Fluid Dataset that holds a model's weights: its name as a DNS label ("llama-3-1-8b")."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")


def image_of(layout: CacheLayout, service: str) -> str:
    """The image the service's pods run now."""
    tag = layout.tags.get(service, 1)
    return f"{IMAGE_REPOSITORY}:v{tag}" if layout.shape.shared_image else f"registry.example/{service}:v{tag}"


def upgrades(layout: CacheLayout) -> bool:
    """Whether a rollout that has just begun moves its service to a new tag (its own draw)."""
    return layout.rng is not None and layout.rng.random() < layout.shape.new_tag_share


def terms(layout: CacheLayout, image: str, node_images: dict[str, int], node: str, weight_bytes: float,
          start_seconds: float) -> StartupTerms:
    """A replica's wait on the node: pull and extract only where the disk lacks the image, the
    weights at the cache's rate on the cache's nodes and the remote store's elsewhere."""
    shape = layout.shape
    fetched = 0.0 if image_name(image) in node_images else shape.image_bytes
    rate = shape.cached_weight_bytes_per_second if node in layout.model_nodes else shape.remote_weight_bytes_per_second
    return StartupTerms(fetched / shape.pull_bytes_per_second, fetched / shape.extract_bytes_per_second,
                        weight_bytes / rate, start_seconds)


def collect_images(layout: CacheLayout, node: str, images: dict[str, int], pods: dict[str, dict]) -> None:
    """The kubelet's image GC on one node: past the high mark of the image disk, unused images go,
    least recently used first, until the disk is at the low mark or only images in use are left."""
    shape = layout.shape
    used = sum(images.values())
    if used <= shape.image_disk_bytes * shape.image_gc_high_percent / 100:
        return
    in_use = {image_name(str(c.get("image", ""))) for pod in pods.values() for c in pod["spec"]["containers"]}
    unused = sorted((layout.last_used.get((node, image), float("-inf")), image) for image in images if image not in in_use)
    for _, image in unused:
        if used <= shape.image_disk_bytes * shape.image_gc_low_percent / 100:
            break
        used -= images.pop(image)
        layout.last_used.pop((node, image), None)


def started(layout: CacheLayout, node: str, pod: dict, images: dict[str, int], pods: dict[str, dict],
            now: float) -> None:
    """A pod has started on the node with its images there: mark them used, then collect."""
    for container in pod["spec"]["containers"]:
        layout.last_used[node, image_name(str(container.get("image", "")))] = now
    collect_images(layout, node, images, pods)
