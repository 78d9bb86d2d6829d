"""The health and throttling strategies: pods on a GPU that reported a critical XID move at once,
whatever the payback rule says; a node whose clocks a power cap or heat has held down over the
whole window sheds its busiest pod. Judged from heat computed by the product's own heat model,
and the throttling window read from a real Prometheus."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from descheduler import step
from descheduler.ledger import LedgerState
from descheduler.plan import plan_evictions
from descheduler.strategies import configure
from scoring import dcgm
from scoring.heat import Tier, fleet_heat
from scoring.ingest.prometheus import connect, read_snapshot, read_throttle_window
from scoring.ingest.telemetry import ClusterSnapshot, NodeTelemetry, PodUsage, WindowStats
from scoring.policy import DeschedulerPolicy, HeatPolicy, PolicyError, default_policy, parse_policy
from sim.fake_dcgm import make_server, serve_in_background
from sim.llm.exposition import dcgm_text, ticks
from tests.descheduler.helpers import NOW, cluster, node_obj, pod_obj, window
from tests.scoring.test_throttling import power_capped_world

POLICY = DeschedulerPolicy()


def telemetry(name, util, *, pods=(), **figures) -> NodeTelemetry:
    return NodeTelemetry(name, 8, util_sum=8 * util, util_count=8, util_max=util, pods=tuple(pods), **figures)


def plan(nodes, *, pods, throttle_window=None, policy=POLICY):
    snap = ClusterSnapshot(NOW, tuple(nodes), newest_sample_at=NOW)
    fleet = fleet_heat(snap, HeatPolicy(), now=NOW, staleness_limit_seconds=60)
    return plan_evictions(fleet=fleet, snapshot=snap, windows={"utilisation": window(cool_b=(10.0, 8.0, 1.0)),
                                                                "throttling": throttle_window or {}},
                          cluster=cluster(*(node_obj(n.name) for n in nodes), *pods), ledger=LedgerState(),
                          policy=policy, now=NOW)


def sick_node():
    """GPU 3 reported XID 79 (fallen off the bus); p3 holds it, p4 holds GPUs 4–5, p0 GPU 0."""
    usage = [PodUsage("inference", "p0", 1, 40.0, ("0",)), PodUsage("inference", "p3", 1, 0.0, ("3",)),
             PodUsage("inference", "p4", 2, 40.0, ("4", "5"))]
    return telemetry("sick-a", 15.0, pods=usage, xids=(("3", 79), ("6", 13)))


def test_the_pod_on_a_failed_gpu_moves_even_where_the_move_would_not_pay():
    pods = [pod_obj(p, "sick-a", owner_name=f"{p}-5d4f") for p in ("p0", "p3", "p4")]
    # The sick node is cooler than the destination: by utilisation, no move could pay.
    result = plan([sick_node(), telemetry("cool-b", 30.0)], pods=pods)
    (eviction,) = result.evictions
    assert (eviction.pod, eviction.node, eviction.payback) == ("p3", "sick-a", None)
    assert eviction.reason.startswith("failed GPU: GPU 3 XID 79")  # XID 13 (a program's fault) is not critical
    assert result.hot_nodes == ("sick-a",)


def test_a_failed_gpu_no_pod_holds_moves_nothing_and_says_so():
    node = replace(sick_node(), pods=(PodUsage("inference", "p0", 1, 40.0, ("0",)),))
    result = plan([node, telemetry("cool-b", 30.0)], pods=[pod_obj("p0", "sick-a")])
    assert result.evictions == ()
    assert "sick-a has a failed GPU (GPU 3 XID 79) and no workload pod on it to move" in result.notes


def throttled_node():
    usage = [PodUsage("inference", f"p{i}", 2, 20.0 + 10 * i, (str(2 * i), str(2 * i + 1))) for i in range(4)]
    return telemetry("capped-a", 35.0, pods=usage, gpus_power_capped=6)


def throttled_fleet():
    pods = [pod_obj(f"p{i}", "capped-a", gpus=2, owner_name=f"svc{i}-5d4f") for i in range(4)]
    return [throttled_node(), telemetry("cool-b", 10.0)], pods


def test_a_node_throttled_over_the_whole_window_sheds_its_busiest_pod_once_a_run():
    nodes, pods = throttled_fleet()
    result = plan(nodes, pods=pods, throttle_window={"capped-a": WindowStats(6.0, 5.0, 1.0)})
    (eviction,) = result.evictions
    assert eviction.pod == "p3"  # 50 % of its GPUs' time: the most of the node's draw
    assert eviction.reason.startswith("throttled: power cap; 5 of 8 GPUs held below their clocks")
    assert eviction.payback is not None  # unlike a failed GPU, a throttled one still serves


def test_throttling_that_did_not_last_moves_nothing_and_the_run_says_why():
    nodes, pods = throttled_fleet()
    for stats in (None, WindowStats(2.0, 2.0, 1.0), WindowStats(6.0, 6.0, 0.3)):
        result = plan(nodes, pods=pods, throttle_window={"capped-a": stats} if stats else {})
        assert result.evictions == ()
        assert "capped-a is throttled now (power cap) but not over the window" in result.notes


def test_the_throttling_window_counts_what_a_real_prometheus_scraped(prometheus):
    world = power_capped_world()
    text = dcgm_text(world, ticks(world) - 1)
    server = make_server(text, port=0)
    serve_in_background(server)
    try:
        prom = prometheus(f"127.0.0.1:{server.server_port}")
        prom.wait_for(dcgm.CLOCK_THROTTLE_REASONS, at_least=text.count(f"\n{dcgm.CLOCK_THROTTLE_REASONS}{{"))
        base = default_policy()
        policy = replace(base, prometheus=replace(base.prometheus, url=prom.url),
                         descheduler=replace(base.descheduler, window_seconds=4.0, step_seconds=1.0))
        query = connect(policy.prometheus)
        time.sleep(policy.descheduler.window_seconds)  # a window's worth of the same scrape
        snapshot = read_snapshot(query, policy)
        fleet = fleet_heat(snapshot, policy.heat, now=snapshot.taken_at, staleness_limit_seconds=1e9)
        stats = read_throttle_window(query, policy)
    finally:
        server.shutdown()
    capped = {n.name: n.gpus_power_capped for n in snapshot.nodes if n.gpus_power_capped}
    assert capped and {name: stats[name].low for name in capped} == capped
    assert all(stats[name].coverage > 0.5 for name in capped)
    assert any(n.tier is Tier.HOT and n.throttled for n in fleet.nodes)
    # Each pod's GPUs named as the XIDs are, so the health strategy can find the pods on a failed one.
    placed = {p.name: p.gpu_ids for n in snapshot.nodes for p in n.pods}
    assert placed and all(ids and all(i.isdigit() for i in ids) for ids in placed.values())


class AskedSource:
    """A telemetry source that records which windows a step asks it for."""

    where = "a test"

    def __init__(self):
        self.asked = []

    def snapshot(self):
        return ClusterSnapshot(NOW, (telemetry("a", 50.0),), newest_sample_at=NOW)

    def window(self, name, snapshot):
        self.asked.append(name)
        return {}


def test_with_no_gpu_throttled_the_window_is_never_asked_for():
    """The step asks its source for the throttling window only while some node is throttled:
    nothing else could act on it, and it is a range query over every GPU."""
    source = AskedSource()
    found = step.assess(source, default_policy(), lambda: NOW)
    step.plan(source, found, cluster=cluster(node_obj("a")), ledger=LedgerState(), policy=default_policy())
    assert source.asked == ["utilisation", "serving"]
    throttled = replace(found, fleet=replace(found.fleet, nodes=tuple(
        replace(n, reasons=("throttled: power cap on 1 GPU",)) for n in found.fleet.nodes)))
    assert all(n.throttled for n in throttled.fleet.nodes)
    source.asked.clear()
    step.plan(source, throttled, cluster=cluster(node_obj("a")), ledger=LedgerState(), policy=default_policy())
    assert source.asked == ["utilisation", "throttling", "serving"]


def test_a_strategy_left_out_of_the_policy_is_off_and_its_window_never_read():
    policy = parse_policy("descheduler:\n  strategies: [{name: health}, {name: throttling, args: {minShareHeld: 0.25}}]")
    source = AskedSource()
    found = step.assess(source, policy, lambda: NOW)
    throttled = replace(found, fleet=replace(found.fleet, nodes=tuple(
        replace(n, reasons=("throttled: power cap on 1 GPU",)) for n in found.fleet.nodes)))
    step.plan(source, throttled, cluster=cluster(node_obj("a")), ledger=LedgerState(), policy=policy)
    assert source.asked == ["throttling"]


def test_a_strategys_arguments_change_what_it_acts_on():
    # Two of eight GPUs held down over the window: not half of them, but a quarter.
    nodes, pods = throttled_fleet()
    stats = {"capped-a": WindowStats(2.0, 2.0, 1.0)}
    assert plan(nodes, pods=pods, throttle_window=stats).evictions == ()
    quarter = parse_policy("descheduler:\n  strategies: [{name: throttling, args: {minShareHeld: 0.25}}]").descheduler
    moved = plan(nodes, pods=pods, throttle_window=stats, policy=quarter).evictions
    assert [e.node for e in moved] == ["capped-a"]


@pytest.mark.parametrize("strategies, message", [
    ("[{name: utilization}]", "descheduler.strategies[0].name: unknown strategy 'utilization' (known: health, "
                              "degraded, utilisation, throttling, serving)"),
    ("[{name: throttling, args: {minShareHeld: 2}}]", "descheduler.strategies[0].args.minShareHeld: must be in (0, 1]"),
    ("[{name: health}, {name: serving, args: {minLowPresure: 1}}]",
     "descheduler.strategies[1].args.minLowPresure: unknown field (known: minLowPressure)"),
    ("[{name: health}, {name: health}]", "descheduler.strategies: names a strategy more than once"),
])
def test_a_bad_strategy_entry_is_named_in_one_line(strategies, message):
    with pytest.raises(PolicyError) as error:
        configure(parse_policy(f"descheduler:\n  strategies: {strategies}").descheduler)
    assert message in str(error.value)