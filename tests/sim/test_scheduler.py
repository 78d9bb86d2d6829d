"""The scheduler model, pinned to the kube-scheduler facts in docs/DESIGN.md."""

import random

import pytest

from sim.node_state import NodeState
from sim.scheduler import choose, evaluate


def node(name, *, cpu="96", gpus="8", labels=None, taints=None, unschedulable=False):
    return NodeState.from_object({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                                  "spec": {"taints": taints or [], "unschedulable": unschedulable},
                                  "status": {"allocatable": {"cpu": cpu, "memory": "512Gi", "nvidia.com/gpu": gpus}}})


def pod(name="p", gpus="1", cpu="4", labels=None, **spec):
    body = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "16Gi"},
                                                       "limits": {"nvidia.com/gpu": gpus}}}]}
    body.update(spec)
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels or {"app": "svc"}}, "spec": body}


def by_name(verdicts):
    return {v.name: v for v in verdicts}


def test_gpus_are_filtered_on_but_never_scored():
    full, empty = node("full"), node("empty")
    full.bind(pod("busy", gpus="6", cpu="1"))
    empty.bind(pod("same-cpu-no-gpu", gpus="0", cpu="1"))  # equal cpu and memory on both
    verdicts = by_name(evaluate(pod(gpus="2", cpu="1"), [full, empty]))
    assert verdicts["full"].feasible and verdicts["empty"].feasible
    assert verdicts["full"].total == verdicts["empty"].total, "6 of 8 GPUs taken changes nothing in the score"
    assert by_name(evaluate(pod(gpus="3"), [full, empty]))["full"].failed_filter == "NodeResourcesFit"
    scored = by_name(evaluate(pod(gpus="2", cpu="1"), [full, empty], score_gpus=True))
    assert scored["empty"].scores["NodeResourcesFit"] > scored["full"].scores["NodeResourcesFit"] + 10


def test_preferred_node_affinity_is_normalised_by_the_best_node_and_weighted_two():
    terms = [{"weight": w, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}}
             for n, w in (("a", 50), ("b", 25))]
    verdicts = by_name(evaluate(pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}),
                                [node("a"), node("b"), node("c")]))
    assert [verdicts[n].scores["NodeAffinity"] for n in "abc"] == [100, 50, 0]
    assert verdicts["a"].total - verdicts["c"].total == pytest.approx(200, abs=1e-6)


def test_required_terms_are_ored_and_their_requirements_anded():
    required = {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}],
         "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]}
    nodes = [node("a", labels={"gpu": "h100"}), node("b", labels={"gpu": "h100"}), node("c", labels={"gpu": "a100"}),
             node("d", labels={"gpu": "l4"})]
    verdicts = by_name(evaluate(pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}),
                                nodes))
    assert [n for n, v in verdicts.items() if v.feasible] == ["b", "c"]
    assert verdicts["a"].failed_filter == "NodeAffinity"


def test_do_not_schedule_spread_filters_and_schedule_anyway_scores():
    a, b = node("a"), node("b")
    a.bind(pod("x1"))
    a.bind(pod("x2"))
    spread = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "svc"}}}
    hard = by_name(evaluate(pod(topologySpreadConstraints=[dict(spread, whenUnsatisfiable="DoNotSchedule")]), [a, b]))
    assert hard["a"].failed_filter == "PodTopologySpread" and hard["b"].feasible
    soft = by_name(evaluate(pod(topologySpreadConstraints=[dict(spread, whenUnsatisfiable="ScheduleAnyway")]), [a, b]))
    assert soft["a"].feasible and soft["b"].scores["PodTopologySpread"] == 100 and soft["a"].scores["PodTopologySpread"] == 0


