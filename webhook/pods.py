"""Which pods the webhook leaves alone, and how a pod's replicas are selected. Pure, no I/O."""

from __future__ import annotations

from typing import Any

from scoring.cluster.workloads import as_dict, labels_of, owner_kind
from scoring.policy import PlacementPolicy

ADVICE_ANNOTATION = "gpu-balancer.io/advice"
OPT_OUT_ANNOTATION = "gpu-balancer.io/opt-out"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def exemption(pod: dict[str, Any], namespace: str, policy: PlacementPolicy) -> str | None:
    """Why this pod must be admitted unchanged, or None when it may be advised."""
    metadata = as_dict(pod.get("metadata"))
    annotations = as_dict(metadata.get("annotations"))
    if namespace in ("kube-system", policy.own_namespace):
        return f"namespace {namespace} is never mutated"
    if as_dict(pod.get("spec")).get("nodeName"):
        return "already bound to a node"
    if MIRROR_ANNOTATION in annotations:
        return "mirror pod"
    if annotations.get(OPT_OUT_ANNOTATION) == "true":
        return "opted out"
    if ADVICE_ANNOTATION in annotations:
        return "already advised"
    return None


_PER_POD_LABELS = ("pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
                   "apps.kubernetes.io/pod-index", "batch.kubernetes.io/job-completion-index")
"""Labels that differ between replicas or revisions; a spread selector must not include them."""


def replica_selector(pod: dict[str, Any], policy: PlacementPolicy) -> tuple[dict[str, str], list[str]] | None:
    """(matchLabels, matchLabelKeys) selecting this pod's replicas, or None when it has none."""
    labels = labels_of(pod)
    if owner_kind(pod) == "ReplicaSet":
        selector = {k: v for k, v in labels.items() if k not in _PER_POD_LABELS}
        keys = ["pod-template-hash"] if "pod-template-hash" in labels else []
        return (selector, keys) if selector or keys else None
    if labels.get(policy.workload_label):
        return {policy.workload_label: labels[policy.workload_label]}, []
    return None
