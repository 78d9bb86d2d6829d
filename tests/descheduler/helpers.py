"""Kubernetes objects for descheduler tests, shaped as `kubectl get -o json` prints them."""

from __future__ import annotations

from datetime import datetime, timezone

from descheduler.cluster import cluster_from_objects, namespace_object
from scoring.heat import FleetHeat, NodeHeat, Tier
from scoring.ingest.telemetry import WindowStats
from scoring.ingest.telemetry import ClusterSnapshot, NodeTelemetry, PodUsage
from scoring.policy import OptInPolicy, PlacementPolicy

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def node_obj(name, gpus=8, resource="nvidia.com/gpu", unschedulable=False):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti", resource: str(gpus)}}}


def pod_obj(name, node, *, namespace="inference", gpus=1, owner="ReplicaSet", owner_name="svc-5d4f", phase="Running",
            priority=0, labels=None, annotations=None, volumes=None, resource="nvidia.com/gpu", deleting=False):
    metadata = {"name": name, "namespace": namespace,
                "labels": labels if labels is not None else {"app": "svc", "pod-template-hash": "5d4f"},
                "annotations": annotations or {}}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": owner_name, "uid": "u",
                                        "controller": True}]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    spec = {"nodeName": node, "priority": priority, "containers": [
        {"name": "c", "image": "x", "resources": {"limits": {resource: str(gpus)}}}]}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def cluster(*objects):
    """The cluster of these objects; every pod's namespace is listed as opted in unless the
    objects list Namespaces themselves."""
    if not any(obj["kind"] == "Namespace" for obj in objects):
        names = sorted({obj["metadata"]["namespace"] for obj in objects if obj["kind"] == "Pod"})
        objects = (*(namespace_object(name, OptInPolicy()) for name in names), *objects)
    return cluster_from_objects(objects, PlacementPolicy())


def heat(name, util, *, tier=None, gpus=8, allocated=0):
    tier = tier or (Tier.HOT if util >= 80 else Tier.WARM if util >= 50 else Tier.COOL)
    return NodeHeat(name, gpus, allocated, util, util, 0.3, 60.0, 500.0, tier, ())


def fleet(*nodes):
    return FleetHeat(NOW, False, 5.0, tuple(nodes))


def snapshot(usage: dict[str, list[tuple[str, str, int, float]]], gpus=8):
    """node → [(namespace, pod, gpus, util)]"""
    return ClusterSnapshot(NOW, tuple(NodeTelemetry(name, gpus, pods=tuple(PodUsage(*p) for p in pods))
                                      for name, pods in usage.items()), newest_sample_at=NOW)


def window(**stats):
    return {name.replace("_", "-"): WindowStats(*values) for name, values in stats.items()}
