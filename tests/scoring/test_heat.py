"""The heat model: tiers, reasons and load figures from per-GPU samples."""

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from scoring.advice.placement import base_headroom
from scoring.heat import Tier, fleet_heat, node_heat
from scoring.ingest.series import Series, aggregate_samples, build_snapshot
from scoring.ingest.telemetry import ClusterSnapshot, GpuSample, NodeTelemetry, PodRef
from scoring.policy import HeatPolicy

POLICY = HeatPolicy()
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def gpu(index=0, util=10.0, used=10_000.0, free=70_000.0, temp=50.0, xid=0, pod=None, power=100.0):
    return GpuSample(node="n1", gpu=str(index), util_percent=util, fb_used_mib=used, fb_free_mib=free,
                     temperature_c=temp, power_w=power, last_xid=xid, pod=pod)


def node(*gpus, seen=0, **ksm):
    """Node telemetry for these GPUs, aggregated the way the snapshot builder does it."""
    if not gpus:
        return NodeTelemetry(name="n1", gpus=0)
    seen_rows = [Series({"node": "n1"}, seen)] if seen else []
    (telemetry,) = build_snapshot(aggregate_samples(gpus), taken_at=NOW, gpus_seen_recently=seen_rows).nodes
    return replace(telemetry, **ksm)


@pytest.mark.parametrize(("telemetry", "tier", "reason"), [
    (node(gpu(0, 10), gpu(1, 20)), Tier.COOL, None),
    (node(gpu(0, 49.9), gpu(1, 50.1)), Tier.WARM, "mean GPU util 50% ≥ 50%"),
    (node(gpu(0, 100), gpu(1, 60)), Tier.HOT, "mean GPU util 80% ≥ 80%"),
    (node(gpu(0, 100), gpu(1, 0)), Tier.WARM, "mean GPU util"),
    (node(gpu(0, 5, used=76_000, free=4_000)), Tier.HOT, "GPU memory 95% used ≥ 92%"),
    (node(gpu(0, 5, used=64_000, free=16_000)), Tier.WARM, "GPU memory 80% used ≥ 75%"),
    (node(gpu(0, 5, temp=91)), Tier.HOT, "GPU temperature 91°C ≥ 87°C"),
    (node(gpu(0, 5, xid=79)), Tier.UNHEALTHY, "GPU 0 reported critical XID 79"),
    (node(gpu(0, 95, xid=48)), Tier.UNHEALTHY, "critical XID 48"),
    (node(gpu(0, 5, xid=13)), Tier.COOL, None),
    (node(gpu(0, 5), seen=2), Tier.UNHEALTHY, "1 GPU series vanished"),
    (node(), Tier.UNHEALTHY, "no GPU series reported"),
])
def test_each_node_gets_the_tier_its_worst_signal_deserves(telemetry, tier, reason):
    heat = node_heat(telemetry, POLICY)
    assert heat.tier is tier
    if reason is None:
        assert heat.reasons == ()
    else:
        assert any(reason in r for r in heat.reasons), heat.reasons


def test_the_worst_reason_comes_first():
    heat = node_heat(node(gpu(0, 99, xid=79)), POLICY)
    assert heat.reasons[0].startswith("GPU 0 reported critical XID")
    assert "mean GPU util" in heat.reasons[1]


def test_thresholds_come_from_the_policy():
    strict = HeatPolicy(warm_util_percent=10, hot_util_percent=20)
    assert node_heat(node(gpu(0, 25)), strict).tier is Tier.HOT
    assert node_heat(node(gpu(0, 25)), POLICY).tier is Tier.COOL


def test_load_figures_are_means_maxima_and_sums():
    heat = node_heat(node(gpu(0, 90, used=40_000, free=40_000, temp=70, power=300),
                          gpu(1, 10, used=0, free=80_000, temp=40, power=100, pod=PodRef("a", "p"))), POLICY)
    assert heat.gpu_util == 50
    assert heat.max_gpu_util == 90
    assert heat.memory_used_fraction == 0.25
    assert heat.max_temperature_c == 70
    assert heat.power_w == 400
    assert (heat.gpus, heat.gpus_allocated, heat.gpus_free) == (2, 1, 1)


