"""One rule for what a node's GPUs hold: the webhook's cluster view (fed by its list/watch) and
the descheduler's cluster model read the same objects to the same free GPUs, the scheduler's."""

from __future__ import annotations

from collections import Counter

from kubernetes import client

from descheduler.cluster import cluster_from_objects
from scoring.holdings import held_per_node, holds_units
from scoring.policy import PlacementPolicy
from webhook.cluster_watch import ClusterWatch

POLICY = PlacementPolicy()


def _node(name: str, gpus: int) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"}}}


def _pod(name: str, node: str, gpus: int, phase: str, *, terminating: bool = False) -> dict:
    metadata = {"name": name, "namespace": "ns", **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if terminating else {})}
    return {"kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


NODES = [_node("node-a", 8), _node("node-b", 8)]
PODS = [_pod("running", "node-a", 2, "Running"), _pod("bound-pending", "node-a", 1, "Pending"),
        _pod("node-lost", "node-a", 1, "Unknown"), _pod("stopping", "node-a", 1, "Running", terminating=True),
        _pod("done", "node-a", 2, "Succeeded"), _pod("crashed", "node-b", 1, "Failed"),
        _pod("unbound", "", 4, "Pending")]


def test_a_pod_holds_its_units_from_binding_until_it_ends():
    assert [holds_units(p["status"]["phase"], p["spec"]["nodeName"]) for p in PODS] == [
        True, True, True, True, False, False, False]
    assert held_per_node([("node-a", (("nvidia.com/gpu", 2), ("deviceclass/gpu.nvidia.com", 1)))],
                         {"node-a": {"deviceclass/gpu.nvidia.com": 2}}) == {
        "node-a": Counter({"nvidia.com/gpu": 2, "deviceclass/gpu.nvidia.com": 2})}, "a claimed device is the claim's"


def test_the_webhook_view_and_the_descheduler_model_count_the_same_free_gpus():
    expected = {"node-a": {"nvidia.com/gpu": 8 - 2 - 1 - 1 - 1}, "node-b": {"nvidia.com/gpu": 8}}
    descheduler = cluster_from_objects(NODES + PODS, POLICY).free()
    assert {node: dict(free) for node, free in descheduler.items()} == expected

    watch = ClusterWatch(client.ApiClient(), POLICY)
    watch.on_list("nodes", NODES)
    watch.on_list("pods", [p for p in PODS if p["spec"]["nodeName"]])  # the watch lists bound pods only
    for kind in ("resourceslices", "resourceclaims", "resourceclaimtemplates"):
        watch.on_list(kind, [])
    view = watch.freeze()
    assert view is not None
    assert {node: view.free(node) for node in expected} == expected
