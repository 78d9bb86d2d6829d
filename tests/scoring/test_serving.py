"""The serving signal: queries, rows to replicas, targets, the node-bound rule, heat and the descheduler."""

from dataclasses import replace

import pytest

from descheduler.ledger import LedgerState
from descheduler.plan import plan_evictions
from scoring.heat import SLOW_SERVING, Tier, node_heat
from scoring.ingest.series import Series
from scoring.ingest.serving import (ServingReplica, SustainedServing, replicas_from_rows, serving_queries, target_for,
                                    with_peers, workload_of_pod)
from scoring.ingest.telemetry import NodeTelemetry
from scoring.policy import HeatPolicy, PolicyError, ServingPolicy, ServingTarget, default_policy, parse_policy
from tests.descheduler.helpers import NOW, cluster, fleet, node_obj, pod_obj, snapshot

SERVING = ServingPolicy()
TARGET = ServingTarget(latency_seconds=0.5, queue_depth=8)


def replica(pod, latency, *, queue=0.0, namespace="inference", target=TARGET, workload=None):
    return ServingReplica(namespace, pod, "vllm", queue, latency, "TTFT p95", target,
                          workload if workload is not None else workload_of_pod(pod))


def test_every_server_gets_a_queue_and_a_latency_query_and_the_joins_find_node_and_workload():
    queries = serving_queries(SERVING, 'cluster="prod"', "app.kubernetes.io/name")
    assert set(queries) == {f"{kind}:{s}" for kind in ("queue", "latency") for s in ("vllm", "sglang", "tgi", "triton")
                            } | {"kv:vllm", "kv:sglang", "running:vllm", "running:sglang", "running:tgi",
                                 "pod_node", "pod_workload"}
    assert queries["kv:vllm"] == 'max by (namespace, pod, node, kubernetes_node, nodename) ' \
                                 '(vllm:kv_cache_usage_perc{cluster="prod"})'
    assert "tgi_batch_current_size" in queries["running:tgi"] and "kv:tgi" not in queries
    assert "histogram_quantile(0.95" in queries["latency:vllm"] and "vllm:time_to_first_token_seconds_bucket" in queries[
        "latency:vllm"]
    assert "nv_inference_queue_duration_us" in queries["latency:triton"] and "1e-06" in queries["latency:triton"]
    assert all('cluster="prod"' in q for q in queries.values())
    assert "kube_pod_info" in queries["pod_node"] and "label_app_kubernetes_io_name" in queries["pod_workload"]


def rows(**by_name):
    return {name.replace("_", ":", 1) if name.startswith(("queue_", "latency_")) else name:
            [Series(labels, value) for labels, value in values] for name, values in by_name.items()}


def test_rows_become_replicas_on_their_nodes_through_the_series_label_or_kube_pod_info():
    answers = rows(
        queue_vllm=[({"namespace": "chat", "pod": "a-1-x", "node": "n1"}, 3.0),
                    ({"namespace": "chat", "pod": "a-1-y"}, 1.0),
                    ({"namespace": "chat", "pod": "orphan-1-z"}, 9.0)],
        latency_vllm=[({"namespace": "chat", "pod": "a-1-x", "node": "n1"}, 0.8),
                      ({"namespace": "chat", "pod": "a-1-y"}, float("nan"))],
        pod_node=[({"namespace": "chat", "pod": "a-1-y", "node": "n2"}, 1.0)])
    per_node = replicas_from_rows(answers, SERVING, "app.kubernetes.io/name")
    assert set(per_node) == {"n1", "n2"}  # the pod no label places is left out
    (on_n1,), (on_n2,) = per_node["n1"], per_node["n2"]
    assert (on_n1.pod, on_n1.queue, on_n1.latency_seconds) == ("a-1-x", 3.0, 0.8)
    assert (on_n2.pod, on_n2.latency_seconds) == ("a-1-y", None)  # no traffic: unknown, not zero
    assert on_n1.peer_pressure == on_n2.pressure and on_n1.workload == "a"


def test_the_first_matching_target_applies_and_the_default_otherwise():
    policy = replace(SERVING, targets=(ServingTarget(server="triton", latency_seconds=0.05),
                                       ServingTarget(namespace="chat", workload="assistant", latency_seconds=0.3)))
    assert target_for(policy, server="triton", namespace="chat", workload="assistant").latency_seconds == 0.05
    assert target_for(policy, server="vllm", namespace="chat", workload="assistant").latency_seconds == 0.3
    assert target_for(policy, server="vllm", namespace="chat", workload="other") == SERVING.default_target


def node_with(*replicas, util=20.0):
    per_node = with_peers({"n1": [r for r in replicas if r.pod.endswith("-n1")],
                           "n2": [r for r in replicas if r.pod.endswith("-n2")]})
    return NodeTelemetry("n1", 8, util_sum=8 * util, util_count=8, util_max=util, serving=per_node["n1"])


@pytest.mark.parametrize(("latency", "tier"), [(0.30, Tier.COOL), (0.42, Tier.WARM), (0.60, Tier.HOT)])
def test_a_replica_its_node_slows_makes_a_cool_node_warm_or_hot(latency, tier):
    heat = node_heat(node_with(replica("chat-h-n1", latency), replica("chat-h-n2", 0.2)), HeatPolicy())
    assert heat.tier is tier
    assert "serving" in heat.signals
    if tier is not Tier.COOL:
        assert heat.reasons[0].startswith(SLOW_SERVING) and "chat-h-n1" in heat.reasons[0]


