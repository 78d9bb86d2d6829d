"""One rule for what a node's GPUs hold: the cluster state the webhook's watch feeds and the
descheduler's cluster model read the same objects to the same free GPUs, the scheduler's."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from descheduler.cluster import cluster_from_objects
from scoring.cluster.cluster_state import ClusterState
from scoring.cluster.holdings import held_per_node, holds_units
from scoring.policy import PlacementPolicy

POLICY = PlacementPolicy()
NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)


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

    state, released = ClusterState(POLICY), []
    state.replace("nodes", NODES, NOW)
    state.replace("pods", [p for p in PODS if p["spec"]["nodeName"]], NOW)  # the watch lists bound pods only
    assert {node: state.view(NOW).free(node) for node in expected} == expected

    # A pod's end arrives as an event; the pods a relist no longer holds are released.
    state = ClusterState(POLICY, on_release=released.append)
    state.replace("nodes", NODES, NOW)
    state.replace("pods", [p for p in PODS if p["spec"]["nodeName"]], NOW)
    state.apply("pods", "MODIFIED", _pod("running", "node-a", 2, "Succeeded"), NOW)
    state.replace("pods", [_pod("bound-pending", "node-a", 1, "Pending")], NOW)
    assert state.view(NOW).free("node-a") == {"nvidia.com/gpu": 7}
    assert sorted(released) == ["ns/node-lost", "ns/running", "ns/stopping"]


def test_a_pod_created_on_its_node_was_bound_when_it_was_created_not_when_it_is_listed():
    """A pod created with `spec.nodeName` has no PodScheduled condition. Dated at the list, a
    webhook that restarted booked its GPUs again for the settle time, on top of the telemetry that
    already showed them: a warm node with room fell out of the advice on the real control plane."""
    bindings = []
    state = ClusterState(POLICY, on_binding=bindings.append)
    direct = _pod("direct", "node-a", 2, "Running")
    direct["metadata"]["creationTimestamp"] = "2026-12-04T23:59:00Z"  # a minute before NOW
    scheduled = _pod("scheduled", "node-b", 1, "Running")
    scheduled["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                          "lastTransitionTime": "2026-12-04T23:59:30Z"}]
    undated = _pod("undated", "node-b", 1, "Running")
    state.replace("nodes", NODES, NOW)
    state.replace("pods", [direct, scheduled, undated], NOW)
    assert {b.pod: b.at.isoformat() for b in bindings} == {
        "ns/direct": "2026-12-04T23:59:00+00:00", "ns/scheduled": "2026-12-04T23:59:30+00:00",
        "ns/undated": NOW.isoformat()}
