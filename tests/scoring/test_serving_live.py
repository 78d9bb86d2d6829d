"""The serving signal through a real Prometheus scraping fake-dcgm and fake-serving (vLLM, SGLang, TGI, Triton text)."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import datetime, timezone

from scoring.heat import SLOW_SERVING, Tier, fleet_heat
from scoring.policy import ServingTarget, default_policy
from scoring.prometheus import connect, read_serving_window, read_snapshot
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec
from sim.serving_text import SGLANG_BUCKETS, TGI_BUCKETS, VLLM_BUCKETS, ServedReplica, pod_info, render_serving

SPEC = FleetSpec(nodes=3, gpus_per_node=4, profile="idle", seed=2)
NODES = [SPEC.node_name(i) for i in range(3)]
# One replica of each server on node 0 (two found through a `node` label, two through kube_pod_info),
# a slow vLLM replica on node 1 whose peer on node 2 is fast.
REPLICAS = (
    ServedReplica("chat", "llama-7c9f-a", "vllm", queue=2, mean_latency_seconds=0.08, node=NODES[0]),
    ServedReplica("chat", "qwen-5d8b-a", "sglang", queue=1, mean_latency_seconds=0.5, node=NODES[0]),
    ServedReplica("chat", "tgi-6f7d-a", "tgi", queue=0, mean_latency_seconds=1.2),
    ServedReplica("vision", "resnet-8e1a-a", "triton", queue=4, mean_latency_seconds=0.004),
    ServedReplica("chat", "mixtral-4b2c-a", "vllm", queue=30, mean_latency_seconds=0.9, node=NODES[1]),
    ServedReplica("chat", "mixtral-4b2c-b", "vllm", queue=0, mean_latency_seconds=0.05, node=NODES[2]),
)
POD_NODES = {"tgi-6f7d-a": NODES[0], "resnet-8e1a-a": NODES[0]}


def serve_dynamic(render) -> tuple[str, object]:
    server = make_server(render, port=0)
    serve_in_background(server)
    return f"127.0.0.1:{server.server_port}", server


def policy_for(url: str):
    policy = default_policy()
    serving = replace(policy.serving, window_seconds=30.0)
    return replace(policy, prometheus=replace(policy.prometheus, url=url), serving=serving)


def exact_quantile(mean: float, q: float) -> float:
    return -mean * math.log(1 - q)


def bucket_around(value: float, buckets) -> tuple[float, float]:
    lower = max((b for b in buckets if b <= value), default=0.0)
    upper = min((b for b in buckets if b >= value), default=math.inf)
    return lower, upper


def test_each_server_is_read_judged_and_a_slow_replica_makes_its_cool_node_hot(fake_dcgm, prometheus):
    shown = list(REPLICAS)
    started = time.monotonic()
    serving_target, server = serve_dynamic(
        lambda: render_serving(shown, time.monotonic() - started + 600) + pod_info(shown, POD_NODES))
    try:
        prom = prometheus(fake_dcgm(SPEC), serving_target)
        prom.wait_for('rate(vllm:time_to_first_token_seconds_count[30s]) > 0', at_least=2)
        prom.wait_for('rate(nv_inference_request_success[30s]) > 0', at_least=1)
        policy = policy_for(prom.url)
        query = connect(policy.prometheus)
        snapshot = read_snapshot(query, policy)
        by_pod = {r.pod: (node.name, r) for node in snapshot.nodes for r in node.serving}
        assert set(by_pod) == {r.pod for r in REPLICAS}
        for served in REPLICAS:
            node, seen = by_pod[served.pod]
            assert node == (served.node or POD_NODES[served.pod]), served.pod
            assert seen.server == served.server and seen.queue == served.queue
            if served.server == "triton":  # a mean from counters: exact
                assert math.isclose(seen.latency_seconds, served.mean_latency_seconds, rel_tol=0.02)
            else:  # a quantile interpolated within the bucket that holds the exact one
                buckets = {"vllm": VLLM_BUCKETS, "sglang": SGLANG_BUCKETS, "tgi": TGI_BUCKETS}[served.server]
                low, high = bucket_around(exact_quantile(served.mean_latency_seconds, 0.95), buckets)
                assert low <= seen.latency_seconds <= high, (served.pod, seen.latency_seconds, low, high)
        fleet = fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc), staleness_limit_seconds=120)
        heat = {n.name: n for n in fleet.nodes}
        assert heat[NODES[1]].tier is Tier.HOT and heat[NODES[1]].reasons[0].startswith(SLOW_SERVING)
        assert "mixtral-4b2c-a" in heat[NODES[1]].reasons[0] and heat[NODES[1]].gpu_util < policy.heat.warm_util_percent
        assert not heat[NODES[2]].slow_serving and "serving" in heat[NODES[2]].signals

        # The descheduler's window over the same series: the slow replica stayed over target.
        d = replace(policy.descheduler, window_seconds=8.0, step_seconds=2.0)
        deadline = time.monotonic() + 30
        while True:  # until the window has seen both replicas at every step
            window = read_serving_window(query, replace(policy, descheduler=d), snapshot)
            pods = [("chat", "mixtral-4b2c-a"), ("chat", "mixtral-4b2c-b")]
            if all(p in window and window[p].coverage >= 0.8 for p in pods) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert window[("chat", "mixtral-4b2c-a")].pressure_low >= 1.0
        assert window[("chat", "mixtral-4b2c-b")].pressure_low < 1.0

        # The slow replica's series vanish mid-run: within one rate window it is gone, its node
        # is judged on DCGM alone again, and nothing fails.
        shown.remove(REPLICAS[4])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snapshot = read_snapshot(query, policy)
            if "mixtral-4b2c-a" not in {r.pod for n in snapshot.nodes for r in n.serving}:
                break
            time.sleep(1)
        fleet = fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc), staleness_limit_seconds=120)
        after = {n.name: n for n in fleet.nodes}[NODES[1]]
        assert after.tier is Tier.COOL and after.serving_pressure is None and not after.slow_serving
    finally:
        server.shutdown()
        server.server_close()


def test_with_no_serving_series_the_snapshot_is_what_it_was(fake_dcgm, prometheus):
    prom = prometheus(fake_dcgm(SPEC))
    prom.wait_for("DCGM_FI_DEV_GPU_UTIL", at_least=12)
    policy = policy_for(prom.url)
    query = connect(policy.prometheus)
    on = read_snapshot(query, policy)
    off = read_snapshot(query, replace(policy, serving=replace(policy.serving, enabled=False)))
    assert [replace(n, serving=()) for n in on.nodes] == list(on.nodes)
    assert [(n.name, n.gpus, n.pods) for n in on.nodes] == [(n.name, n.gpus, n.pods) for n in off.nodes]
    assert read_serving_window(query, policy, on) == {}


def test_a_per_workload_target_is_applied_through_kube_pod_labels(fake_dcgm, prometheus):
    shown = [REPLICAS[0]]
    labels = ('# TYPE kube_pod_labels gauge\n'
              'kube_pod_labels{namespace="chat",pod="llama-7c9f-a",label_app_kubernetes_io_name="assistant"} 1\n')
    started = time.monotonic()
    target, server = serve_dynamic(lambda: render_serving(shown, time.monotonic() - started + 600) + labels)
    try:
        prom = prometheus(fake_dcgm(SPEC), target)
        prom.wait_for('rate(vllm:time_to_first_token_seconds_count[30s]) > 0')
        prom.wait_for("kube_pod_labels")
        policy = policy_for(prom.url)
        strict = ServingTarget(workload="assistant", latency_seconds=0.1)
        policy = replace(policy, serving=replace(policy.serving, targets=(strict,)))
        snapshot = read_snapshot(connect(policy.prometheus), policy)
        (seen,) = [r for n in snapshot.nodes for r in n.serving]
        assert seen.workload == "assistant" and seen.target == strict and seen.pressure > 1
    finally:
        server.shutdown()
        server.server_close()
