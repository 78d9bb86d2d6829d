"""Feasibility: the operators and toleration rules, and a property test that the advice never names
a node the pod cannot use, judged by the simulator's scheduler model (separate code) as the oracle."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.advice.placement import index_fleet
from scoring.cluster.feasibility import (NodeFacts, PodConstraints, Taint, Toleration, constraints_of, node_facts,
                                         why_infeasible)
from scoring.cluster.node_selectors import Requirement
from scoring.cluster.view import ClusterView
from scoring.heat import FleetHeat, NodeHeat, Tier
from scoring.policy import PlacementPolicy
from sim.node_state import NodeState
from sim.scheduler import evaluate
from webhook.admit import decide
from webhook.ledger import SteeringLedger
from webhook.review import decode_review, patched, pod_review

POLICY = PlacementPolicy()
NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"


def test_operators_follow_the_scheduler():
    assert Requirement("k", "In", ("a",)).matches("a") and not Requirement("k", "In", ("a",)).matches(None)
    assert Requirement("k", "NotIn", ("a",)).matches(None) and not Requirement("k", "NotIn", ("a",)).matches("a")
    assert Requirement("k", "Exists", ()).matches("") and Requirement("k", "DoesNotExist", ()).matches(None)
    assert Requirement("k", "Gt", ("4",)).matches("5") and not Requirement("k", "Gt", ("4",)).matches("4")
    assert Requirement("k", "Lt", ("4",)).matches("3") and not Requirement("k", "Lt", ("4",)).matches("3.5")
    assert not Requirement("k", "Gt", ("4", "5")).matches("9"), "Gt takes exactly one value"


def test_tolerations_match_as_the_scheduler_does():
    taint = Taint("reserved", "batch", "NoSchedule")
    assert Toleration("reserved", "Equal", "batch", "NoSchedule").tolerates(taint)
    assert Toleration("reserved", "Exists").tolerates(taint) and Toleration("", "Exists").tolerates(taint)
    assert not Toleration("reserved", "Equal", "other").tolerates(taint)
    assert not Toleration("reserved", "Exists", effect="NoExecute").tolerates(taint)


def test_each_filter_names_itself():
    node = NodeFacts("n1", {"pool": "l4"}, (Taint("reserved", "", "NoSchedule"),), False, {GPU: 8})
    pinned = PodConstraints(node_selector=(("pool", "h100"),), units=((GPU, 1),))
    assert why_infeasible(pinned, node) == "NodeAffinity: nodeSelector"
    assert why_infeasible(PodConstraints(units=((MIG, 1),)), node) == f"NodeResourcesFit: {MIG}"
    assert why_infeasible(PodConstraints(units=((GPU, 1),)), node).startswith("TaintToleration")
    cordoned = NodeFacts("n2", {}, (), True, {GPU: 8})
    assert why_infeasible(PodConstraints(units=((GPU, 1),)), cordoned) == "NodeUnschedulable"
    tolerant = PodConstraints(tolerations=(Toleration("node.kubernetes.io/unschedulable", "Exists"),))
    assert why_infeasible(tolerant, cordoned) is None


# --- the property -----------------------------------------------------------------------------

KEYS = ("pool", "tier", "zone")
VALUES = {"pool": ("h100", "l4"), "tier": ("1", "2", "3", "4"), "zone": ("a", "b")}
TAINTS = ({"key": "reserved", "value": "batch", "effect": "NoSchedule"}, {"key": "maint", "effect": "NoExecute"},
          {"key": "soft", "effect": "PreferNoSchedule"})
TOLERATIONS = ({"key": "reserved", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
               {"key": "reserved", "operator": "Exists"}, {"key": "maint", "operator": "Exists", "effect": "NoExecute"},
               {"operator": "Exists"}, {"key": "reserved", "operator": "Equal", "value": "other"},
               {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})


@st.composite
def nodes(draw):
    count = draw(st.integers(1, 10))
    made = []
    for i in range(count):
        labels = {k: draw(st.sampled_from(VALUES[k])) for k in KEYS if draw(st.booleans())}
        resources = draw(st.sampled_from(((GPU,), (MIG,), (GPU, MIG))))
        allocatable = {r: draw(st.integers(1, 8 if r == GPU else 28)) for r in resources}
        held = {r: draw(st.integers(0, n)) for r, n in allocatable.items()}
        made.append(({"metadata": {"name": f"n{i}", "labels": labels},
                      "spec": {"taints": draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=str)),
                               "unschedulable": draw(st.booleans())},
                      "status": {"allocatable": {"cpu": "96", **{r: str(n) for r, n in allocatable.items()}}}},
                     held, draw(st.floats(0, 100))))
    return made


@st.composite
def expressions(draw, names):
    key = draw(st.sampled_from(KEYS))
    operator = draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")))
    if operator in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": operator}
    if operator in ("Gt", "Lt"):
        return {"key": "tier", "operator": operator, "values": [str(draw(st.integers(0, 5)))]}
    return {"key": key, "operator": operator,
            "values": draw(st.lists(st.sampled_from(VALUES[key]), min_size=1, max_size=2))}


@st.composite
def pods(draw, names):
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": {
        draw(st.sampled_from((GPU, MIG))): str(draw(st.integers(1, 3)))}}}]}
    if draw(st.booleans()):
        spec["nodeSelector"] = {"pool": draw(st.sampled_from(VALUES["pool"]))}
    terms = []
    for _ in range(draw(st.integers(0, 2))):
        term: dict = {"matchExpressions": draw(st.lists(expressions(names), min_size=1, max_size=2))}
        if draw(st.booleans()):
            term["matchFields"] = [{"key": "metadata.name", "operator": draw(st.sampled_from(("In", "NotIn"))),
                                    "values": [draw(st.sampled_from(names))]}]
        terms.append(term)
    if terms:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    spec["tolerations"] = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2, unique_by=str))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_advice_never_names_a_node_the_pod_cannot_use(data):
    fleet_nodes = data.draw(nodes())
    names = [obj["metadata"]["name"] for obj, _, _ in fleet_nodes]
    pod = data.draw(pods(names))
    facts = {f.name: f for f in (node_facts(obj, POLICY) for obj, _, _ in fleet_nodes)}
    held = {obj["metadata"]["name"]: h for obj, h, _ in fleet_nodes}
    heat = FleetHeat(NOW, False, 5.0, tuple(
        NodeHeat(name, sum(facts[name].allocatable.values()), sum(held[name].values()), util, util, None, 50.0, None,
                 Tier.COOL if util < 50 else Tier.WARM if util < 80 else Tier.HOT, ())
        for (obj, _, util), name in zip(fleet_nodes, names)))
    ledger = SteeringLedger(45)
    ledger.prepare(index_fleet(heat), ClusterView(facts, held, frozenset(), NOW))
    decision = decide(decode_review(json.dumps(pod_review(pod)).encode()), index=ledger._index,
                      telemetry_time=NOW, snapshot_age_seconds=1.0, ledger=ledger, policy=POLICY,
                      now=NOW + timedelta(seconds=1))
    advised = patched(pod, decision.review)
    preferred = [t["preference"]["matchFields"][0]["values"][0] for t in advised["spec"].get("affinity", {}).get(
        "nodeAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    # The oracle: the simulator's scheduler model, with each node's held units requested.
    states = []
    for obj, node_held, _ in fleet_nodes:
        state = NodeState.from_object(obj)
        state.requested.update(node_held)
        states.append(state)
    feasible = {v.name for v in evaluate(pod, states) if v.feasible}
    assert set(preferred) <= feasible, (preferred, feasible)
    constraints = constraints_of(pod, POLICY)
    assert all(why_infeasible(constraints, facts[name], ClusterView(facts, held).free(name)) is None
               for name in preferred)
    if feasible and any(h.tier <= Tier.WARM and h.name in feasible for h in heat.nodes):
        assert preferred, "a cool or warm feasible node with room exists, so the advice names one"
