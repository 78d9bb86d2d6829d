"""GPU failures and node losses in the serving world (issue 46): at the Llama 3 run's rates, with
what dcgm-exporter shows of each (XID 48 kept listed, XID 79 gone from the series), the device
plugin's allocatable, and the lost pods made again."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scoring.policy import PolicyError
from sim.engine import build_world, step_workloads, taken_units
from sim.llm import failures
from sim.llm.world import measure
from sim.policies import make_policy
from sim.policies.exporters import observed_samples
from sim.scenario import Conditions, Failures, named, overridden
from tests.sim.test_serving_world import SMALL, placed

LLAMA3 = {"gpu_interruptions": 148 + 72, "days": 54, "gpus": 16_384}
"""Dubey et al. 2024, table 5: faulty GPUs and HBM3 over the run's 54 days on 16,384 H100s."""


def test_the_rates_are_the_llama_3_runs_and_a_two_hour_fleet_rarely_sees_one():
    shape = Failures(enabled=True)
    assert shape.gpu_failures_per_gpu_day == pytest.approx(
        LLAMA3["gpu_interruptions"] / LLAMA3["days"] / LLAMA3["gpus"], rel=0.01)
    expected = shape.gpu_failures_per_gpu_day * 96 * 8 * 2 / 24
    assert expected == pytest.approx(0.016, abs=0.001)
    drawn = [failures.draw_plan(shape, {f"n{i}": 8 for i in range(96)}, 2.0, seed) for seed in range(1, 201)]
    share_with_any = sum(bool(p.gpu_failures) for p in drawn) / len(drawn)
    assert share_with_any < 0.06  # a Poisson count of mean 0.016 is 0 on ~98 % of seeds


def failing(xid: int):
    """SMALL placed, then GPU 0 of its first busy node failing with `xid` at the next tick."""
    world = placed(replace(SMALL, conditions=Conditions(failures=Failures(enabled=True))), ticks_run=2)
    node = next(p.node for p in world.pods.values() if p.service and world.llm.units_of[
        f"{p.obj['metadata']['namespace']}/{p.obj['metadata']['name']}"][0] == 0)
    victim = next(p for p in world.pods.values() if p.node == node
                  and world.llm.units_of.get(f"{p.obj['metadata']['namespace']}/{p.obj['metadata']['name']}") == (0,))
    at = world.now_seconds + world.scenario.tick_seconds
    world.llm.failures.gpu_failures = (failures.GpuFailure(at, node, 0, xid, at + 600),)
    before = world.nodes[node].allocatable["nvidia.com/gpu"]
    world.tick += 1
    step_workloads(world)
    measure(world)
    return world, node, victim, before


@pytest.mark.parametrize("xid", [failures.XID_DOUBLE_BIT_ECC, failures.XID_FALLEN_OFF_BUS])
def test_a_failed_gpu_loses_its_pod_leaves_allocatable_and_shows_as_the_exporter_shows_it(xid):
    world, node, victim, before = failing(xid)
    assert world.pods.get(f"inference/{victim.obj['metadata']['name']}") is None, "its pod is made again"
    assert world.nodes[node].allocatable["nvidia.com/gpu"] == before - 1
    assert 0 in {u for held in taken_units(world, node) for u in held}, "the device plugin never gives it"
    samples = [s for s in observed_samples(world) if s.node == node]
    listed = {s.gpu: s for s in samples}
    if xid == failures.XID_FALLEN_OFF_BUS:
        assert "0" not in listed, "NVML no longer sees it: its series vanish"
    else:
        assert listed["0"].last_xid == 48 and all(s.last_xid == 0 for g, s in listed.items() if g != "0")
        for _ in range(3):  # past the telemetry lag, gpu-balancer reads the node as unhealthy
            world.tick += 1
            step_workloads(world)
            measure(world)
        _, _, telemetry, _ = make_policy("gpu-balancer", 1).telemetry(world)
        avoided = {a.node: a for a in telemetry.index.avoided}
        assert avoided[node].unhealthy
    # Repaired: the GPU is back in allocatable.
    world.tick += 25
    step_workloads(world)
    assert world.nodes[node].allocatable["nvidia.com/gpu"] == before and not world.llm.failures.failed


def test_a_lost_node_goes_with_its_pods_and_comes_back():
    world = placed(replace(SMALL, conditions=Conditions(failures=Failures(enabled=True))), ticks_run=2)
    node = sorted(world.nodes)[0]
    held = [p.obj["metadata"]["name"] for p in world.pods.values() if p.node == node]
    at = world.now_seconds + world.scenario.tick_seconds
    world.llm.failures.node_losses = (failures.NodeLoss(at, node, at + 300),)
    world.tick += 1
    step_workloads(world)
    assert node in world.down and world.nodes[node].unschedulable
    assert held and not any(p.node == node for p in world.pods.values())
    world.tick += 10
    step_workloads(world)
    assert node not in world.down and not world.nodes[node].unschedulable


def test_switched_off_or_with_no_failure_drawn_the_world_is_as_it_was():
    on = replace(SMALL, conditions=Conditions(failures=Failures(enabled=True)))
    assert not failures.draw_plan(on.conditions.failures, {n: 8 for n in build_world(on, 1).nodes}, 0.5, 1).gpu_failures
    assert placed(on, 3).llm.tally.ttft.weights.tolist() == placed(SMALL, 3).llm.tally.ttft.weights.tolist()
    assert named("llm-degraded-gpus").conditions.failures.enabled


def test_bad_fields_get_a_clear_error():
    with pytest.raises(PolicyError, match="gpuRepairHours"):
        overridden(SMALL, "conditions.failures.gpuRepairHours", "0")
