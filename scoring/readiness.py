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

from scoring.feasibility import NodeFacts
from scoring.images import IMAGE_BYTES_ANNOTATION, MODEL_BYTES_ANNOTATION, annotated_bytes, pod_images
from scoring.objects import as_dict
from scoring.policy import BalancerPolicy, DeschedulerPolicy, PlacementPolicy


@dataclass(frozen=True, slots=True)
class StartupCosts:
    """How fast a node readies a pod: the descheduler's payback rule prices moves with the same
    rates, and its policy is where they are set (`startup_costs`)."""

    image_pull_bytes_per_second: float = DeschedulerPolicy.image_pull_bytes_per_second
    weight_load_bytes_per_second: float = DeschedulerPolicy.weight_load_bytes_per_second
    startup_seconds: float = DeschedulerPolicy.startup_seconds
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


@dataclass(frozen=True, slots=True)
class ReadyEstimate:
    seconds: float
    missing_bytes: float

    def describe(self) -> str:
        """e.g. "~38 s (image cached)" or "~113 s (pull 15.0 GB)"."""
        fetched = "image cached" if not self.missing_bytes else f"pull {self.missing_bytes / 1e9:.1f} GB"
        return f"~{self.seconds:.0f} s ({fetched})"


def pod_startup(pod: Mapping, sizes: Mapping[str, int], costs: StartupCosts) -> PodStartup:
    """The pod's images and model, sized from its annotations, else from `sizes` (what nodes list)."""
    annotations = as_dict(as_dict(pod.get("metadata")).get("annotations"))
    images = pod_images(pod)
    annotated = annotated_bytes(annotations, IMAGE_BYTES_ANNOTATION)
    sized = tuple((name, float(sizes[name]) if name in sizes else
                   annotated if annotated is not None and len(images) == 1 else costs.unknown_image_bytes)
                  for name in images)
    return PodStartup(sized, annotated_bytes(annotations, MODEL_BYTES_ANNOTATION) or 0.0)


def time_to_ready(startup: PodStartup, node_images: Mapping[str, int], costs: StartupCosts) -> ReadyEstimate:
    missing = sum(size for name, size in startup.images if name not in node_images)
    seconds = (missing / costs.image_pull_bytes_per_second + startup.model_bytes / costs.weight_load_bytes_per_second
               + costs.startup_seconds)
    return ReadyEstimate(seconds, missing)


MIN_SHARE = 0.01
"""A node that readies the pod only past the horizon keeps a sliver of its headroom, so that
among such nodes the coolest still ranks first and the pod still gets advice."""


def serving_share(estimate: ReadyEstimate, costs: StartupCosts) -> float:
    """The share of the horizon the pod would serve, `MIN_SHARE`–1: what a node's headroom is
    multiplied by."""
    return max(MIN_SHARE, 1.0 - estimate.seconds / costs.horizon_seconds)


def by_time_to_ready(ranked: list[tuple[float, int, str]], startup: PodStartup, nodes: Mapping[str, NodeFacts],
                     costs: StartupCosts, k: int) -> tuple[list[tuple[float, int, str]], tuple[tuple[str, ReadyEstimate], ...]]:
    """The K best of `ranked` (headroom, free GPUs, node) once each headroom is multiplied by the
    node's serving share, best first (ties keep their order), and each kept node's estimate."""
    estimates = [time_to_ready(startup, nodes[name].images if name in nodes else {}, costs) for _, _, name in ranked]
    scored = sorted(((score * serving_share(e, costs), free, name, e)
                     for (score, free, name), e in zip(ranked, estimates)), key=lambda entry: -entry[0])[:k]
    return [(score, free, name) for score, free, name, _ in scored], tuple((name, e) for _, _, name, e in scored)


def startup_costs(policy: BalancerPolicy) -> StartupCosts | None:
    """The policy's costs (the descheduler's rates, the placement's horizon); None where the
    time-to-ready ranking is off."""
    d, horizon = policy.descheduler, policy.placement.ready_horizon_seconds
    if horizon <= 0:
        return None
    return StartupCosts(d.image_pull_bytes_per_second, d.weight_load_bytes_per_second, d.startup_seconds,
                        horizon_seconds=horizon)
