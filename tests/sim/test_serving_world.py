"""The honest serving world: LLM replicas tabulated from the step model, contention channels,
exporter telemetry, moves that cost time, and request-level figures."""

from __future__ import annotations

import json
import re
import random
from dataclasses import replace

import numpy as np
import pytest

from scoring.policy import PolicyError
from sim.engine import bind, build_world, measure, recreate, service_pod, step_workloads, training_pods
from sim.llm.engine import Knobs, Replica
from sim.llm.hardware import gpu_named, gpu_of_product, model_named
from sim.llm.profile import RequestMix, _requests, open_loop, profile
from sim.llm.world import ready_seconds
from sim.policies import make_policy, observed_samples, target_load_packing
from sim.run import run_policy
from sim.scenario import FleetShape, InferenceShape, PoolShape, ServingShape, load_scenario, named

H100, LLAMA = gpu_named("H100-80GB"), model_named("Llama-3.1-8B")
MIX = RequestMix(1020, 129, 0.8)
SMALL = replace(named("llm-fleet"), hours=0.5, fleet=FleetShape(nodes=6),
                inference=InferenceShape(services=8, mean_demand_fraction=0.35))


def placed(scenario, ticks_run: int = 1):
    """The scenario's fleet placed by the stock scheduler and measured `ticks_run` times."""
    world = build_world(scenario, 1)
    policy = make_policy("stock", 1)
    for tick in range(ticks_run):
        world.tick = tick
        step_workloads(world)
        for pod in list(world.pending()):
            if (node := policy.place(world, pod)) is not None:
                bind(world, pod, node)
        measure(world)
    return world


def placed_world():
    """SMALL's first tick: the fleet placed by the stock scheduler and measured once."""
    return placed(SMALL)


def test_a_slowed_replica_is_the_unslowed_one_at_a_proportionally_higher_rate_with_longer_latencies():
    """The time-scaling the fleet relies on (`ReplicaProfile`), held against the step model."""
    rate, slowdown = 8.0, 1.4
    runs = []
    for s, offered in ((slowdown, rate), (1.0, rate * slowdown)):
        replica = Replica(H100, LLAMA, Knobs(slowdown=s))
        done, _ = open_loop(replica, _requests(MIX, offered, 400, replica.kv_capacity_tokens, random.Random(3)))
        runs.append(sorted(r.ttft / s for r in done))
    assert runs[0] == pytest.approx(runs[1], rel=1e-9)


def test_the_table_agrees_with_fresh_runs_of_the_step_model_between_its_grid_points():
    table = profile(H100, LLAMA, MIX)
    u = 0.55
    medians = []
    for seed in (11, 12, 13):
        replica = Replica(H100, LLAMA)
        requests = _requests(MIX, u * table.saturation_rps, 2000, replica.kv_capacity_tokens, random.Random(seed))
        done, _ = open_loop(replica, requests)
        medians.append(np.median([r.ttft * 1000 for r in done[200:]]))
    lower, share = table.weights(np.asarray([u]))
    assert float(table.mix_of(table.ttft_ms, lower, share)[0, 50]) == pytest.approx(np.mean(medians), rel=0.2)


def test_the_duty_cycle_reads_busy_at_a_fifth_of_capacity_while_the_batch_and_kv_cache_track_the_work():
    table = profile(H100, LLAMA, MIX)
    fifth, most = (table.weights(np.asarray([u])) for u in (0.2, 0.85))
    at = lambda column, point: float(table.mix_of(column, *point)[0])  # noqa: E731
    assert at(table.busy, fifth) > 0.85  # vLLM #6105: 94 % at one concurrent request
    assert at(table.busy, most) - at(table.busy, fifth) < 0.1
    assert at(table.running, most) > 10 * at(table.running, fifth)
    assert at(table.kv_usage, most) > 10 * at(table.kv_usage, fifth)


def test_at_contention_scale_zero_no_node_slows_a_replica_so_even_load_changes_nothing():
    """Placement can still change latency at scale 0, through start-up (a pod on a node without its
    image pulls it first); through contention it cannot."""
    scenario = replace(SMALL, contention=replace(SMALL.contention, scale=0.0))
    for name in ("stock", "spread", "gpu-balancer"):
        metrics = run_policy(scenario, name, 2).metrics
        assert metrics["ttft_p99_ms"] == metrics["ttft_p99_at_even_contention_ms"]


def test_a_training_worker_behind_a_replicas_pcie_switch_slows_it_and_the_scale_multiplies_it():
    scenario = replace(SMALL, training=replace(SMALL.training, jobs_per_hour=0.0))
    slowed = {}
    for scale in (0.0, 1.0, 2.0):
        world = build_world(replace(scenario, contention=replace(scenario.contention, scale=scale)), 1)
        node = next(iter(world.nodes))
        (worker,) = training_pods(world, "train-x", 1, 1)  # GPU 0; the replica gets GPU 1, same switch
        bind(world, worker, node)
        replica = service_pod(world, next(iter(world.services.values())))
        bind(world, replica, node)
        measure(world)
        slowed[scale] = world.serving[-1][f"inference/{replica.obj['metadata']['name']}"].ttft_p95_s
    assert slowed[0.0] < slowed[1.0] < slowed[2.0]