def test_a_workload_slow_on_every_node_says_nothing_about_this_one():
    heat = node_heat(node_with(replica("chat-h-n1", 0.9), replica("chat-h-n2", 0.85)), HeatPolicy())
    assert heat.tier is Tier.COOL and not heat.slow_serving


def test_without_serving_series_the_verdict_is_the_dcgm_one():
    plain = NodeTelemetry("n1", 8, util_sum=8 * 60.0, util_count=8, util_max=60.0)
    heat = node_heat(plain, HeatPolicy())
    assert heat.tier is Tier.WARM and heat.serving_pressure is None and "serving" not in heat.signals


@pytest.mark.parametrize(("document", "field"), [
    ("serving: {quantile: 1.5}", "serving.quantile"),
    ("serving: {windowSeconds: 10}", "serving.windowSeconds"),
    ("serving: {targets: [{server: nope}]}", "serving.targets[0].server"),
    ("serving: {targets: [{latencySeconds: 0}]}", "serving.targets[0]"),
    ("serving: {servers: [{name: x, queueMetric: 'not a name'}]}", "serving.servers[0]"),
    ("serving: {servers: [{name: x, latencySumCounter: a_total}]}", "serving.servers[0]"),
    ("heat: {warmServingFraction: 1.2}", "heat.warmServingFraction"),
])
def test_bad_serving_settings_are_refused_naming_the_field(document, field):
    with pytest.raises(PolicyError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_policy(document)


def test_serving_settings_decode_from_the_policy_document():
    policy = parse_policy("serving:\n  quantile: 0.99\n  targets:\n  - {namespace: chat, latencySeconds: 0.4}\n")
    assert policy.serving.quantile == 0.99 and policy.serving.targets[0].latency_seconds == 0.4
    assert [s.name for s in policy.serving.servers] == ["vllm", "sglang", "tgi", "triton"]


# --- the descheduler ---------------------------------------------------------------------------------

def _slow_node_plan(window: dict, *, cool_slow=False, calm_latency=0.1, calm_replicas=3):
    slow = replica("chat-h-n1", 0.9, workload="chat-h")
    calm = [replica(f"chat-h-n2-{i}", calm_latency, workload="chat-h") for i in range(calm_replicas)]
    other = ServingReplica("inference", "batch-n1", "vllm", 0.0, 0.1, "TTFT p95", TARGET, "batch")
    per_node = with_peers({"n1": [slow, other], "n2": calm})
    snap = snapshot({"n1": [("inference", "chat-h-n1", 1, 40.0), ("inference", "batch-n1", 1, 40.0)],
                     "n2": [("inference", r.pod, 1, 20.0) for r in calm], "n3": []})
    snap = replace(snap, nodes=tuple(replace(n, serving=per_node.get(n.name, ()), util_sum=8 * 30.0, util_count=8)
                                     for n in snap.nodes))
    heats = [node_heat(n, HeatPolicy()) for n in snap.nodes]
    if cool_slow:  # the only node with room is itself slow-serving
        heats = [replace(h, reasons=(f"{SLOW_SERVING}: x",), tier=Tier.WARM) if h.name == "n3" else h for h in heats]
    objects = cluster(node_obj("n1"), node_obj("n2"), node_obj("n3"),
                      pod_obj("chat-h-n1", "n1", owner_name="chat-h-5d4f"), pod_obj("batch-n1", "n1", owner_name="b-1"),
                      *(pod_obj(r.pod, "n2", owner_name="chat-h-5d4f") for r in calm))
    return plan_evictions(fleet=fleet(*heats), snapshot=snap, windows={"serving": window}, cluster=objects,
                          ledger=LedgerState(), policy=default_policy().descheduler, now=NOW)


@pytest.mark.parametrize(("calm_latency", "calm_replicas", "why"), [
    (0.3, 3, "would reach"),  # 60 % of target, each taking a third more traffic: past it
    (0.1, 0, "only running replica"),
])
def test_a_replica_whose_peers_could_not_absorb_its_traffic_stays(calm_latency, calm_replicas, why):
    plan = _slow_node_plan({("inference", "chat-h-n1"): SustainedServing(1.4, 1.0)}, calm_latency=calm_latency,
                           calm_replicas=calm_replicas)
    assert plan.evictions == ()
    assert any(s.pod == "chat-h-n1" and why in s.reason for s in plan.skipped), plan.skipped


def test_a_node_slow_serving_for_the_window_sheds_the_replica_that_misses_its_target_most():
    plan = _slow_node_plan({("inference", "chat-h-n1"): SustainedServing(1.4, 1.0)})
    assert plan.hot_nodes == ("n1",)
    (eviction,) = plan.evictions
    assert eviction.pod == "chat-h-n1" and "slow-serving" in eviction.reason


@pytest.mark.parametrize("stats", [SustainedServing(0.9, 1.0), SustainedServing(1.4, 0.5)])
def test_slow_serving_that_did_not_last_or_is_not_covered_moves_nothing(stats):
    plan = _slow_node_plan({("inference", "chat-h-n1"): stats})
    assert plan.evictions == () and plan.hot_nodes == ()


def test_a_replica_never_moves_to_a_node_with_a_slow_serving_verdict():
    plan = _slow_node_plan({("inference", "chat-h-n1"): SustainedServing(1.4, 1.0)}, cool_slow=True)
    assert all(e.reason.endswith("room on n2") for e in plan.evictions)

