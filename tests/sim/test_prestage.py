"""Make-before-break in the simulated world: a descheduler pass's evictions wait for their images to
land on the destinations the plan reserved, as a real run's pre-pull pods make them wait."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from descheduler.proposals import PlannedEviction
from scoring.policy import default_policy
from sim.llm.world import image_fetch_seconds, start_seconds
from sim.node_state import image_name
from sim.policies.gpu_balancer import GpuBalancer
from tests.sim.test_serving_world import SMALL, placed


def _a_move(world):
    """A serving pod and a node of the fleet whose disk lacks its image."""
    for pod in world.pods.values():
        image = pod.obj["spec"]["containers"][0]["image"]
        lacking = [n for n in sorted(world.nodes) if n != pod.node and image_name(image) not in world.nodes[n].images]
        if pod.service and pod.node and lacking:
            namespace, name = pod.obj["metadata"]["namespace"], pod.obj["metadata"]["name"]
            return pod, PlannedEviction(namespace, name, pod.node, pod.service, "test", destination=lacking[0],
                                        stage=(image,))
    raise AssertionError("every node holds every image: no move to stage")


def _balancer(deadline_seconds: float) -> GpuBalancer:
    policy = default_policy()
    return GpuBalancer(random.Random(1), replace(policy, descheduler=replace(
        policy.descheduler, prestage_deadline_seconds=deadline_seconds)))


def _ticks_until_gone(world, balancer, key: str, limit: int = 60) -> int:
    """Ticks run (each the balancer's `tick`) until the pod is gone."""
    for ran in range(1, limit + 1):
        world.tick += 1
        balancer.tick(world)
        if key not in world.pods:
            return ran
    raise AssertionError(f"{key} still there after {limit} ticks")


def test_an_eviction_waits_for_its_image_to_land_on_the_destination_and_the_replacement_then_pulls_nothing():
    world = placed(SMALL)
    pod, move = _a_move(world)
    key, image = f"{move.namespace}/{move.pod}", image_name(move.stage[0])
    pull = image_fetch_seconds(world, world.services[pod.service], move.stage[0], move.destination)
    assert pull > 0
    balancer = _balancer(600)
    balancer.carry_out(world, (move,))
    assert key in world.pods and image not in world.nodes[move.destination].images, "nothing happens at once"
    ticks = _ticks_until_gone(world, balancer, key)
    assert ticks == math.ceil(pull / SMALL.tick_seconds)
    assert image in world.nodes[move.destination].images and world.evictions == 1
    replacement = next(p for p in world.pods.values() if p.service == pod.service and p.node is None)
    assert start_seconds(world, replacement, move.destination) == start_seconds(world, replacement, move.node), \
        "the destination readies it as fast as the node that ran it"


def test_a_pull_past_the_deadline_holds_the_eviction_only_until_the_deadline_and_leaves_no_image():
    world = placed(SMALL)
    _, move = _a_move(world)
    key, image = f"{move.namespace}/{move.pod}", image_name(move.stage[0])
    balancer = _balancer(SMALL.tick_seconds)  # one tick: under any pull of a serving image
    balancer.carry_out(world, (move,))
    assert _ticks_until_gone(world, balancer, key) == 1
    assert image not in world.nodes[move.destination].images


def test_an_eviction_with_nothing_to_stage_or_with_pre_staging_off_goes_at_once():
    for deadline, staged in ((600, False), (0, True)):
        world = placed(SMALL)
        _, move = _a_move(world)
        balancer = _balancer(deadline)
        balancer.carry_out(world, (move if staged else replace(move, stage=()),))
        assert f"{move.namespace}/{move.pod}" not in world.pods and world.evictions == 1
