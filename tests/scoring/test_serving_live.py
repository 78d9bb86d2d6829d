"""The serving signal through a real Prometheus scraping fake-dcgm and fake-serving (vLLM, SGLang, TGI, Triton text)."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from scoring.heat import SLOW_SERVING, Tier, fleet_heat
from scoring.ingest.prometheus import connect, read_serving_window, read_snapshot
from scoring.policy import ServingTarget, default_policy
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


def test_on_an_llm_fleet_advice_follows_the_servers_load_where_the_duty_cycle_cannot_tell_nodes_apart(prometheus):
    """Two 8-GPU nodes, each with six one-GPU vLLM replicas as a real fleet shows them (97 % duty
    cycle, 90 % of the framebuffer preallocated) and two GPUs free. One node's replicas hold 5 % of
    their KV cache and 6 requests, the other's 92 % and 240. Read through a real Prometheus: on DCGM
    alone the two nodes look the same (equal scores: which comes first is a tie broken by name);
    with the servers' load figures the loaded node is warm, scores far lower, and the light one is
    advised first."""
    from scoring.advice.placement import advise, index_fleet
    from scoring.ingest.telemetry import GpuSample, PodRef
    from sim.dcgm_text import render_exposition

    load = {"light": (0.05, 6.0), "loaded": (0.92, 240.0)}

    def gpu(node: str, i: int) -> GpuSample:
        serving = i < 6
        return GpuSample(node=node, gpu=str(i), uuid=f"GPU-{node}-{i}", model="NVIDIA H100 80GB HBM3",
                         pci_bus_id=f"00000000:{i + 1:02X}:00.0", util_percent=97.0 if serving else 0.0,
                         fb_used_mib=73_728.0 if serving else 512.0, fb_free_mib=8_192.0 if serving else 81_408.0,
                         temperature_c=62.0, power_w=420.0 if serving else 70.0,
                         pod=PodRef("chat", f"{node}-llm-{i}") if serving else None)

    gpus = [gpu(node, i) for node in load for i in range(8)]
    replicas = [ServedReplica("chat", f"{node}-llm-{i}", "vllm", queue=0, mean_latency_seconds=0.1, node=node,
                              kv_usage=kv, running=running) for node, (kv, running) in load.items() for i in range(6)]
    dcgm_target, dcgm = serve_dynamic(lambda: render_exposition(gpus))
    started = time.monotonic()
    serving_target, serving = serve_dynamic(lambda: render_serving(replicas, time.monotonic() - started + 600))
    try:
        prom = prometheus(dcgm_target, serving_target)
        prom.wait_for("vllm:kv_cache_usage_perc", at_least=12)
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", at_least=16)
        policy = policy_for(prom.url)
        verdicts = {}
        for name, serving_on in (("dcgm alone", False), ("with load", True)):
            judged = replace(policy, serving=replace(policy.serving, enabled=serving_on))
            fleet = fleet_heat(read_snapshot(connect(judged.prometheus), judged), judged.heat,
                               now=datetime.now(timezone.utc), staleness_limit_seconds=120)
            index = index_fleet(fleet)
            advice = advise(index, gpus_requested=1, pending_gpus={}, policy=judged.placement)
            verdicts[name] = ({n.name: n.tier for n in fleet.nodes}, {node: base for base, _, node in index.ranked},
                              [p.node for p in advice.preferred])
        tiers, scores, _ = verdicts["dcgm alone"]
        assert tiers["light"] == tiers["loaded"] and scores["light"] == pytest.approx(scores["loaded"]), verdicts
        tiers, scores, preferred = verdicts["with load"]
        assert tiers == {"light": Tier.COOL, "loaded": Tier.WARM}, verdicts
        assert scores["light"] > 2 * scores.get("loaded", 0.0) and preferred[0] == "light", verdicts
    finally:
        for server in (dcgm, serving):
            server.shutdown()
            server.server_close()


# Real model-server output (tests/fixtures/real_exporters, provenance in its README): each file's
# KV-cache share, running batch and queue as the file states them.
REAL_SERVERS = {
    "vllm-docs-design-metrics-gpu-unstated-llama31-8b-v1-running8.txt": ("vllm", None, 8.0, None),
    "cncf-ai-conformance-kops-l4-vllm-v1-idle.txt": ("vllm", 0.0, 0.0, 0.0),
    "sglang-docs-gpu-unstated-llama31-8b-loaded.txt": ("sglang", 0.28, 162.0, 2826.0),
    "sglang-issue-13485-gpu-unstated-qwen32b-one-running.txt": ("sglang", 0.0, 1.0, None),
}


def test_real_model_servers_text_reads_into_load(prometheus):
    """Each real scrape, served as a PodMonitor would label it (namespace, pod, node), beside a
    dcgm-exporter GPU naming the same pod: its KV share, running batch and queue are read as
    written, and its load follows. The loaded SGLang (162 running, 2,826 queued) has only 28 % of
    its KV cache in use: the batch, not the cache, says it is full."""
    from gpu_balancer.local_prometheus import ScrapeTarget
    from scoring.ingest.telemetry import GpuSample, PodRef
    from sim.dcgm_text import render_exposition
    from tests.conftest import FIXTURES

    pods = {name: (f"node-{i}", f"server-{i}") for i, name in enumerate(REAL_SERVERS)}
    gpus = [GpuSample(node=node, gpu="0", uuid=f"GPU-{i}", model="NVIDIA H100 80GB HBM3", util_percent=97.0,
                      fb_used_mib=73_728.0, fb_free_mib=8_192.0, pod=PodRef("chat", pod))
            for i, (node, pod) in enumerate(pods.values())]
    servers, targets = [], []
    for name, (node, pod) in pods.items():
        address, server = serve_dynamic(lambda name=name: (FIXTURES / "real_exporters" / name).read_text())
        servers.append(server)
        targets.append(ScrapeTarget(address, {"namespace": "chat", "pod": pod, "node": node}))
    dcgm_target, dcgm = serve_dynamic(lambda: render_exposition(gpus))
    servers.append(dcgm)
    try:
        prom = prometheus(dcgm_target, *targets)
        prom.wait_for('{__name__=~"vllm:num_requests_running|sglang:num_running_reqs"}', at_least=len(pods))
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", at_least=len(pods))
        snapshot = read_snapshot(connect(policy_for(prom.url).prometheus), policy_for(prom.url))
        seen = {r.pod: r for node in snapshot.nodes for r in node.serving}
        for name, (server, kv, running, queue) in REAL_SERVERS.items():
            replica = seen[pods[name][1]]
            assert (replica.server, replica.kv_usage, replica.running, replica.queue) == (server, kv, running, queue), name
        loaded = seen[pods["sglang-docs-gpu-unstated-llama31-8b-loaded.txt"][1]]
        assert loaded.load == pytest.approx((162 + 2826) / 256) and loaded.kv_usage < 0.3
        assert seen[pods["vllm-docs-design-metrics-gpu-unstated-llama31-8b-v1-running8.txt"][1]].load == 8 / 256
        heat = {n.name: n for n in fleet_heat(snapshot, default_policy().heat, now=datetime.now(timezone.utc),
                                              staleness_limit_seconds=120).nodes}
        assert heat[pods["sglang-docs-gpu-unstated-llama31-8b-loaded.txt"][0]].tier is Tier.HOT
        assert heat[pods["cncf-ai-conformance-kops-l4-vllm-v1-idle.txt"][0]].tier is Tier.COOL, "idle despite 97 % util"
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
