"""The TPOT signal (issue 47, item 3): a replica whose time per output token runs well over its
like peers' marks its GPU degraded. vLLM's own exposition text and a real dcgm-exporter's
(tests/fixtures/real_exporters), counters advanced as five replicas decode, read through a real
Prometheus and judged into the node's heat and the degraded strategy's sources."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest

from scoring.heat import Tier, node_heat
from scoring.ingest.prometheus import _series, connect
from scoring.ingest.rows import Series
from scoring.ingest.signals import host_cpu, registry
from scoring.ingest.signals.tpot import HELD, LOAD, RATIO, TPOT, Args, Tpot, slow_gpus
from scoring.ingest.telemetry import NodeTelemetry
from scoring.policy import HeatPolicy, PolicyError, default_policy, parse_policy
from sim.fake_dcgm import make_server, serve_in_background
from sim.policies import observed_samples
from sim.policies.gpu_balancer import tpot_rows
from tests.scoring.test_degraded import outlier_world
from tests.conftest import FIXTURES
from gpu_balancer.local_prometheus import ScrapeTarget

REAL = FIXTURES / "real_exporters"
NODE, NAMESPACE = "gpu-node-1", "dynamo-workload"
POD = "vllm-agg-0-vllmdecodeworker-{}"
TOKENS_PER_SECOND = 200.0
REPLICAS = {  # GPU: (pod suffix, TPOT seconds, running batch, KV cache use)
    "0": ("s65j5", 0.010, 16, 0.5), "1": ("a1b2c", 0.010, 18, 0.55), "2": ("d3e4f", 0.011, 14, 0.45),
    "3": ("g5h6i", 0.014, 16, 0.5),   # 1.4× its like peers: its GPU is the slow one
    "4": ("j7k8l", 0.020, 64, 0.9),   # slower, but at four times the batch: no like peer to judge it by
}


def dcgm_text() -> str:
    """The AICR H100 node's dcgm-exporter text (GPU 0 held by a Dynamo vLLM worker), GPUs 1–4
    given pods as its pod mapping names GPU 0's."""
    text = (REAL / "aicr-h100-gpu-node-1-exposition-sampled.txt").read_text()
    for gpu, (suffix, *_) in REPLICAS.items():
        if gpu != "0":
            text = re.sub(rf'(\{{gpu="{gpu}",[^}}]*DCGM_FI_DRIVER_VERSION="[^"]*")\}}',
                          rf'\1,container="main",namespace="{NAMESPACE}",pod="{POD.format(suffix)}",pod_uid=""}}', text)
    return text


def vllm_text(gpu: str, seconds: float) -> str:
    """vLLM v1's text (the kops L4 scrape), decoding at this replica's TPOT, batch and KV use."""
    _, tpot, running, kv = REPLICAS[gpu]
    text = (REAL / "cncf-ai-conformance-kops-l4-vllm-v1-idle.txt").read_text()
    figures = {"vllm:num_requests_running": running, "vllm:kv_cache_usage_perc": kv,
               "vllm:inter_token_latency_seconds_count": TOKENS_PER_SECOND * seconds,
               "vllm:inter_token_latency_seconds_sum": TOKENS_PER_SECOND * seconds * tpot}
    return re.sub(r"^(vllm:[\w:]+)(\{[^}]*\}) (\S+)$",
                  lambda m: f"{m[1]}{m[2]} {figures.get(m[1], float(m[3]))}", text, flags=re.M)


def test_the_fixtures_keep_their_real_shape():
    assert 'pod="vllm-agg-0-vllmdecodeworker-g5h6i"' in dcgm_text()
    assert dcgm_text().count('pod="vllm-agg-0-vllmdecodeworker-s65j5"') == \
        (REAL / "aicr-h100-gpu-node-1-exposition-sampled.txt").read_text().count("s65j5")
    text = vllm_text("3", 10.0)
    assert 'vllm:inter_token_latency_seconds_count{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 2000.0' in text
    assert 'vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 16' in text


