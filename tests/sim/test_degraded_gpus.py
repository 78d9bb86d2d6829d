"""Degraded GPUs in the serving world (issue 46): each GPU's own speed from the published spread,
hardware-slowdown episodes shown as a real GPU shows them, and GPUs that stay under the replica
that holds them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scoring import dcgm
from scoring.ingest.signals.throttling import Throttling
from sim.engine import bind, build_world, delete_pod, service_pod
from sim.llm.exposition import dcgm_text, ticks
from sim.llm.gpus import HW_SLOWDOWN, draw_conditions, lowest_free
from sim.llm.world import GPU_IDLE
from sim.policies import policies_for
from sim.policies.exporters import observed_samples
from sim.scenario import Conditions, DegradedGpus, named, overridden
from tests.sim.test_serving_world import SMALL, placed


def degraded(**shape) -> DegradedGpus:
    return DegradedGpus(enabled=True, **shape)


def with_condition(shape: DegradedGpus):
    return replace(SMALL, conditions=Conditions(degraded_gpus=shape))


def test_the_spread_of_speeds_is_the_published_one_and_its_outliers_are_as_slow_as_published():
    shape = degraded()
    stretch = np.asarray(list(draw_conditions(shape, {f"n{i}": 8 for i in range(2000)}, 2.0, 1).stretch.values()))
    outliers = stretch == shape.outlier_stretch
    # 8 % over the fastest on average (Sinha et al.), 1 % outliers at 1.5×.
    assert np.mean(stretch[~outliers] - 1) == pytest.approx(0.08, abs=0.003)
    assert outliers.mean() == pytest.approx(shape.outlier_share, abs=0.003)


def test_the_share_of_gpus_in_a_slowdown_episode_at_any_moment_is_the_scenarios():
    shape = degraded(slowdown_share=0.05)
    found = draw_conditions(shape, {f"n{i}": 8 for i in range(500)}, 2.0, 3)
    for now in (0.0, 3600.0, 7000.0):
        share = np.mean([found.slowed(node, gpu, now) for node, gpu in found.stretch])
        assert share == pytest.approx(0.05, abs=0.015), now
    assert draw_conditions(degraded(slowdown_share=0.0), {"n": 8}, 2.0, 3).episodes == {}


def test_a_hardware_slowdown_gpu_halves_its_clock_and_says_so_in_the_clock_event_reasons():
    world = placed(with_condition(degraded(speed_sigma=0.0, outlier_share=0.0, slowdown_share=1.0)), ticks_run=2)
    text = dcgm_text(world, ticks(world) - 1)
    samples = {name: {(s.labels["Hostname"], s.labels["gpu"]): s.value for s in family.samples}
               for family in text_string_to_metric_families(text) for name in [family.name]}
    clocks, reasons = samples[dcgm.SM_CLOCK], samples[dcgm.CLOCK_THROTTLE_REASONS]
    busy = [key for key, value in samples[dcgm.GPU_UTIL].items() if value > 0]
    assert busy
    assert all(clocks[key] <= 1980 * 0.5 and int(reasons[key]) & HW_SLOWDOWN for key in busy)
    assert all(int(reasons[key]) == GPU_IDLE | HW_SLOWDOWN for key in reasons if key not in busy)
    # The product reads the bit as heat: every node is hot (all its GPUs held down).
    node_reasons = Throttling().aggregate(observed_samples(world))
    assert {s.labels["node"] for s in node_reasons["heat_throttled"]} == set(world.nodes)


def test_a_slowed_gpu_stretches_its_replicas_steps_by_its_clock():
    slow = placed(with_condition(degraded(speed_sigma=0.0, outlier_share=0.0, slowdown_share=1.0)), ticks_run=2)
    well = placed(with_condition(degraded(speed_sigma=0.0, outlier_share=0.0, slowdown_share=0.0)), ticks_run=2)
    # The step time doubles, so TPOT doubles at least (a fuller batch on top).
    assert slow.llm.tally.tpot.quantile(0.5) >= 2 * well.llm.tally.tpot.quantile(0.5) * 0.99
    assert slow.llm.tally.ttft.quantile(0.5) > 2 * well.llm.tally.ttft.quantile(0.5) * 0.99


def test_switched_off_the_condition_leaves_the_world_as_it_was():
    on = named("llm-degraded-gpus")
    off = overridden(on, "conditions.degradedGpus.enabled", "false")
    assert build_world(off, 1).llm.conditions.stretch == {}
    # The scenario's failures are a condition too: only with both off does the reference go.
    assert "true-state" in policies_for(on) and "true-state" in policies_for(off)
    assert "true-state" not in policies_for(overridden(off, "conditions.failures.enabled", "false"))
    small_off = overridden(with_condition(degraded()), "conditions.degradedGpus.enabled", "false")
    assert placed(small_off, 2).llm.tally.ttft.weights.tolist() == placed(SMALL, 2).llm.tally.ttft.weights.tolist()


def test_a_replica_keeps_its_gpu_when_a_neighbour_leaves():
    world = build_world(SMALL, 1)
    node = next(iter(world.nodes))
    service = next(iter(world.services.values()))
    pods = [service_pod(world, service) for _ in range(3)]
    for pod in pods:
        bind(world, pod, node)
    keys = [f"{p.obj['metadata']['namespace']}/{p.obj['metadata']['name']}" for p in pods]
    assert [world.llm.units_of[k] for k in keys] == [(0,), (1,), (2,)]
    delete_pod(world, pods[0])
    assert world.llm.units_of[keys[2]] == (2,)
    newcomer = service_pod(world, service)
    bind(world, newcomer, node)
    assert world.llm.units_of[f"inference/{newcomer.obj['metadata']['name']}"] == (0,)  # the freed one


def test_the_device_plugin_hands_out_the_lowest_free_units():
    assert lowest_free([(0,), (2, 3)], 8, 2) == (1, 4)
    assert lowest_free([], 2, 4) == (0, 1)


def test_a_bad_condition_value_is_a_clear_error():
    from scoring.policy import PolicyError

    with pytest.raises(PolicyError, match="conditions.degradedGpus.slowdownClockShare: out of range"):
        overridden(named("llm-degraded-gpus"), "conditions.degradedGpus.slowdownClockShare", "0")
    with pytest.raises(PolicyError, match="conditions.degradedGpus.slowdownSeconds"):
        overridden(named("llm-degraded-gpus"), "conditions.degradedGpus.slowdownSeconds", "[60, 30]")
    with pytest.raises(PolicyError, match="conditions.coldStar: unknown field"):
        overridden(named("llm-degraded-gpus"), "conditions.coldStar.enabled", "true")


def test_the_report_counts_the_requests_that_met_a_degraded_gpu():
    from sim.run import run_policy

    every = replace(with_condition(degraded(speed_sigma=0.0, outlier_share=0.0, slowdown_share=1.0)), hours=0.1)
    none = replace(with_condition(degraded(speed_sigma=0.0, outlier_share=0.0, slowdown_share=0.0)), hours=0.1)
    # Every served request; those that waited for a first replica were served by none.
    assert 90 < run_policy(every, "stock", 1).metrics["requests_on_degraded_gpu_percent"] <= 100
    assert run_policy(none, "stock", 1).metrics["requests_on_degraded_gpu_percent"] == 0
    assert "requests_on_degraded_gpu_percent" not in run_policy(replace(SMALL, hours=0.1), "stock", 1).metrics


def _slowed_under_a_replica(episode_seconds: float):
    """SMALL placed, every GPU of the model's speed, the GPU under one replica in a slowdown for
    `episode_seconds` from now."""
    from sim.llm.gpus import GpuConditions

    world = placed(with_condition(degraded(speed_sigma=0.0, outlier_share=0.0, slowdown_share=0.0)), ticks_run=1)
    key, held = next((k, u) for k, u in world.llm.units_of.items() if world.pods[k].service)
    node = world.pods[key].node
    gpus = {(n, g): 1.0 for n in world.nodes for g in range(8)}
    world.llm.conditions = GpuConditions(gpus, {(node, held[0]): ((0.0, episode_seconds),)}, 0.5)
    return world, key


def test_true_state_moves_a_replica_off_a_gpu_that_stays_slow_long_enough_to_pay_and_only_then():
    from sim.policies import make_policy

    for episode, moved in ((36000.0, True), (60.0, False)):
        world, key = _slowed_under_a_replica(episode)
        make_policy("true-state", 1).deschedule(world)
        assert (key not in world.pods) == moved and world.evictions == int(moved), episode
