"""A new pod's time to ready on each node, and what that time is worth to placement. Pure, no I/O.

A replica serves only once its image is pulled (where the node does not hold it), its weights are
loaded and its server has started: minutes on a node without the image, under a minute on one with
it (issue 46's evidence: a Llama-3.1-8B serving image took 5–6 min to pull and 3–4 min to extract,
BentoML). So a node is worth its headroom times the share of the next `horizon` seconds the pod
would serve there: a cool node that must pull can be worth less than a warm one that holds the image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scoring.cluster.feasibility import NodeFacts
from scoring.cluster.images import (IMAGE_BYTES_ANNOTATION, MODEL_ANNOTATION, MODEL_BYTES_ANNOTATION, annotated_bytes,
                                    caches_model, pod_images)
from scoring.cluster.objects import as_dict
from scoring.policy import BalancerPolicy, DeschedulerPolicy, PlacementPolicy


@dataclass(frozen=True, slots=True)
class StartupCosts:
    """How fast a node readies a pod: the descheduler's payback rule prices moves with the same
    rates, and its policy is where they are set (`startup_costs`)."""

    image_pull_bytes_per_second: float = DeschedulerPolicy.image_pull_bytes_per_second
    weight_load_bytes_per_second: float = DeschedulerPolicy.weight_load_bytes_per_second
    startup_seconds: float = DeschedulerPolicy.startup_seconds
    remote_weight_bytes_per_second: float = DeschedulerPolicy.remote_weight_load_bytes_per_second
    """For a pod that names its model (`gpu-balancer.io/model`), on a node whose cache lacks it."""
    unknown_image_bytes: float = 10e9
    """An image no node lists and the pod does not size: vLLM's serving image is ~10 GB (assumption)."""
    horizon_seconds: float = PlacementPolicy.ready_horizon_seconds
    """The span a placement is judged over (`placement.readyHorizonSeconds`)."""


@dataclass(frozen=True, slots=True)
class PodStartup:
    """What a pod must fetch before it serves."""

    images: tuple[tuple[str, float], ...]
    """(normal image name, bytes), bytes from the pod's annotation, any node's status.images, or
    the default."""
    model_bytes: float
    model: tuple[str, str] | None = None
    """(namespace, Fluid Dataset) of the weights where the pod names them: a node that caches the
    dataset loads them at the local rate, any other from the remote store."""


@dataclass(frozen=True, slots=True)
class ReadyEstimate:
    seconds: float
    missing_bytes: float
    remote_weights: bool = False
    """The pod names its model and the node does not cache it."""

    def describe(self) -> str:
        """e.g. "~38 s (image cached)" or "~1,313 s (pull 5.2 GB, weights remote)"."""
        fetched = "image cached" if not self.missing_bytes else f"pull {self.missing_bytes / 1e9:.1f} GB"
        return f"~{self.seconds:,.0f} s ({fetched}{', weights remote' if self.remote_weights else ''})"


def pod_startup(pod: Mapping, sizes: Mapping[str, int], costs: StartupCosts) -> PodStartup:
    """The pod's images and model, sized from its annotations, else from `sizes` (what nodes list)."""
    annotations = as_dict(as_dict(pod.get("metadata")).get("annotations"))
    images = pod_images(pod)
    annotated = annotated_bytes(annotations, IMAGE_BYTES_ANNOTATION)
    sized = tuple((name, float(sizes[name]) if name in sizes else
                   annotated if annotated is not None and len(images) == 1 else costs.unknown_image_bytes)
                  for name in images)
    dataset = annotations.get(MODEL_ANNOTATION)
    model = (str(as_dict(pod.get("metadata")).get("namespace", "")), dataset) \
        if isinstance(dataset, str) and dataset else None
    return PodStartup(sized, annotated_bytes(annotations, MODEL_BYTES_ANNOTATION) or 0.0, model)


def time_to_ready(startup: PodStartup, node: NodeFacts | None, costs: StartupCosts) -> ReadyEstimate:
    """The pod's time to ready on the node (None: a node that holds nothing)."""
    images, labels = (node.images, node.labels) if node is not None else ({}, {})
    missing = sum(size for name, size in startup.images if name not in images)
    remote = startup.model is not None and not caches_model(labels, *startup.model)
    rate = costs.remote_weight_bytes_per_second if remote else costs.weight_load_bytes_per_second
    seconds = missing / costs.image_pull_bytes_per_second + startup.model_bytes / rate + costs.startup_seconds
    return ReadyEstimate(seconds, missing, remote)


MIN_SHARE = 0.01
"""A node that readies the pod only past the horizon keeps a sliver of its headroom, so that
among such nodes the coolest still ranks first and the pod still gets advice."""


def serving_share(estimate: ReadyEstimate, costs: StartupCosts) -> float:
    """The share of the horizon the pod would serve, `MIN_SHARE`–1: what a node's headroom is
    multiplied by."""
    return max(MIN_SHARE, 1.0 - estimate.seconds / costs.horizon_seconds)


URGENT_READY_STEP_SECONDS = 30.0
"""Urgent, nodes ready within the same step of this many seconds rank by headroom: a scrape
interval, finer than any estimate here is sure of (assumption)."""


def by_time_to_ready(ranked: list[tuple[float, int, str]], startup: PodStartup, nodes: Mapping[str, NodeFacts],
                     costs: StartupCosts, k: int, urgent: bool = False
                     ) -> tuple[list[tuple[float, int, str]], tuple[tuple[str, ReadyEstimate], ...]]:
    """The K best of `ranked` (headroom, free GPUs, node) once each headroom is multiplied by the
    node's serving share, best first (ties keep their order), and each kept node's estimate.
    `urgent` (the pod's service is queueing): the soonest ready first, then that score."""
    estimates = [time_to_ready(startup, nodes.get(name), costs) for _, _, name in ranked]
    scored = sorted(((score * serving_share(e, costs), free, name, e)
                     for (score, free, name), e in zip(ranked, estimates)),
                    key=lambda entry: (urgent and entry[3].seconds // URGENT_READY_STEP_SECONDS, -entry[0]))[:k]
    return [(score, free, name) for score, free, name, _ in scored], tuple((name, e) for _, _, name, e in scored)


def startup_costs(policy: BalancerPolicy) -> StartupCosts | None:
    """The policy's costs (the descheduler's rates, the placement's horizon); None where the
    time-to-ready ranking is off."""
    d, horizon = policy.descheduler, policy.placement.ready_horizon_seconds
    if horizon <= 0:
        return None
    return StartupCosts(d.image_pull_bytes_per_second, d.weight_load_bytes_per_second, d.startup_seconds,
                        d.remote_weight_load_bytes_per_second, horizon_seconds=horizon)