@pytest.fixture
def scraped(prometheus):
    started = time.monotonic()
    servers = [make_server(dcgm_text(), port=0)] + [
        make_server(lambda gpu=gpu: vllm_text(gpu, time.monotonic() - started), port=0) for gpu in REPLICAS]
    for server in servers:
        serve_in_background(server)
    try:
        prom = prometheus(f"127.0.0.1:{servers[0].server_port}", *(
            ScrapeTarget(f"127.0.0.1:{server.server_port}", {"namespace": NAMESPACE, "pod": POD.format(suffix)})
            for server, (suffix, *_) in zip(servers[1:], REPLICAS.values())))
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL")
        prom.wait_for("vllm:inter_token_latency_seconds_count", at_least=len(REPLICAS))
        time.sleep(6)  # a few scrapes, for rates over a 5 s window
        yield prom
    finally:
        for server in servers:
            server.shutdown()


def test_a_replica_slower_than_its_like_peers_marks_its_gpu_degraded_through_prometheus(scraped):
    signal = Tpot(Args(window_seconds=5))
    query = connect(replace(default_policy().prometheus, url=scraped.url))
    rows = {name: _series(query(expr)) for name, expr in signal.queries("").items()}
    assert {row.labels["pod"] for row in rows[HELD]} == {POD.format(s) for s, *_ in REPLICAS.values()}
    found = signal.read(rows, node_of=lambda row: row.labels.get("Hostname", ""))
    assert list(found) == [NODE] and list(found[NODE]["readings"]) == [f"{RATIO}:3"], found
    assert found[NODE]["readings"][f"{RATIO}:3"] == pytest.approx(0.014 / 0.010, rel=0.05)
    node = NodeTelemetry(NODE, 8, util_sum=400.0, util_count=8, util_max=90.0,
                         readings=tuple(found[NODE]["readings"].items()))
    heat = node_heat(node, HeatPolicy())
    assert heat.tier is Tier.WARM and "GPU 3 degraded: its replica's TPOT 1.4" in " ".join(heat.reasons)
    assert registry.explain(heat.reasons) == "degraded: GPU 3"


def replica_rows(*replicas: tuple[str, float, float, float | None]) -> dict[str, list[Series]]:
    """Rows as Prometheus answers the signal's queries: (pod, TPOT, running, KV use), pod i on GPU i."""
    rows: dict[str, list[Series]] = {TPOT: [], LOAD: [], HELD: []}
    for i, (pod, tpot, running, kv) in enumerate(replicas):
        at = {"namespace": "ml", "pod": pod}
        rows[TPOT].append(Series({**at, "model_name": "llama"}, tpot))
        rows[LOAD].append(Series({**at, "figure": "running"}, running))
        if kv is not None:
            rows[LOAD].append(Series({**at, "figure": "kv"}, kv))
        rows[HELD].append(Series({**at, "node": f"n{i // 4}", "gpu": str(i % 4), "modelName": "H100"}, 1.0))
    return rows


def test_peers_are_alike_in_batch_and_kv_fill_and_two_at_least():
    read = lambda rows: Tpot().read(rows, lambda row: row.labels["node"])  # noqa: E731
    slow = ("slow", 0.013, 20, 0.5)
    assert read(replica_rows(("a", 0.010, 20, 0.5), ("b", 0.0105, 22, 0.5), slow)) == {
        "n0": {"readings": {f"{RATIO}:2": pytest.approx(1.27, abs=0.01)}}}
    assert read(replica_rows(("a", 0.010, 20, 0.5), slow)) == {}, "one peer is no median"
    assert read(replica_rows(("a", 0.010, 40, 0.5), ("b", 0.010, 40, 0.5), slow)) == {}, "twice the batch"
    assert read(replica_rows(("a", 0.010, 20, 0.1), ("b", 0.010, 20, 0.1), slow)) == {}, "KV 0.4 apart"
    assert read(replica_rows(("a", 0.010, 20, None), ("b", 0.010, 20, None), slow)) != {}, "KV unknown: batch alone"
    assert read(replica_rows(("a", 0.010, 20, 0.5), ("b", 0.0105, 22, 0.5), ("c", 0.012, 20, 0.5))) == {}, \
        "1.2× is within the spread of one model's GPUs"


