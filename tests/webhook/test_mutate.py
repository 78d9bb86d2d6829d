"""Mutation: the right terms, merged without loosening anything, schema-valid, and idempotent."""

import copy

import kubernetes_validate
import pytest

from scoring.advice.placement import NO_ADVICE, advise, index_fleet
from scoring.heat import Tier
from scoring.policy import PlacementPolicy
from webhook.admit import decide
from webhook.ledger import SteeringLedger
from webhook.review import decode_review
from tests.webhook.helpers import NOW, apply_response, fleet, gpu_pod, node, review
import json

POLICY = PlacementPolicy()
FLEET = fleet(node("hot-1", tier=Tier.HOT, util=95), node("cool-1", util=5), node("cool-2", util=30),
              node("dead-1", tier=Tier.UNHEALTHY))


def admit(pod, *, fleet_heat=FLEET, policy=POLICY, namespace="ml", ledger=None, **review_args):
    request = decode_review(json.dumps(review(pod, namespace=namespace, **review_args)).encode())
    decision = decide(request, index=None if fleet_heat is None else index_fleet(fleet_heat), telemetry_time=NOW, snapshot_age_seconds=3.0,
                      ledger=ledger or SteeringLedger(60), policy=policy, now=NOW)
    return decision, apply_response(pod, decision.review)


def node_terms(pod):
    preferred = pod["spec"].get("affinity", {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    return [(t["weight"], t["preference"]["matchFields"][0]["values"][0]) for t in preferred]


def test_a_replica_pod_gets_cool_node_preferences_a_spread_and_an_explanation():
    decision, pod = admit(gpu_pod())
    assert decision.outcome == "mutated" and decision.reason == "steered"
    assert [name for _, name in node_terms(pod)] == ["cool-1", "cool-2"]
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert spread == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                      "labelSelector": {"matchLabels": {"app": "svc"}}, "matchLabelKeys": ["pod-template-hash"],
                      "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}
    advice = pod["metadata"]["annotations"]["gpu-balancer.io/advice"]
    assert "preferred cool-1(100)" in advice and "hot-1(hot)" in advice and "dead-1(unhealthy)" in advice
    assert "telemetry 3s old" in advice


@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_the_mutated_pod_is_schema_valid(version):
    policy = PlacementPolicy(hard_avoid_hot=True, hard_avoid_min_spare_gpus=0)
    for pod in (gpu_pod(), gpu_pod(labels={"training.kubeflow.org/job-name": "bert"}, owner="PyTorchJob")):
        _, mutated = admit(pod, policy=policy)
        kubernetes_validate.validate(mutated, version, strict=True)


def test_the_patch_touches_only_scheduling_fields_and_the_annotation():
    decision, _ = admit(gpu_pod(), policy=PlacementPolicy(hard_avoid_hot=True, hard_avoid_min_spare_gpus=0))
    import base64
    patch = json.loads(base64.b64decode(decision.review["response"]["patch"]))
    allowed = ("/spec/affinity", "/spec/topologySpreadConstraints", "/metadata/annotations")
    assert patch and all(op["path"].startswith(allowed) for op in patch)


def test_re_admitting_a_mutated_pod_changes_nothing():
    _, once = admit(gpu_pod())
    decision, twice = admit(once)
    assert decision.outcome == "unchanged" and "patch" not in decision.review["response"]
    assert twice == once


def test_hard_avoidance_is_anded_into_every_existing_required_term():
    existing = {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]}
    pod = gpu_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": copy.deepcopy(existing)}})
    _, mutated = admit(pod, policy=PlacementPolicy(hard_avoid_hot=True, hard_avoid_min_spare_gpus=0))
    terms = mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert len(terms) == 2, "no new term: terms are ORed, a new one would loosen the pod"
    for old, new in zip(existing["nodeSelectorTerms"], terms):
        assert new["matchExpressions"] == old["matchExpressions"]
        assert sorted(f["values"][0] for f in new["matchFields"]) == ["dead-1", "hot-1"]
        assert all(f["operator"] == "NotIn" and len(f["values"]) == 1 for f in new["matchFields"])


def test_existing_preferences_tolerations_and_spreads_are_kept():
    own_spread = {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                  "labelSelector": {"matchLabels": {"app": "svc"}}}
    own_preference = {"weight": 7, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}
    pod = gpu_pod(topologySpreadConstraints=[own_spread], tolerations=[{"key": "gpu", "operator": "Exists"}],
                  nodeSelector={"pool": "gpu"},
                  affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own_preference]}})
    _, mutated = admit(pod)
    assert mutated["spec"]["topologySpreadConstraints"] == [own_spread], "its own hostname spread is enough"
    assert mutated["spec"]["tolerations"] == pod["spec"]["tolerations"]
    assert mutated["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert mutated["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0] == \
        own_preference


