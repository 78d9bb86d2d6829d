"""Eviction planning: sources, victims, protected pods, capacity, limits and the ledger."""

from datetime import timedelta

import pytest

from descheduler.cluster import SYSTEM_CRITICAL_PRIORITY
from descheduler.filters import why_not_evictable
from descheduler.ledger import EvictionRecord, LedgerState
from descheduler.plan import Limit, plan_evictions
from scoring.policy import DeschedulerPolicy
from tests.descheduler.helpers import NOW, cluster, fleet, heat, node_obj, pod_obj, snapshot, window

POLICY = DeschedulerPolicy()
SUSTAINED = (92.0, 85.0, 1.0)


def base_cluster(*hot_pods, cool_free=True):
    pods = list(hot_pods) or [pod_obj(f"p{i}", "hot-a", owner_name=f"svc{i}-5d4f") for i in range(4)]
    if not cool_free:
        pods += [pod_obj(f"filler{i}", "cool-b", gpus=8, owner_name=f"f{i}-5d4f") for i in range(1)]
    return cluster(node_obj("hot-a"), node_obj("cool-b"), *pods)


def plan(cluster_, *, usage=None, stats=None, fleet_=None, ledger=LedgerState(), policy=POLICY):
    usage = usage or {"hot-a": [("inference", f"p{i}", 1, 100.0 - 5 * i) for i in range(4)]}
    return plan_evictions(fleet=fleet_ or fleet(heat("hot-a", 92), heat("cool-b", 10)), snapshot=snapshot(usage),
                          windows={"utilisation": stats if stats is not None else window(hot_a=SUSTAINED, cool_b=(10.0, 8.0, 1.0))},
                          cluster=cluster_, ledger=ledger, policy=policy, now=NOW)


def test_a_sustained_hot_node_sheds_the_pod_that_best_covers_its_excess():
    # Excess: 92 - 80 = 12 points of node mean. Shares of an 8-GPU node: 12.5, 12.25, 7.5, 5.
    usage = {"hot-a": [("inference", f"p{i}", 1, u) for i, u in enumerate((100.0, 98.0, 60.0, 40.0))]}
    result = plan(base_cluster(), usage=usage)
    assert result.hot_nodes == ("hot-a",)
    assert [(e.pod, e.node) for e in result.evictions] == [("p1", "hot-a")], "the smallest pod that suffices"
    assert "room on cool-b" in result.evictions[0].reason


@pytest.mark.parametrize(("stats", "why", "note"), [
    (window(hot_a=(92.0, 40.0, 1.0)), "a spike: the low quantile is cool", "92% mean, 40% low over 10 min"),
    (window(hot_a=(60.0, 55.0, 1.0)), "mean over the window below the threshold", "sustained needs ≥ 80% mean"),
    (window(hot_a=(92.0, 85.0, 0.5)), "too few samples cover the window", "5.0 of 10 min of history"),
    ({}, "no window data at all", "no utilisation history yet"),
])
def test_heat_that_did_not_last_never_evicts(stats, why, note):
    result = plan(base_cluster(), stats=stats)
    assert result.evictions == () and result.hot_nodes == (), why
    # The node `status` shows hot is named, with why it is not sustained-hot yet.
    assert any(n.startswith("hot-a is hot now but not sustained-hot") and note in n for n in result.notes), result.notes


def test_a_node_that_is_not_hot_now_is_not_a_source():
    result = plan(base_cluster(), fleet_=fleet(heat("hot-a", 70), heat("cool-b", 10)))
    assert result.evictions == ()


def test_no_cool_capacity_means_no_eviction_and_the_plan_says_so():
    result = plan(base_cluster(cool_free=False))
    assert result.evictions == ()
    assert any("no node below" in note for note in result.notes)


