"""Every scenario on the serving world: the model each pool's services serve, MIG slices, the
retired queue-law fields, and every built-in scenario reporting the serving figures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scoring.cluster.images import MODEL_BYTES_ANNOTATION
from scoring.policy import PolicyError
from sim.engine import _scale, bind, build_world, delete_pod, service_pod
from sim.llm.hardware import GIB, gpu_named, mig_slice, model_named
from sim.llm.world import gpu_of_node, tdp_w
from sim.run import run_policy
from sim.scenario import BUILT_IN, PoolShape, kv_tokens, load_scenario, named, service_model

SERVING_FIGURES = {"ttft_p99_ms", "tpot_p99_ms", "slo_attainment", "node_util_cov", "evictions"}


def test_a_mig_instance_is_its_share_of_the_board():
    h100 = gpu_named("H100-80GB")
    small = mig_slice(h100, "1g.10gb")
    assert small.memory_bytes == 10 * GIB
    assert small.bandwidth_bytes_per_s == pytest.approx(h100.bandwidth_bytes_per_s / 8)
    assert small.bf16_flops == pytest.approx(h100.bf16_flops / 7)
    assert tdp_w(small) == pytest.approx(700 / 7)
    assert small.aliases == h100.aliases, "DCGM names an instance by its board's modelName"
    assert mig_slice(h100, "7g.80gb").memory_bytes == h100.memory_bytes
    with pytest.raises(ValueError, match="<c>g.<m>gb"):
        mig_slice(h100, "big")


def test_each_pool_serves_the_largest_default_model_that_fits_its_units():
    scenario = named("mixed-pools")
    pools = {p.name: p for p in scenario.fleet.pool_shapes()}
    assert service_model(scenario, (pools["h100"],)) == "Llama-3.1-8B"
    assert service_model(scenario, (pools["l4"],)) == "Llama-3.1-8B"
    assert service_model(scenario, (pools["mig"],)) == "Qwen2.5-1.5B"
    assert kv_tokens(pools["mig"], "Llama-3.2-3B") < kv_tokens(pools["mig"], "Qwen2.5-1.5B")
    halved_l4 = PoolShape("l4", labels={"nvidia.com/gpu.product": "NVIDIA-L4"}, sharing="time-slicing",
                          replicas_per_gpu=2)
    assert service_model(scenario, (halved_l4,)) == "Llama-3.2-3B"


def test_the_mig_pool_runs_its_small_model_on_slices_and_says_so_to_the_advice():
    world = build_world(named("mixed-pools"), 1)
    mig_node = next(n for n in world.nodes if n.startswith("mig-"))
    assert gpu_of_node(world, mig_node).name == "H100-80GB 1g.10gb"
    assert gpu_of_node(world, "l4-000").name == "L4"
    service = next(s for s in world.services.values() if s.pool is not None and s.pool.mig_profile)
    pod = service_pod(world, service)
    assert service.model == "Qwen2.5-1.5B"
    assert pod.obj["metadata"]["annotations"][MODEL_BYTES_ANNOTATION] == str(int(model_named("Qwen2.5-1.5B").weight_bytes))


def test_a_model_that_leaves_no_room_for_its_cache_is_refused_by_field():
    text = "serving: {model: Llama-3.1-8B}\nfleet: {pools: [{name: mig, migProfile: 1g.10gb, instancesPerGpu: 7}]}"
    with pytest.raises(PolicyError, match="fleet.pools: pool 'mig' gives each pod one H100-80GB 1g.10gb: "
                                          "Llama-3.1-8B leaves too little room"):
        load_scenario(text)


def test_a_scenario_file_of_the_queue_law_world_still_loads_and_runs_as_llm_replicas():
    old = load_scenario("name: old\nhours: 0.1\nfleet: {nodes: 4}\ninference: {services: 4, latencySensitiveShare: 0.5, "
                        "sensitiveServiceTimeMs: 80, sensitiveContention: 3, servingMetrics: true}\n")
    metrics = run_policy(old, "stock", 1).metrics
    assert SERVING_FIGURES <= set(metrics) and "ttft_p99_sensitive_ms" in metrics


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_built_in_scenario_reports_the_serving_figures_and_repeats_itself(name):
    scenario = replace(named(name), hours=0.1)
    first = run_policy(scenario, "gpu-balancer", 2).metrics
    assert SERVING_FIGURES <= set(first)
    assert first["ttft_p99_ms"] > 0 and 0 < first["slo_attainment"] <= 1
    assert run_policy(scenario, "gpu-balancer", 2).metrics == first


def _ready_replicas(count: int):
    world = build_world(replace(named("llm-fleet"), fleet=replace(named("llm-fleet").fleet, nodes=2),
                                inference=replace(named("llm-fleet").inference, services=1)), 1)
    service = next(iter(world.services.values()))
    for pod in [p for p in world.pods.values()]:
        delete_pod(world, pod)
    pods = [service_pod(world, service) for _ in range(count)]
    for i, pod in enumerate(pods):
        bind(world, pod, f"gpu-node-00{i % 2}")
    world.tick = 10  # every one of them ready (bound at tick 0, before the window opened)
    return world, service, pods


def test_the_autoscaler_takes_not_ready_pods_first_and_the_newest_of_the_rest():
    world, service, pods = _ready_replicas(4)
    starting = service_pod(world, service)
    bind(world, starting, "gpu-node-000")  # bound now: pulling and loading, not ready
    _scale(world, service, [*pods, starting], 4)
    assert starting.obj["metadata"]["name"] not in {p.obj["metadata"]["name"] for p in world.pods.values()}
    _scale(world, service, pods, 3)
    assert [p for p in world.pods.values() if p.service == service.name] == pods[:3], "the newest goes"


def test_a_scale_down_during_a_rollout_keeps_the_surge_pod_and_takes_old_pods():
    world, service, pods = _ready_replicas(4)
    service.template_hash = "new0template"[:9]
    surge = service_pod(world, service)
    bind(world, surge, "gpu-node-001")
    _scale(world, service, [*pods, surge], 2)
    left = [p for p in world.pods.values() if p.service == service.name]
    assert surge in left and len(left) == 3, "two replicas, and the surge pod maxSurge allows"
    assert all(p in pods for p in left if p is not surge)


def test_services_pinned_to_no_pool_need_a_pool_to_run_on():
    with pytest.raises(PolicyError, match="inference.poolShares: the services pinned to no pool"):
        load_scenario("fleet: {pools: [{name: mig, migProfile: 1g.10gb, instancesPerGpu: 7}]}")
    pinned = load_scenario("fleet: {pools: [{name: mig, migProfile: 1g.10gb, instancesPerGpu: 7}]}\n"
                           "inference: {poolShares: [{pool: mig, share: 1}]}")
    assert service_model(pinned, pinned.fleet.pools) == "Qwen2.5-1.5B"