def test_training_workers_pack_by_clique_then_block_then_zone_and_get_no_spread():
    pod = gpu_pod("8", labels={"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"}, owner="Job")
    _, mutated = admit(pod)
    terms = mutated["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [(t["weight"], t["podAffinityTerm"]["topologyKey"]) for t in terms] == [
        (100, "nvidia.com/gpu.clique"), (50, "network.topology.kubernetes.io/block"), (25, "topology.kubernetes.io/zone")]
    assert all(t["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"}}
               for t in terms)
    assert "topologySpreadConstraints" not in mutated["spec"]


def test_a_replica_served_across_nodes_packs_its_own_group_not_its_sibling_replicas():
    # Llama-3.1-70B at TP 16 as a LeaderWorkerSet: leader and worker of group 1 share its group-key.
    labels = {"leaderworkerset.sigs.k8s.io/name": "llama-70b", "leaderworkerset.sigs.k8s.io/group-index": "1",
              "leaderworkerset.sigs.k8s.io/worker-index": "1",
              "leaderworkerset.sigs.k8s.io/group-key": "3e238779391c8fd563d42eb5af19391bdcd7c130"}
    _, mutated = admit(gpu_pod("8", labels=labels, owner="StatefulSet"))
    terms = mutated["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["podAffinityTerm"]["topologyKey"] == "nvidia.com/gpu.clique"
    assert all(t["podAffinityTerm"]["labelSelector"] == {"matchLabels": {
        "leaderworkerset.sigs.k8s.io/group-key": "3e238779391c8fd563d42eb5af19391bdcd7c130"}} for t in terms)
    assert "topologySpreadConstraints" not in mutated["spec"]


def test_without_telemetry_a_pod_gets_only_telemetry_free_terms():
    decision, mutated = admit(gpu_pod(), fleet_heat=None)
    assert decision.reason == "no-telemetry"
    assert node_terms(mutated) == []
    assert mutated["spec"]["topologySpreadConstraints"]
    assert "no telemetry" in mutated["metadata"]["annotations"]["gpu-balancer.io/advice"]


@pytest.mark.parametrize(("pod", "kwargs", "reason"), [
    (gpu_pod(resource="cpu"), {}, "not-gpu"),
    (gpu_pod(), {"operation": "UPDATE"}, "not-create"),
    (gpu_pod(), {"kind": "Deployment"}, "not-pod"),
    (gpu_pod(), {"namespace": "kube-system"}, "exempt"),
    (gpu_pod("lots"), {}, "bad-quantity"),
])
def test_pods_that_are_not_ours_to_advise_are_admitted_unchanged(pod, kwargs, reason):
    decision, mutated = admit(pod, **kwargs)
    assert decision.review["response"]["allowed"] is True
    assert (decision.outcome, decision.reason) == ("unchanged", reason)
    assert mutated == pod


def test_dry_run_admissions_do_not_promise_load():
    ledger = SteeringLedger(60)
    request = review(gpu_pod())
    request["request"]["dryRun"] = True
    decide(decode_review(json.dumps(request).encode()), index=index_fleet(FLEET), telemetry_time=NOW, snapshot_age_seconds=1,
           ledger=ledger, policy=POLICY, now=NOW)
    assert ledger.pending(NOW) == {}
    admit(gpu_pod(), ledger=ledger)
    assert ledger.pending(NOW) == {"cool-1": 1}


def test_no_advice_object_is_empty():
    assert NO_ADVICE.preferred == () and not NO_ADVICE.hard
    assert advise(index_fleet(FLEET), gpus_requested=100, pending_gpus={}, policy=POLICY).preferred == ()
