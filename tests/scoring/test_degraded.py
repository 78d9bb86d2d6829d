"""Degraded GPUs (issue 47, item 3): a GPU whose SM clock under load sits well under its model's
median warms its node, with the GPU and its clock in the reason, and heats it from half its GPUs.
Read from the serving world's own exporter text through a real Prometheus, raw and through the
recording rules, and held against what the in-process aggregates make of the same GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scoring import dcgm
from scoring.advice.placement import advise, index_fleet
from scoring.heat import FleetHeat, Tier, fleet_heat, node_heat
from scoring.ingest.series import aggregate_samples, build_snapshot
from scoring.ingest.signals.degraded import Args, Degraded, degraded_gpus
from scoring.ingest.signals.registry import configured
from scoring.ingest.telemetry import GpuSample, NodeTelemetry
from scoring.policy import HeatPolicy, PlacementPolicy, PolicyError, parse_policy
from sim.llm.exposition import dcgm_text, ticks
from sim.policies import observed_samples
from sim.scenario import Conditions, DegradedGpus
from tests.scoring.test_throttling import read_through_prometheus
from tests.sim.test_serving_world import SMALL, placed
from tests.webhook.helpers import NOW, node


def samples(clocks: dict[tuple[str, int], float], *, util: float = 90.0, reasons: int = 0) -> list[GpuSample]:
    """Three 8-GPU nodes of one model at 1,980 MHz under load, but for the clocks given."""
    return [GpuSample(node=f"n{n}", gpu=str(g), model="NVIDIA H100 80GB HBM3", util_percent=util,
                      sm_clock_mhz=clocks.get((f"n{n}", g), 1980.0), clock_reasons=reasons)
            for n in range(3) for g in range(8)]


def judged(found: list[GpuSample], args: Args = Args()) -> dict[str, NodeTelemetry]:
    signal = Degraded(args)
    rows = signal.aggregate(found)
    read = signal.read(rows, lambda row: row.labels.get("node", ""))
    return {name: NodeTelemetry(name, 8, util_sum=8 * 30.0, util_count=8, util_max=30.0,
                                readings=tuple(sorted(fields["readings"].items())))
            for name, fields in read.items()}


def test_a_gpu_well_under_its_peers_clock_warms_its_node_and_says_which_and_how_slow():
    nodes = judged(samples({("n1", 3): 1320.0}))
    assert list(nodes) == ["n1"]
    assert degraded_gpus(nodes["n1"]) == [("3", 1320.0, 1980.0)]
    heat = node_heat(nodes["n1"], HeatPolicy())
    assert heat.tier is Tier.WARM
    assert "GPU 3 degraded: clock 1,320 of 1,980 MHz under load" in heat.reasons


def test_half_its_gpus_degraded_heats_a_node():
    nodes = judged(samples({("n0", g): 900.0 for g in range(4)}))
    assert node_heat(nodes["n0"], HeatPolicy()).tier is Tier.HOT


@pytest.mark.parametrize("clocks", [
    {("n1", 3): 1800.0},  # 9 % under: the published spread between GPUs of one model, not a fault
    {},
])
def test_the_published_spread_is_not_degraded(clocks):
    assert judged(samples(clocks)) == {}


def test_an_idle_gpu_and_a_power_capped_one_are_not_judged_by_their_clock():
    assert judged(samples({("n1", 3): 300.0}, util=10.0)) == {}  # idle: clocks parked
    assert judged(samples({("n1", 3): 1320.0}, reasons=0x4)) == {}  # the throttling signal's to judge


def test_the_threshold_is_an_argument_with_a_clear_error():
    assert judged(samples({("n1", 3): 1700.0}), Args(clock_share_of_peers=0.9))
    with pytest.raises(PolicyError, match="clockShareOfPeers"):
        configured(parse_policy("heat:\n  signals:\n  - name: degraded\n    args: {clockShareOfPeers: 1.5}\n").heat)


def outlier_world():
    """SMALL with a quarter of its GPUs 1.5× slower (the published outliers' stretch), so some are
    under load in the first ticks; no hardware-slowdown episodes."""
    shape = DegradedGpus(enabled=True, outlier_share=0.25, slowdown_share=0.0)
    return placed(replace(SMALL, conditions=Conditions(degraded_gpus=shape)), ticks_run=3)


@pytest.mark.parametrize("recorded", [False, True])
def test_outlier_gpus_read_degraded_through_prometheus_as_in_process(prometheus, recorded):
    world = outlier_world()
    snapshot, policy = read_through_prometheus(prometheus, dcgm_text(world, ticks(world) - 1), recorded=recorded,
                                               record="degraded_clocks", metric=dcgm.SM_CLOCK)
    in_process = build_snapshot(aggregate_samples(observed_samples(world, lag=0)), taken_at=snapshot.taken_at)
    expected = {n.name: degraded_gpus(n) for n in in_process.nodes if degraded_gpus(n)}
    assert expected, "the scenario put no outlier GPU under load"
    read = {n.name: degraded_gpus(n) for n in snapshot.nodes if degraded_gpus(n)}
    # The exporter writes whole MHz; the in-process samples keep the fraction.
    assert {n: [u for u, *_ in found] for n, found in read.items()} == {n: [u for u, *_ in found]
                                                                        for n, found in expected.items()}
    assert all(abs(a - b) <= 1 for n, found in read.items() for got, want in zip(found, expected[n])
               for a, b in zip(got[1:], want[1:]))
    fleet = fleet_heat(snapshot, policy.heat, now=snapshot.taken_at, staleness_limit_seconds=1e9)
    said = {n.name: [r for r in n.reasons if " degraded: clock " in r] for n in fleet.nodes}
    assert all(said[name] for name in expected)


def test_a_node_with_a_degraded_gpu_is_excluded_for_new_pods_wherever_they_fit_elsewhere():
    """Its degraded GPU is the one a new pod there is likely given (the descheduler moved its pod
    off, or it ended), so the node is excluded as an unhealthy one is, and never preferred; where
    no other node has room, the pod is told why it was left open."""
    slow = node_heat(judged(samples({("n1", 3): 1320.0}))["n1"], HeatPolicy())
    assert slow.tier is Tier.WARM and slow.gpus_free == 8

    def advice(other_allocated: int):
        others = (node("n0", util=40, allocated=other_allocated), node("n2", util=40, allocated=other_allocated))
        return advise(index_fleet(FleetHeat(NOW, False, 3.0, (slow, *others))), gpus_requested=1, pending_gpus={},
                      policy=PlacementPolicy())

    roomy = advice(0)
    assert roomy.excluded == ("n1",) and "n1" not in {p.node for p in roomy.preferred}
    assert [a.reason for a in roomy.avoided] == ["warm, degraded: GPU 3"]
    full = advice(8)
    assert full.excluded == () and full.left_open == "not excluded: no other node has room for the pod"
