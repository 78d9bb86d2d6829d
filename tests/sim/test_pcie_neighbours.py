"""PCIe neighbours (issue 46): each GPU's host↔device traffic crosses its switch's uplink, a ready
replica loses `stretchAtFullUplink` of step time times its neighbours' share of that uplink, and
dcgm-exporter shows each GPU's traffic as a real one does, never which GPUs share a switch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scoring import dcgm
from sim.llm import pcie
from sim.llm.exposition import dcgm_text, ticks
from sim.policies import observed_samples
from sim.scenario import Conditions, FleetShape, InferenceShape, PcieNeighbours, TrainingShape, named, overridden
from tests.sim.test_serving_world import placed

SHAPE = PcieNeighbours(enabled=True)


def test_an_offloading_training_gpu_slows_the_replica_behind_its_switch_by_its_share_of_the_uplink():
    traffic = {0: pcie.serving_traffic(SHAPE), 1: pcie.training_traffic(SHAPE, offloading=True),
               2: pcie.serving_traffic(SHAPE)}
    neighbour = pcie.training_traffic(SHAPE, offloading=True).total
    assert neighbour == pytest.approx(SHAPE.loader_bytes_per_second + SHAPE.offload_bytes_per_second)
    assert pcie.stretch(SHAPE, traffic, [0], 2) == pytest.approx(
        SHAPE.stretch_at_full_uplink * neighbour / SHAPE.uplink_bytes_per_second)
    assert pcie.stretch(SHAPE, traffic, [2], 2) == 0.0  # another switch: its uplink is its own
    # Its own traffic is not its neighbours': a replica alone on its switch loses nothing.
    assert pcie.stretch(SHAPE, {0: pcie.training_traffic(SHAPE, True)}, [0], 2) == 0.0


def test_a_full_uplink_costs_the_whole_stretch_and_no_more():
    flooded = {1: pcie.Traffic(10 * SHAPE.uplink_bytes_per_second, 0.0)}
    assert pcie.stretch(SHAPE, flooded, [0], 2) == pytest.approx(SHAPE.stretch_at_full_uplink)


def test_data_loaders_alone_barely_load_a_gen4_uplink():
    """A loader's 0.4 GB/s is 0.6 % of the uplink: a finding the scenario's figures carry."""
    traffic = {1: pcie.training_traffic(SHAPE, offloading=False)}
    assert pcie.stretch(SHAPE, traffic, [0], 2) < 0.002


def test_which_jobs_offload_is_a_draw_of_its_own_near_the_share():
    drawn = [pcie.offloads(SHAPE, 1, f"train-{j:05d}") for j in range(2000)]
    assert 0.45 < sum(drawn) / len(drawn) < 0.55
    assert drawn == [pcie.offloads(SHAPE, 1, f"train-{j:05d}") for j in range(2000)]


def pcie_world(enabled: bool = True):
    """Four A100 nodes, a few replicas, two-worker training jobs that all offload, started at once."""
    base = named("llm-pcie-neighbours")
    scenario = replace(base, hours=0.5, fleet=FleetShape(pools=(replace(base.fleet.pools[0], nodes=4),)),
                       inference=InferenceShape(services=6, mean_demand_fraction=0.3),
                       training=TrainingShape(jobs_per_hour=240.0, workers=(2,), gpus_per_worker=1),
                       conditions=Conditions(pcie_neighbours=PcieNeighbours(enabled=enabled, offload_share=1.0)))
    return placed(scenario, ticks_run=3)


def test_the_exporter_shows_each_gpus_traffic_as_dcgm_exporter_does():
    world = pcie_world()
    text = dcgm_text(world, ticks(world) - 1)
    samples = {(s.node, s.gpu): s for s in observed_samples(world, lag=0)}
    training = [s for s in samples.values() if s.pod and s.pod.name.startswith("train-")]
    assert training, "no training worker started"
    want = pcie.training_traffic(world.scenario.conditions.pcie_neighbours, offloading=True)
    for sample in training:
        assert (sample.pcie_rx_bytes, sample.pcie_tx_bytes) == pytest.approx((want.rx, want.tx))
        line = next(line for line in text.splitlines() if line.startswith(dcgm.PCIE_RX_BYTES + "{")
                    and f'gpu="{sample.gpu}"' in line and sample.node in line)
        assert float(line.rsplit(" ", 1)[1]) == pytest.approx(want.rx, rel=1e-6)
    assert "switch" not in text  # no exporter says which GPUs share a switch


def test_without_the_condition_no_pcie_series_are_exported():
    world = pcie_world(enabled=False)
    assert dcgm.PCIE_RX_BYTES not in dcgm_text(world, ticks(world) - 1)
    assert all(s.pcie_rx_bytes is None for s in observed_samples(world, lag=0))


def test_the_condition_switches_off_with_one_key():
    scenario = overridden(named("llm-pcie-neighbours"), "conditions.pcieNeighbours.enabled", "false")
    assert not scenario.conditions.pcie_neighbours.enabled
    assert scenario.fleet == named("llm-pcie-neighbours").fleet