def test_kube_state_metrics_allocation_beats_pod_labels():
    telemetry = node(gpu(0), gpu(1), allocatable_gpus=2, allocated_gpus=2)
    heat = node_heat(telemetry, POLICY)
    assert (heat.gpus, heat.gpus_free) == (2, 0)


def test_a_vanished_node_is_listed_as_unhealthy():
    snapshot = ClusterSnapshot(taken_at=NOW, nodes=(node(gpu(0)),), vanished_nodes=("gone",), newest_sample_at=NOW)
    fleet = fleet_heat(snapshot, POLICY, now=NOW, staleness_limit_seconds=60)
    by_name = {h.name: h for h in fleet.nodes}
    assert by_name["gone"].tier is Tier.UNHEALTHY
    assert by_name["n1"].tier is Tier.COOL


@pytest.mark.parametrize(("age", "nodes", "stale"), [
    (timedelta(seconds=10), 1, False),
    (timedelta(seconds=61), 1, True),
    (timedelta(seconds=0), 0, True),
])
def test_old_or_empty_telemetry_is_stale(age, nodes, stale):
    snapshot = ClusterSnapshot(taken_at=NOW, nodes=(node(gpu(0)),)[:nodes], newest_sample_at=NOW - age)
    assert fleet_heat(snapshot, POLICY, now=NOW, staleness_limit_seconds=60).stale is stale


def _llm_node(name: str, kv_usage: float | None, running: float | None, waiting: float = 0.0) -> NodeTelemetry:
    """Eight GPUs as a vLLM fleet shows them: each a one-GPU replica with its KV cache preallocated
    (90 % of the framebuffer) and its duty cycle saturated by any request in flight."""
    from scoring.ingest.serving import ServingReplica
    from scoring.policy import ServingTarget

    samples = [replace(gpu(i, util=97.0, used=73_728.0, free=8_192.0, pod=PodRef("chat", f"{name}-r{i}")), node=name)
               for i in range(8)]
    (telemetry,) = build_snapshot(aggregate_samples(samples), taken_at=NOW).nodes
    replicas = tuple(ServingReplica("chat", f"{name}-r{i}", "vllm", queue=waiting, latency_seconds=None,
                                    latency_label="TTFT p95", target=ServingTarget(), workload="chat",
                                    kv_usage=kv_usage, running=running) for i in range(8))
    return replace(telemetry, serving=replicas)


def test_on_an_llm_fleet_the_servers_load_not_the_duty_cycle_says_how_busy_a_node_is():
    light, heavy = _llm_node("light", kv_usage=0.05, running=6), _llm_node("heavy", kv_usage=0.95, running=250)
    batch_bound = _llm_node("batch", kv_usage=0.10, running=256, waiting=40)
    assert node_heat(light, POLICY).tier is Tier.COOL and node_heat(light, POLICY).gpu_util == pytest.approx(5.0)
    hot = node_heat(heavy, POLICY)
    assert hot.tier is Tier.HOT and "serving load 98% ≥ 80% (chat/heavy-r" in hot.reasons[0], hot.reasons
    assert "KV 95%, 250 running + 0 waiting of 256" in hot.reasons[0]
    assert node_heat(batch_bound, POLICY).tier is Tier.HOT, "a full batch with a queue is load, whatever the cache"
    assert not any("memory" in r for r in node_heat(light, POLICY).reasons), "a preallocated cache is not pressure"
    # Without the servers' load figures every node reads hot on its duty cycle, as before; its
    # memory says nothing, since each GPU is one replica's (`scoring.ingest.memory`).
    for telemetry in (light, heavy):
        blind = replace(telemetry, serving=tuple(replace(r, kv_usage=None, running=None) for r in telemetry.serving))
        assert node_heat(blind, POLICY).tier is Tier.HOT
        assert [r.split(" ")[0] for r in node_heat(blind, POLICY).reasons] == ["mean"]
        assert node_heat(blind, POLICY).memory_used_fraction == pytest.approx(0.9)
        assert node_heat(blind, POLICY).memory_room_used is None


