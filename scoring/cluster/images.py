"""Container images as placement needs them: which a node holds (its `status.images`), which a pod
runs, and how big each is. Pure, no I/O.

Names are compared in one normal form, `registry/repository:tag` or `registry/repository@digest`:
the kubelet reports what the container runtime calls an image (containerd: `docker.io/vllm/
vllm-openai:v0.8.5`, plus its digest name), while a pod spec says `vllm/vllm-openai:v0.8.5`.
kube-scheduler's ImageLocality compares them after adding `:latest` only, so it misses Docker Hub
images written short; a time-to-ready estimate should not.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

from scoring.cluster.objects import as_dict, as_list

IMAGE_BYTES_ANNOTATION = "gpu-balancer.io/image-bytes"
"""Bytes of the pod's container image, where its owner says: a new node pulls them first."""
MODEL_BYTES_ANNOTATION = "gpu-balancer.io/model-bytes"
"""Bytes of model weights the pod loads into GPU memory before it serves."""
MODEL_ANNOTATION = "gpu-balancer.io/model"
"""The Fluid Dataset that holds the pod's weights, in the pod's namespace: a node labelled
`fluid.io/s-<namespace>-<dataset>` (Fluid's label on the nodes that cache a dataset) loads them from
its local cache, any other from the remote store."""


def fluid_cache_label(namespace: str, dataset: str) -> str:
    """The label Fluid puts on every node that caches a dataset's data."""
    return f"fluid.io/s-{namespace}-{dataset}"


def caches_model(labels: Mapping[str, str], namespace: str, dataset: str) -> bool:
    """Whether Fluid says the node caches the dataset (its label's value is "true")."""
    return labels.get(fluid_cache_label(namespace, dataset)) == "true"

MIN_KEPT_IMAGE_BYTES = 1 << 30
"""A node's images smaller than this are not kept: they pull in seconds and change no ranking,
while GPU serving images are several GB (vLLM's is ~10 GB) and the kubelet lists up to 50 a node."""


def normal_image(name: str) -> str:
    """`name` as `registry/repository:tag` (or `@digest`): Docker Hub's registry and `library/`
    made explicit, `:latest` where no tag or digest is given."""
    name = name.strip()
    if not name:
        return ""
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        first, rest = "docker.io", name
    if first in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        first = "docker.io"
        if "/" not in rest:
            rest = f"library/{rest}"
    if "@" not in rest and ":" not in rest.rsplit("/", 1)[-1]:
        rest += ":latest"
    return f"{first}/{rest}"


def large_images(entries: object, min_bytes: int = MIN_KEPT_IMAGE_BYTES) -> list[dict[str, Any]]:
    """The entries of a `status.images` list that name an image of at least `min_bytes`."""
    return [entry for entry in as_list(entries) if isinstance(size := as_dict(entry).get("sizeBytes"), int)
            and not isinstance(size, bool) and size >= min_bytes]


def node_images(node: Mapping[str, Any], min_bytes: int = MIN_KEPT_IMAGE_BYTES) -> Mapping[str, int]:
    """A Node object's `status.images` of at least `min_bytes`, by each name the runtime gives
    (tag and digest names alike), names interned: every node repeats the same few."""
    images: dict[str, int] = {}
    for entry in large_images(as_dict(node.get("status")).get("images"), min_bytes):
        size = entry["sizeBytes"]
        for name in as_list(entry.get("names")):
            if isinstance(name, str) and (normal := normal_image(name)):
                images[sys.intern(normal)] = size
    return images


def pod_images(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The images of the pod's containers and init containers, in normal form, each once."""
    spec = as_dict(pod.get("spec"))
    names = (as_dict(c).get("image") for key in ("initContainers", "containers") for c in as_list(spec.get(key)))
    return tuple(dict.fromkeys(normal for name in names if isinstance(name, str) and (normal := normal_image(name))))


def annotated_bytes(annotations: Mapping[str, Any], key: str) -> float | None:
    """An annotation's byte count; None when absent or not a number (a typo costs the default, not a crash)."""
    try:
        value = float(annotations[key])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None
