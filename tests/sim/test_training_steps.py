"""Training step time (issue 46, item 5): a synchronous job runs at its slowest worker's pace, a
worker at its slowest GPU's clock, and its exposed all-reduce stretches where its workers span
NVLink domains, by the bandwidth nccl-tests measured inside a node and across two."""

from __future__ import annotations

import pytest

from sim.llm import training
from sim.scenario import TrainingShape
from tests.sim.test_pcie_neighbours import pcie_world

SHAPE = TrainingShape()


def test_the_slowest_worker_sets_the_pace():
    assert training.step_ratio(SHAPE, [1.0, 1.0, 1.5], cliques=1) == pytest.approx(1.5)


def test_a_power_cap_stretches_a_worker_as_its_clocks_fall():
    assert training.worker_stretch(1.1, power_excess=0.2) == pytest.approx(1.1 * 1.2)


def test_spanning_nvlink_domains_stretches_only_the_exposed_all_reduce():
    across = training.step_ratio(SHAPE, [1.0, 1.0], cliques=2)
    # 232.5 / 86 GB/s on a tenth of the step: 0.9 + 0.1 × 2.7.
    assert across == pytest.approx(1 - SHAPE.exposed_allreduce_share
                                   + SHAPE.exposed_allreduce_share * SHAPE.cross_clique_allreduce_stretch)
    assert training.step_ratio(SHAPE, [1.0, 1.0], cliques=1) == 1.0


def test_the_world_times_every_running_job_each_tick():
    world = pcie_world()
    running = {p.training_job for p in world.pods.values() if p.training_job and p.node}
    assert running and world.llm.training_steps
    assert all(step >= 1.0 for step in world.llm.training_steps)