def test_the_exporters_report_a_preallocated_framebuffer_and_a_busy_duty_cycle_not_the_work():
    world = placed_world()
    samples = [s for s in observed_samples(world) if s.pod is not None]
    assert samples
    loads = {f"{p.obj['metadata']['namespace']}/{p.obj['metadata']['name']}": p.load for p in world.pods.values()}
    for sample in samples:
        assert sample.fb_used_mib == pytest.approx(0.9 * 80 * 1024, rel=0.01)
        if loads[f"{sample.pod.namespace}/{sample.pod.name}"] >= 0.2:
            assert sample.util_percent > 80


def test_a_pod_bound_after_the_first_tick_serves_only_after_its_pull_load_and_start_and_pulls_once_per_node():
    world = build_world(SMALL, 1)
    world.tick = 4
    service = next(iter(world.services.values()))
    node = next(iter(world.nodes))
    first, second = service_pod(world, service), service_pod(world, service)
    bind(world, first, node)
    bind(world, second, node)
    weights = LLAMA.weight_bytes / SMALL.serving.weight_load_bytes_per_second
    assert first.ready_at - world.now_seconds == pytest.approx(
        service.image_bytes / SMALL.serving.image_pull_bytes_per_second + weights + SMALL.serving.startup_seconds)
    assert second.ready_at - world.now_seconds == pytest.approx(weights + SMALL.serving.startup_seconds)
    measure(world)
    assert first.load == 0.0 and f"inference/{first.obj['metadata']['name']}" not in world.serving[-1]
    assert ready_seconds(world, first, node) < first.ready_at - world.now_seconds


def test_an_evicted_replicas_requests_in_flight_are_retried_and_counted():
    world = placed_world()
    before = world.llm.tally.requests
    busiest = max((p for p in world.pods.values() if p.service), key=lambda p: p.load)
    recreate(world, busiest)
    assert world.llm.lost and world.llm.lost[0][1] > 0
    world.tick += 1
    measure(world)
    assert world.llm.tally.retried > 0 and world.llm.tally.requests > before


def test_the_oracle_books_what_it_places_at_once():
    world = build_world(SMALL, 1)
    oracle = make_policy("oracle", 1)
    service = max(world.services.values(), key=lambda s: s.demand)
    chosen = []
    for _ in range(3):
        pod = service_pod(world, service)
        node = oracle.place(world, pod)
        bind(world, pod, node)
        chosen.append(node)
    assert len(set(chosen)) == 3


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\nserving: {model: GPT-9}", "serving.model: unknown model 'GPT-9'; known: Llama-3.1-8B"),
    ("name: x\nserving: {model: Llama-3.1-8B}\nfleet: {pools: [{name: m, migProfile: 1g.10gb, instancesPerGpu: 7}]}",
     "pool 'm' gives each pod one H100-80GB 1g.10gb: Llama-3.1-8B leaves too little room for its KV cache"),
    ("name: x\ncontention: {scale: -1}", "contention.scale: out of range"),
    ("name: x\nfleet: {pools: [{name: s, sharing: vgpu, replicasPerGpu: 2}]}", "fleet.pools[0].sharing: out of range"),
    ("name: x\nserving: {model: Llama-3.1-8B}\nfleet: {pools: [{name: s, sharing: time-slicing, replicasPerGpu: 2, "
     "labels: {nvidia.com/gpu.product: NVIDIA-L4}}]}", "gives each pod 1/2 of one L4: Llama-3.1-8B leaves too little room"),
    ("name: x\nserving: {model: Llama-3.1-8B, ttftSloMs: 0}", "serving.ttftSloMs: out of range"),
])
def test_a_bad_serving_world_is_refused_naming_the_field(text, message):
    with pytest.raises(PolicyError, match=re.escape(message)):
        load_scenario(text)


def test_a_node_product_label_names_its_gpu():
    assert gpu_of_product("NVIDIA-H100-80GB-HBM3").name == "H100-80GB"
    assert gpu_of_product("NVIDIA-L4").name == "L4"
    assert gpu_of_product("NVIDIA-H100-80GB-HBM3-SHARED").name == "H100-80GB"  # GFD's name for a shared GPU
    with pytest.raises(KeyError, match="unknown GPU"):
        gpu_of_product("NVIDIA-B300")


