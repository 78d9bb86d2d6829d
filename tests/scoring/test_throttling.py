"""Throttled clocks: a GPU whose power cap or heat holds its clocks down (NVML's clock-event
reasons, `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`) warms its node, and heats it once half its GPUs
are; the reason reaches the pod. Read from the serving world's own exporter text through a real
Prometheus, raw and through the recording rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from scoring import dcgm
from scoring.advice.placement import index_fleet
from scoring.heat import Tier, fleet_heat, node_heat
from scoring.ingest import recording
from scoring.ingest.prometheus import connect, read_snapshot
from scoring.ingest.series import aggregate_samples
from scoring.ingest.telemetry import ClusterSnapshot, NodeTelemetry
from scoring.policy import BalancerPolicy, HeatPolicy, default_policy
from sim.fake_dcgm import make_server, serve_in_background
from sim.llm.exposition import dcgm_text, ticks
from sim.policies import observed_samples
from tests.sim.test_serving_world import SMALL, placed

NOW = datetime(2026, 12, 4, tzinfo=timezone.utc)


def node(**throttled) -> NodeTelemetry:
    return NodeTelemetry("gpu-a", 8, util_sum=8 * 30.0, util_count=8, util_max=30.0, **throttled)


@pytest.mark.parametrize(("throttled", "tier", "reason"), [
    ({}, Tier.COOL, None),
    ({"gpus_power_capped": 2}, Tier.WARM, "throttled: power cap (2 of 8 GPUs held below their clocks)"),
    ({"gpus_power_capped": 4}, Tier.HOT, "throttled: power cap (4 of 8 GPUs held below their clocks)"),
    ({"gpus_heat_throttled": 8}, Tier.HOT, "throttled: heat (8 of 8 GPUs held below their clocks)"),
])
def test_held_down_clocks_warm_a_node_and_heat_it_from_half_its_gpus(throttled, tier, reason):
    heat = node_heat(node(**throttled), HeatPolicy())
    assert heat.tier is tier
    assert (reason in heat.reasons) if reason else heat.reasons == ()


def test_the_bits_are_read_as_nvml_defines_them():
    assert dcgm.has_reason(0x4, dcgm.POWER_CAP_REASONS) and dcgm.has_reason(0x80 | 0x1, dcgm.POWER_CAP_REASONS)
    assert not dcgm.has_reason(0x1, dcgm.POWER_CAP_REASONS)  # idle: clocks low because nothing runs
    assert dcgm.has_reason(0x40, dcgm.HEAT_REASONS) and not dcgm.has_reason(0x4, dcgm.HEAT_REASONS)


def power_capped_world():
    """SMALL with a node power budget of a fifth of the GPUs' TDP: every serving node crosses it."""
    return placed(replace(SMALL, contention=replace(SMALL.contention, gpu_power_budget_share=0.2)), ticks_run=3)


def read_through_prometheus(prometheus, text: str, *, recorded: bool, record: str, metric: str
                            ) -> tuple[ClusterSnapshot, BalancerPolicy]:
    """The snapshot a real Prometheus scraping `text` gives, raw or through the recording rules
    (waiting for `record`, else for every series of `metric`), and the policy that read it."""
    server = make_server(text, port=0)
    serve_in_background(server)
    try:
        prom = prometheus(f"127.0.0.1:{server.server_port}", recorded=recorded)
        policy = replace(default_policy(), prometheus=replace(default_policy().prometheus, url=prom.url))
        if recorded:
            prom.wait_for(recording.snapshot_record(record))
        else:
            prom.wait_for(metric, at_least=text.count(f"\n{metric}{{"))
        return read_snapshot(connect(policy.prometheus), policy), policy
    finally:
        server.shutdown()


@pytest.mark.parametrize("recorded", [False, True])
def test_a_power_capped_fleet_reads_hot_through_prometheus_and_the_pod_hears_why(prometheus, recorded):
    world = power_capped_world()
    snapshot, policy = read_through_prometheus(prometheus, dcgm_text(world, ticks(world) - 1), recorded=recorded,
                                               record="power_capped", metric=dcgm.CLOCK_THROTTLE_REASONS)
    # What the exporter served, counted here from the same tick: GPUs whose reasons carry the cap.
    samples = observed_samples(world, lag=0)
    expected = {s.node: 0 for s in samples}
    for s in samples:
        expected[s.node] += bool(s.clock_reasons and dcgm.has_reason(s.clock_reasons, dcgm.POWER_CAP_REASONS))
    assert {n.name: n.gpus_power_capped for n in snapshot.nodes} == expected
    assert any(expected.values())
    fleet = fleet_heat(snapshot, policy.heat, now=snapshot.taken_at, staleness_limit_seconds=1e9)
    hot = [n for n in fleet.nodes if n.throttled == "power cap" and n.tier >= Tier.HOT]
    assert hot, [n.reasons for n in fleet.nodes]
    avoided = {a.node: a.reason for a in index_fleet(fleet).avoided}
    assert all(avoided[n.name].endswith("throttled: power cap") for n in hot)


def test_the_in_process_aggregates_count_the_same_gpus_as_prometheus_would():
    world = power_capped_world()
    rows = aggregate_samples(observed_samples(world, lag=0))
    counted = {row.labels["node"]: row.value for row in rows.get("power_capped", ())}
    assert counted and all(value >= 1 for value in counted.values())
    assert "heat_throttled" not in rows