def test_a_mig_pod_needs_a_cool_node_with_its_profile_free():
    mig = "nvidia.com/mig-3g.40gb"
    objects = [node_obj("hot-a"), node_obj("cool-b"), node_obj("cool-mig", gpus=2, resource=mig),
               pod_obj("p-mig", "hot-a", resource=mig, owner_name="mig-5d4f")]
    result = plan(cluster(*objects), usage={"hot-a": [("inference", "p-mig", 1, 100.0)]},
                  fleet_=fleet(heat("hot-a", 92), heat("cool-b", 10), heat("cool-mig", 10)),
                  stats=window(hot_a=SUSTAINED))
    assert [e.reason.rsplit(" ", 1)[1] for e in result.evictions] == ["cool-mig"]


@pytest.mark.parametrize(("pod", "reason"), [
    (pod_obj("x", "n", owner="DaemonSet"), "DaemonSet"),
    (pod_obj("x", "n", owner=None), "no controller"),
    (pod_obj("x", "n", annotations={"kubernetes.io/config.mirror": "abc"}), "mirror"),
    (pod_obj("x", "n", deleting=True), "terminating"),
    (pod_obj("x", "n", phase="Pending"), "not running"),
    (pod_obj("x", "n", priority=SYSTEM_CRITICAL_PRIORITY), "system-critical"),
    (pod_obj("x", "n", volumes=[{"name": "scratch", "emptyDir": {}}]), "local storage"),
    (pod_obj("x", "n", labels={"training.kubeflow.org/job-name": "bert"}, owner="PyTorchJob"), "distributed job"),
    (pod_obj("x", "n", annotations={"gpu-balancer.io/opt-out": "true"}), "opted out"),
    (pod_obj("x", "n", resource="cpu"), "no GPU"),
])
def test_protected_pods_are_never_evicted_and_each_no_has_a_reason(pod, reason):
    (info,) = cluster(pod).pods
    assert reason in why_not_evictable(info, POLICY)


def test_a_training_member_annotated_evictable_may_go_and_local_storage_is_configurable():
    (member,) = cluster(pod_obj("x", "n", labels={"jobset.sigs.k8s.io/jobset-name": "j"}, owner="Job",
                                annotations={"gpu-balancer.io/evictable": "true"})).pods
    assert why_not_evictable(member, POLICY) is None
    (scratch,) = cluster(pod_obj("x", "n", volumes=[{"name": "s", "emptyDir": {}}])).pods
    assert why_not_evictable(scratch, DeschedulerPolicy(evict_pods_with_local_storage=True)) is None


def test_protected_pods_on_a_hot_node_are_reported_as_skipped():
    result = plan(base_cluster(pod_obj("ds", "hot-a", owner="DaemonSet"), pod_obj("p0", "hot-a")),
                  usage={"hot-a": [("inference", "ds", 1, 100.0), ("inference", "p0", 1, 100.0)]})
    assert [e.pod for e in result.evictions] == ["p0"]
    assert ("ds", "DaemonSet pod") in {(s.pod, s.reason) for s in result.skipped}


@pytest.mark.parametrize(("policy", "evicted", "limit"), [
    (DeschedulerPolicy(max_evictions_per_run=1), 1, Limit.PER_RUN),
    (DeschedulerPolicy(max_evictions_per_node=2), 2, Limit.PER_NODE),
    (DeschedulerPolicy(max_evictions_per_namespace=1), 1, Limit.PER_NAMESPACE),
])
def test_limits_are_typed_reported_outcomes(policy, evicted, limit):
    # A very hot node: every pod is needed to bring it down, so only the limit stops the plan.
    usage = {"hot-a": [("inference", f"p{i}", 1, 30.0) for i in range(4)]}
    result = plan(base_cluster(), usage=usage, fleet_=fleet(heat("hot-a", 99), heat("cool-b", 5)), policy=policy)
    assert len(result.evictions) == evicted
    assert any(s.limit is limit for s in result.skipped)


def test_victims_prefer_lower_priority_then_more_replicas():
    pods = [pod_obj("important", "hot-a", priority=1000, owner_name="a-5d4f"),
            pod_obj("batchy", "hot-a", priority=0, owner_name="b-5d4f"),
            pod_obj("b-twin", "cool-b", priority=0, owner_name="b-5d4f")]
    usage = {"hot-a": [("inference", "important", 1, 100.0), ("inference", "batchy", 1, 100.0)]}
    result = plan(cluster(node_obj("hot-a"), node_obj("cool-b"), *pods), usage=usage)
    assert [e.pod for e in result.evictions] == ["batchy"]