def test_simulate_reports_request_level_figures_and_takes_a_contention_scale(tmp_path, capsys):
    from gpu_balancer.cli import main

    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: tiny-llm\nhours: 0.1\nfleet: {nodes: 4}\ninference: {services: 4}\n"
                        "serving: {model: Llama-3.1-8B}\n")
    assert main(["simulate", "--scenario-file", str(scenario), "--output", "json", "--contention-scale", "0"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert set(results) == {"stock", "spread", "lownodeutilization-actual", "load-aware", "gpu-balancer",
                            "coolest-node"}
    for metrics in results.values():
        assert {"ttft_p99_ms", "tpot_p99_ms", "slo_attainment", "ttft_p99_at_even_contention_ms", "node_util_cov",
                "evictions"} <= set(metrics)
        assert 0 < metrics["slo_attainment"] <= 1
    assert main(["simulate", "--scenario", "llm-fleet", "--contention-scale", "11"]) == 2
    assert "--contention-scale: 11 is out of range" in capsys.readouterr().err
    assert ServingShape().model == ""  # the old world stays the default


@pytest.mark.parametrize(("predicted", "score"), [(0, 40), (50, 33), (130, 0), (40, 100), (20, 70)])
def test_load_aware_scores_a_node_as_target_load_packing_does(predicted, score):
    # The first three are scheduler-plugins' own TargetLoadPacking cases (new node, hot node,
    # excess utilisation) at its default target of 40 %.
    assert target_load_packing(predicted, 40.0) == score


def test_load_aware_packs_a_warm_node_up_to_its_target_then_counts_what_it_just_placed():
    world = build_world(SMALL, 1)
    warm, idle, *rest = sorted(world.nodes)
    world.history = [{warm: 20.0, idle: 0.0, **{n: 95.0 for n in rest}}] * 12
    policy = make_policy("load-aware", 1)
    services = sorted(world.services.values(), key=lambda s: s.name)
    first = service_pod(world, services[0])
    assert policy.place(world, first) == warm  # 20 % + its 12.5 % stays under the 40 % target
    bind(world, first, warm)
    policy.bound(world, first, warm)
    second = service_pod(world, services[1])
    assert policy.place(world, second) == idle  # the warm node would pass the target now


def shared_pair_ttft(sharing: str, scale: float, together: bool) -> tuple[float, object]:
    """Two replicas on one node's one GPU shared two ways (or on two nodes): the first's TTFT p95
    after three ticks, and the world."""
    shared = replace(named("llm-shared-gpus"), fleet=FleetShape(pools=(
        PoolShape("shared", 2, 1, sharing=sharing, replicas_per_gpu=2),)), inference=InferenceShape(services=2))
    world = build_world(replace(shared, contention=replace(shared.contention, scale=scale)), 1)
    first, second = list(world.nodes)
    pods = [service_pod(world, service) for service in world.services.values()]
    bind(world, pods[0], first)
    bind(world, pods[1], first if together else second)  # a node's two units are its one GPU
    for tick in range(3):  # the neighbour's turn is what it ran the tick before
        world.tick = tick
        for pod in pods:
            pod.ready_at = 0.0
        measure(world)
    return world.serving[-1][f"inference/{pods[0].obj['metadata']['name']}"].ttft_p95_s, (world, first, pods)


def test_under_mps_replicas_sharing_a_gpu_slow_each_other_less_than_taking_turns():
    alone, _ = shared_pair_ttft("mps", 1.0, together=False)
    mps, _ = shared_pair_ttft("mps", 1.0, together=True)
    sliced, _ = shared_pair_ttft("time-slicing", 1.0, together=True)
    assert alone < mps < sliced


def test_replicas_time_sliced_on_one_gpu_take_turns_on_it_and_at_scale_zero_they_do_not():
    ttft = {}
    for scale, together in ((1.0, True), (1.0, False), (0.0, True)):
        ttft[scale, together], (world, first, pods) = shared_pair_ttft("time-slicing", scale, together)
        if together:
            (gpu,) = {world.gpu_readings[-1][first][unit] for unit in (0, 1)}  # both units report the one GPU
            assert gpu.fb_used_mib == pytest.approx(0.9 * 80 * 1024, rel=0.01)  # 0.45 of it each
            assert {world.gpu_util[-1][first][unit][1] for unit in (0, 1) if world.gpu_util[-1][first][unit]} <= {
                f"inference/{p.obj['metadata']['name']}" for p in pods}
    assert ttft[1.0, True] > 1.3 * ttft[1.0, False]
    assert ttft[0.0, True] == pytest.approx(ttft[1.0, False], rel=1e-9)


def test_the_serving_worlds_tick_reads_in_one_screen():
    """`measure` routes traffic, builds each node's units, scrapes them and serves the rows: each
    a function of its own, so the tick is read top to bottom (issue 45: under 80 lines)."""
    import inspect

    from sim.llm import world

    assert len(inspect.getsource(world.measure).splitlines()) < 80
