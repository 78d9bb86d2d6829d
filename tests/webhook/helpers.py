"""Builders for pods, reviews and fleets used across the webhook tests."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

from scoring.heat import FleetHeat, NodeHeat, Tier
from webhook.review import patched

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def gpu_pod(gpus="1", *, name="", labels=None, owner="ReplicaSet", resource="nvidia.com/gpu", **spec_extra):
    metadata = {"generateName": "svc-", "namespace": "ml", "labels": labels if labels is not None else
                {"app": "svc", "pod-template-hash": "5d4f"}}
    if name:
        metadata["name"] = name
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "svc-5d4f",
                                        "uid": "0b7c", "controller": True}]
    spec = {"containers": [{"name": "server", "image": "registry.example/server:1",
                            "resources": {"limits": {resource: gpus}}}]}
    spec.update(spec_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(pod, *, uid="e911857d-c318-11e8-bbad-025000000001", operation="CREATE", namespace="ml", kind="Pod"):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace, "operation": operation, "object": pod, "dryRun": False}}


def node(name, *, tier=Tier.COOL, gpus=8, allocated=0, util=10.0, memory=0.1):
    return NodeHeat(name, gpus, allocated, util, util, memory, 50.0, 300.0, tier, ())


def fleet(*nodes, stale=False):
    return FleetHeat(NOW, stale, 3.0, tuple(nodes))


def apply_response(pod, answer):
    """The pod as the API server would see it after applying the webhook's patch."""
    return patched(copy.deepcopy(pod), answer)