def test_a_recently_evicted_workload_cools_down_and_backs_off():
    workload = "inference/Deployment/svc1"
    once = LedgerState((EvictionRecord(workload, "inference", "old", "hot-a", NOW - timedelta(minutes=10)),))
    result = plan(base_cluster(), ledger=once)
    assert "p1" not in [e.pod for e in result.evictions]
    assert any(s.pod == "p1" and "cooldown" in s.reason for s in result.skipped)
    assert once.cooldown_until(workload, NOW + timedelta(minutes=25), POLICY) is None
    twice = LedgerState(once.records + (EvictionRecord(workload, "inference", "old2", "hot-a", NOW),))
    assert twice.cooldown_until(workload, NOW + timedelta(minutes=50), POLICY) is not None, "doubled"


def test_the_ledger_round_trips_and_forgets_old_records():
    state = LedgerState((EvictionRecord("w", "ns", "p", "n", NOW - timedelta(days=2)),
                         EvictionRecord("w", "ns", "q", "n", NOW)))
    kept = state.with_evictions([], NOW, POLICY)
    assert [r.pod for r in kept.records] == ["q"]
    assert LedgerState.from_json(kept.to_json()) == kept
    with pytest.raises(ValueError):
        LedgerState.from_json("{broken")


def test_only_pods_in_opted_in_namespaces_are_evicted():
    from descheduler.cluster import namespace_object
    from scoring.policy import OptInPolicy

    objects = (namespace_object("inference", OptInPolicy()), namespace_object("research"),
               node_obj("hot-a"), node_obj("cool-b"),
               pod_obj("svc-1", "hot-a"), pod_obj("lab-1", "hot-a", namespace="research", owner_name="lab-5d4f"))
    result = plan(cluster(*objects), usage={"hot-a": [("inference", "svc-1", 1, 95.0), ("research", "lab-1", 1, 95.0)]})
    assert [e.pod for e in result.evictions] == ["svc-1"]
    assert ("lab-1", "namespace research has not opted in") in [(s.pod, s.reason) for s in result.skipped]


def test_without_namespace_objects_no_pod_is_evictable_and_the_reason_says_what_to_list():
    from descheduler.cluster import cluster_from_objects
    from scoring.policy import PlacementPolicy

    bare = cluster_from_objects((node_obj("hot-a"), node_obj("cool-b"), pod_obj("svc-1", "hot-a")), PlacementPolicy())
    result = plan(bare, usage={"hot-a": [("inference", "svc-1", 1, 95.0)]})
    assert result.evictions == ()
    assert "kubectl get namespaces,nodes,pods" in result.skipped[0].reason


def test_a_pod_is_evicted_only_when_a_cool_node_it_can_use_has_room():
    pinned = pod_obj("p0", "hot-a", owner_name="svc0-5d4f")
    pinned["spec"]["nodeSelector"] = {"pool": "h100"}
    l4 = node_obj("cool-b")
    l4["metadata"]["labels"] = {"pool": "l4"}
    usage = {"hot-a": [("inference", "p0", 1, 100.0)]}
    skipped = plan(cluster(node_obj("hot-a"), l4, pinned), usage=usage)
    assert skipped.evictions == ()
    assert "no cool node the pod can use" in skipped.skipped[0].reason and "1 with room" in skipped.skipped[0].reason
    h100 = node_obj("cool-b")
    h100["metadata"]["labels"] = {"pool": "h100"}
    h100["spec"] = {"taints": [{"key": "reserved", "value": "x", "effect": "NoSchedule"}]}
    assert plan(cluster(node_obj("hot-a"), h100, pinned), usage=usage).evictions == (), "an untolerated taint"
    pinned["spec"]["tolerations"] = [{"key": "reserved", "operator": "Exists"}]
    moved = plan(cluster(node_obj("hot-a"), h100, pinned), usage=usage)
    assert [(e.pod, e.node) for e in moved.evictions] == [("p0", "hot-a")]