def test_a_replica_reporting_load_stands_in_only_for_its_own_gpus():
    telemetry = _llm_node("mixed", kv_usage=0.0, running=0)
    # Half the replicas report no load: their GPUs keep their duty cycle (97 %).
    serving = tuple(r if i < 4 else replace(r, kv_usage=None, running=None) for i, r in enumerate(telemetry.serving))
    heat = node_heat(replace(telemetry, serving=serving), POLICY)
    assert heat.gpu_util == pytest.approx(48.5) and heat.max_gpu_util == pytest.approx(97.0)
    assert heat.tier is Tier.COOL and heat.reasons == (), "a GPU one replica holds: its memory is no pressure"


def _eight(name: str, held: dict[int, list[str]], used: dict[int, float]) -> NodeTelemetry:
    """Eight 80 GiB GPUs; `held` names each held GPU's pods (two for a shared GPU, one sample per
    pod as dcgm-exporter writes it), `used` the MiB used where it is not 500."""
    samples = []
    for i in range(8):
        for pod in held.get(i, [None]):
            samples.append(replace(gpu(i, util=30.0, used=used.get(i, 500.0), free=81_920.0 - used.get(i, 500.0),
                                       pod=PodRef("chat", pod) if pod else None), node=name))
    (telemetry,) = build_snapshot(aggregate_samples(samples), taken_at=NOW).nodes
    return telemetry


def test_memory_counts_on_free_and_shared_gpus_only():
    preallocated = {i: 73_728.0 for i in range(6)}
    # Six GPUs each held by one vLLM replica (90 % preallocated), two free: room, not pressure.
    exclusive = node_heat(_eight("exclusive", {i: [f"r{i}"] for i in range(6)}, preallocated), POLICY)
    assert exclusive.memory_used_fraction == pytest.approx((6 * 73_728 + 2 * 500) / (8 * 81_920))
    assert exclusive.memory_room_used == pytest.approx(500 / 81_920) and exclusive.tier is Tier.COOL
    # A GPU two replicas share (time-slicing), 90 % used: the next replica's cache must fit beside them.
    shared = node_heat(_eight("shared", {0: ["a", "b"], **{i: [f"r{i}"] for i in range(1, 8)}}, {0: 73_728.0}),
                       POLICY)
    assert shared.memory_room_used == pytest.approx(0.9)
    assert shared.tier is Tier.WARM and shared.reasons == ("GPU memory 90% used on free and shared GPUs ≥ 75%",)
    # A free GPU whose memory something outside Kubernetes holds is room lost.
    leaked = node_heat(_eight("leaked", {i: [f"r{i}"] for i in range(7)}, {7: 78_000.0}), POLICY)
    assert leaked.tier is Tier.HOT and "on free and shared GPUs" in leaked.reasons[0]
    # The ranking reads the same figure: the node with free, empty GPUs outranks the leaked one.
    assert base_headroom(exclusive) > base_headroom(replace(exclusive, memory_room_used=leaked.memory_room_used))


def test_a_node_with_more_gpus_allocatable_than_report_shares_them_all():
    """Time-slicing: dcgm-exporter names one pod per GPU by default, so the rows look exclusive;
    kube-state-metrics' allocatable (4 replicas a GPU) says otherwise, and the whole node counts."""
    samples = [replace(gpu(i, util=30.0, used=73_728.0, free=8_192.0, pod=PodRef("chat", f"r{i}")), node="sliced")
               for i in range(8)]
    aggregates = aggregate_samples(samples)
    (alone,) = build_snapshot(aggregates, taken_at=NOW).nodes
    (sliced,) = build_snapshot(aggregates, taken_at=NOW, allocatable_gpus=[Series({"node": "sliced"}, 32.0)]).nodes
    assert alone.placeable_fb is not None and alone.placeable_memory_fraction is None
    assert sliced.placeable_fb is None and sliced.placeable_memory_fraction == pytest.approx(0.9)
    assert node_heat(sliced, POLICY).reasons == ("GPU memory 90% used ≥ 75%",)