def test_taints_need_tolerations_and_cordoned_nodes_are_out():
    tainted = node("t", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
    assert by_name(evaluate(pod(), [tainted]))["t"].failed_filter == "TaintToleration"
    assert by_name(evaluate(pod(tolerations=[{"key": "gpu", "operator": "Exists"}]), [tainted]))["t"].feasible
    assert by_name(evaluate(pod(), [node("c", unschedulable=True)]))["c"].failed_filter == "NodeUnschedulable"


def test_pod_affinity_pulls_towards_the_groups_domain():
    a, b = node("a", labels={"nvidia.com/gpu.clique": "c1"}), node("b", labels={"nvidia.com/gpu.clique": "c2"})
    a.bind(pod("w0", labels={"job": "j"}))
    term = {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"job": "j"}},
                                               "topologyKey": "nvidia.com/gpu.clique"}}
    verdicts = by_name(evaluate(pod(labels={"job": "j"}, affinity={"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [term]}}), [a, b]))
    assert verdicts["a"].scores["InterPodAffinity"] == 100 and verdicts["b"].scores["InterPodAffinity"] == 0


def test_ties_are_broken_at_random():
    nodes = [node("a"), node("b"), node("c")]
    picks = {choose(evaluate(pod(), nodes), random.Random(seed)) for seed in range(30)}
    assert picks == {"a", "b", "c"}


# The rules below have no upstream case in tests/sim/upstream_cases.py; their expectations are
# worked out by hand from the plugins' source.

def test_min_domains_counts_the_global_minimum_as_zero_while_domains_are_missing():
    a, b = node("a", labels={"zone": "z1"}), node("b", labels={"zone": "z2"})
    a.bind(pod("x1"))
    b.bind(pod("x2"))
    hard = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "svc"}}}
    assert all(v.feasible for v in evaluate(pod(topologySpreadConstraints=[hard]), [a, b])), "1+1-1 ≤ 1"
    # Three domains wanted, two exist: the minimum counts as 0, so 1 + 1 - 0 > 1 everywhere.
    verdicts = evaluate(pod(topologySpreadConstraints=[dict(hard, minDomains=3)]), [a, b])
    assert [v.failed_filter for v in verdicts] == ["PodTopologySpread", "PodTopologySpread"]


def test_node_taints_policy_honor_leaves_untolerated_nodes_out_of_the_count():
    clean, tainted = node("clean", labels={"zone": "z1"}), node("tainted", labels={"zone": "z2"})
    tainted.taints = [{"key": "x", "value": "y", "effect": "NoSchedule"}]
    clean.bind(pod("x1"))
    hard = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "svc"}}}
    tolerant = [{"key": "x", "operator": "Exists"}]
    # Ignore (the default): the tainted zone counts with 0 pods, so 'clean' would make the skew 2.
    ignored = by_name(evaluate(pod(tolerations=tolerant, topologySpreadConstraints=[hard]), [clean, tainted]))
    assert ignored["clean"].failed_filter == "PodTopologySpread" and ignored["tainted"].feasible
    # Honor with a pod that does not tolerate the taint: z2 is no domain, z1 is the minimum.
    honoured = by_name(evaluate(pod(topologySpreadConstraints=[dict(hard, nodeTaintsPolicy="Honor")]),
                                [clean, tainted]))
    assert honoured["clean"].feasible and honoured["tainted"].failed_filter == "TaintToleration"


def test_match_label_keys_narrow_the_selector_to_the_pods_own_revision():
    a, b = node("a"), node("b")
    a.bind(pod("old1", labels={"app": "svc", "pod-template-hash": "old"}))
    a.bind(pod("old2", labels={"app": "svc", "pod-template-hash": "old"}))
    soft = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "svc"}}}
    new = {"app": "svc", "pod-template-hash": "new"}
    plain = by_name(evaluate(pod(labels=new, topologySpreadConstraints=[soft]), [a, b]))
    keyed = by_name(evaluate(pod(labels=new, topologySpreadConstraints=[dict(soft, matchLabelKeys=["pod-template-hash"])]),
                             [a, b]))
    assert plain["a"].scores["PodTopologySpread"] < plain["b"].scores["PodTopologySpread"]
    assert keyed["a"].scores["PodTopologySpread"] == keyed["b"].scores["PodTopologySpread"] == 100


def test_node_name_pins_the_pod_and_requests_use_non_zero_defaults_for_scoring():
    verdicts = by_name(evaluate(pod(nodeName="b"), [node("a"), node("b")]))
    assert verdicts["a"].failed_filter == "NodeName" and verdicts["b"].feasible
    empty = {"metadata": {"name": "e", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}}
    small = NodeState.from_object({"metadata": {"name": "s"}, "status": {"allocatable": {"cpu": "1", "memory": "400Mi"}}})
    scored = evaluate(empty, [small])[0].scores["NodeResourcesFit"]
    assert scored == (90 + 50) // 2, "100m of 1 CPU and 200Mi of 400Mi counted for a container asking nothing"
