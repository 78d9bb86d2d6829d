"""`gpu-balancer calibrate`: the contention estimator against scales planted in the serving world,
read from the simulator's exports directly and through a real Prometheus holding them."""

from __future__ import annotations

import json
import time
from dataclasses import fields, replace

import pytest

from gpu_balancer.backfill import openmetrics_blocks
from gpu_balancer.cli import main
from gpu_balancer.local_prometheus import LocalPrometheus
from calibration.estimate import (CalibrationError, Channels, GpuReading, NodeFrame, ReplicaReading, calibrate,
                                 estimate, exposures, samples_of)
from sim.calibration_series import channels_of, frames_of, openmetrics, simulated_world
from sim.scenario import ContentionShape, load_scenario
from tests.conftest import _require_prometheus

# A small serving world, fixed before any estimate was seen: 8 nodes of 8 H100s, 10 services of
# Llama-3.1-8B, half an hour (60 ticks) — the smallest fleet whose replicas ever share a PCIe
# switch with a replica loading its weights, the channel that carries the signal here.
SCENARIO = "name: cal-test\nhours: 0.5\nfleet: {nodes: 8}\ninference: {services: 10}\nserving: {model: Llama-3.1-8B}\n"


def planted(scale: float):
    scenario = load_scenario(SCENARIO)
    return replace(scenario, contention=replace(scenario.contention, scale=scale))


def test_the_estimators_channels_are_the_serving_worlds():
    shape = ContentionShape()
    for field in fields(Channels):
        if hasattr(shape, field.name):
            assert getattr(Channels(), field.name) == getattr(shape, field.name), field.name


def test_a_replicas_exposure_adds_its_nodes_channels_as_the_exporters_show_them():
    def gpu(index, pod, watts):
        return GpuReading(index, pod, watts, 700.0)

    replica = ReplicaReading("ns/a", "m", 0.02, 0.2, 8, 0.3)
    quiet = NodeFrame("H100", (gpu(0, "ns/a", 300), gpu(1, None, 70)), (replica,), allocatable_cores=64)
    assert exposures(quiet) == {"ns/a": 0.0}
    # A training worker behind the same switch (GPU 1, drawing like training): PCIe.
    beside = NodeFrame("H100", (gpu(0, "ns/a", 300), gpu(1, "ns/t", 665)), (replica,), allocatable_cores=64)
    assert exposures(beside) == {"ns/a": pytest.approx(0.05)}
    # Behind another switch, no PCIe; eight training-like GPUs' worth of power is over the budget.
    hot = NodeFrame("H100", (gpu(0, "ns/a", 700), *(gpu(i, "ns/t", 700) for i in (2, 3))), (replica,))
    assert exposures(hot)["ns/a"] == pytest.approx((2100 / (0.77 * 2100) - 1) * 0.45)
    # Host cores short: the replica's 2 and the worker's 32 against 24.
    short = NodeFrame("H100", (gpu(0, "ns/a", 300), gpu(2, "ns/t", 665)), (replica,), allocatable_cores=24)
    assert exposures(short)["ns/a"] == pytest.approx(34 / 24 - 1)


@pytest.mark.parametrize("scale", [0.0, 2.0])
def test_a_planted_scale_is_found_from_the_simulated_exports(scale):
    scenario = planted(scale)
    result = calibrate(frames_of(simulated_world(scenario, 1)), channels_of(scenario))
    assert result.tpot.exposed > 0 and result.tpot.samples > 1000
    assert abs(result.tpot.scale - scale) <= 0.1 * scale + 0.05
    low, high = result.tpot.interval
    assert low <= result.tpot.scale <= high


def test_samples_never_exposed_are_refused_with_the_reason():
    replica = ReplicaReading("ns/a", "m", 0.02, 0.2, 8, 0.3)
    frame = {"n": NodeFrame("H100", (GpuReading(0, "ns/a", 300, 700),), (replica,))}
    with pytest.raises(CalibrationError, match="none of the 30 replica samples was exposed"):
        estimate(samples_of([frame] * 30))
    with pytest.raises(CalibrationError, match="too few"):
        estimate(samples_of([frame] * 3))


def test_calibrate_reads_the_same_scale_back_through_a_real_prometheus(tmp_path, capsys):
    _require_prometheus()
    scenario = planted(2.0)
    world = simulated_world(scenario, 1)
    direct = calibrate(frames_of(world), channels_of(scenario))
    start = time.time() - scenario.hours * 3600 - 120
    data = tmp_path / "tsdb"
    if not openmetrics_blocks(openmetrics(world, start), data):
        pytest.skip("promtool is not installed")
    with LocalPrometheus([], storage=data) as prom:
        prom.wait_for("DCGM_FI_DEV_POWER_USAGE[3h]")
        fragment = tmp_path / "calibration.yaml"
        assert main(["calibrate", "--prometheus-url", prom.url, "--window", "1h", "--step", "30",
                     "--output", "json", "--write", str(fragment)]) == 0
    read = json.loads(capsys.readouterr().out)
    assert read["samples"] > 0.8 * direct.tpot.samples
    assert read["contention_scale"] == pytest.approx(direct.tpot.scale, rel=0.1)
    assert read["channels"] == ["host-cpu", "pcie", "power"]
    assert f"scale: {read['contention_scale']:.4g}" in fragment.read_text()


def test_simulate_runs_with_a_calibration_fragment_and_refuses_a_bad_one(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("hours: 0.5", "hours: 0.05"))
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("contention:\n  scale: 0\n")
    bad.write_text("contention: {scale: eleven}\n")
    assert main(["simulate", "--scenario-file", str(scenario), "--calibration", str(good), "--output", "json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    # At scale 0 even load changes nothing: the fragment's scale is the one that ran.
    assert all(m["ttft_p99_ms"] == pytest.approx(m["ttft_p99_at_even_contention_ms"]) for m in results.values())
    assert main(["simulate", "--scenario-file", str(scenario), "--calibration", str(bad)]) == 2
    assert "needs contention.scale, a number from 0 to 10" in capsys.readouterr().err
    assert main(["calibrate", "--from-simulation", str(tmp_path / "missing.yaml"), "--write", ""]) == 2
    assert "cannot read scenario" in capsys.readouterr().err