def test_the_degraded_strategy_moves_a_replica_off_a_gpu_the_tpot_signal_marked():
    from descheduler.strategies.degraded import _lost

    node = NodeTelemetry("n0", 4, readings=((f"{RATIO}:2", 1.25),))
    assert slow_gpus(node) == [("2", 1.25)] and _lost(node) == {"2": pytest.approx(0.2)}


@pytest.mark.parametrize("host", [host_cpu.THROTTLED, host_cpu.WAITING])
def test_a_node_whose_host_cpus_explain_a_slow_replica_marks_no_gpu(host):
    """A replica held at its own CPU limit is slow on any node: its GPU is not the cause, and
    moving it would only move its replacement next (BENCHMARKS, "Host CPU: throttling")."""
    node = NodeTelemetry("n0", 4, readings=tuple(sorted(((f"{RATIO}:2", 2.0), (host, 0.3)))))
    assert slow_gpus(node) == [] and Tpot().verdicts(node, HeatPolicy()) == []


@pytest.mark.parametrize("document, says", [
    ("heat:\n  signals: [{name: tpot, args: {slowerThanPeers: 1}}]\n", "heat.signals[0].args.slowerThanPeers"),
    ("heat:\n  signals: [{name: tpot, args: {minPeers: 0}}]\n", "heat.signals[0].args.minPeers"),
    ("heat:\n  signals: [{name: tpot, args: {histograms: []}}]\n", "heat.signals[0].args.histograms"),
])
def test_bad_arguments_are_named(document, says):
    with pytest.raises(PolicyError, match=re.escape(says)):
        registry.configured(parse_policy(document).heat)


def test_the_simulated_replicas_answer_the_signal_as_their_servers_would_and_only_slow_gpus_are_marked():
    """The serving world's replicas, a quarter of its GPUs 1.5× slower: a row per ready replica and
    one per GPU it holds, and every GPU the signal marks is one the world made slow."""
    world = outlier_world()
    rows = tpot_rows(world, 0, observed_samples(world, lag=0), window_seconds=300.0)
    ready = world.serving[-1]
    assert {f"{r.labels['namespace']}/{r.labels['pod']}" for r in rows[TPOT]} == set(ready)
    held = {(r.labels["node"], int(r.labels["gpu"])) for r in rows[HELD]}
    assert held == {(world.pods[key].node, unit) for key in ready for unit in world.llm.units_of[key]}
    marked = {(node, int(reading.split(":")[1]))
              for node, found in Tpot().read(rows, lambda row: row.labels["node"]).items()
              for reading in found["readings"]}
    slow = {gpu for gpu, stretch in world.llm.conditions.stretch.items() if stretch >= 1.25}
    assert marked and marked <= slow
    assert tpot_rows(world, len(world.serving), [], 300.0) == {}, "before the first scrape, nothing"


def test_batch_alone_does_not_reach_the_bar_within_the_peer_band():
    """Healthy replicas whose TPOT follows the replica model's curve (about batch^0.8 at the top of
    its range): the widest batch gap the band lets peers have stays under 1.25×."""
    growth = Args().batch_factor ** 0.8
    busy = ("busy", 0.020 * growth, 64 * Args().batch_factor, 0.5)
    rows = replica_rows(("a", 0.020, 64, 0.5), ("b", 0.020, 64, 0.5), busy)
    assert Tpot().read(rows, lambda row: row.labels["node"]) == {}
    wide = replica_rows(("a", 0.020, 64, 0.5), ("b", 0.020, 64, 0.5), ("busy", 0.020 * 1.5 ** 0.8, 96, 0.5))
    assert Tpot(Args(batch_factor=1.5)).read(wide, lambda row: row.labels["node"]) != {}, \
        "the former 1.5× band marked a healthy replica at 1.5× the batch"
