"""The degraded strategy: the pod on a GPU whose clock under load sits well under its peers'
moves where the payback rule, priced on the share of its service the slow clock costs, says the
move pays; a degraded GPU no pod holds moves nothing and is named."""

from __future__ import annotations

from dataclasses import replace

from descheduler.plan import plan_evictions
from descheduler.ledger import LedgerState
from descheduler.strategies import REGISTERED, configure
from scoring.heat import fleet_heat
from scoring.ingest.signals.degraded import CLOCK, PEERS
from scoring.ingest.telemetry import ClusterSnapshot, PodUsage
from scoring.ingest.serving import ServingReplica
from scoring.policy import DeschedulerPolicy, HeatPolicy, ServingTarget, parse_policy
from tests.descheduler.helpers import NOW, cluster, node_obj, pod_obj, window
from tests.descheduler.test_health_and_throttling import telemetry

POLICY = parse_policy("descheduler:\n  strategies: [{name: health}, {name: degraded}, {name: utilisation}]\n").descheduler
"""The strategies this file exercises, named (the degraded strategy among them, as by default)."""


def slow_node(clock: float = 1320.0, holder: str | None = "p3"):
    """GPU 3 runs at `clock` against its peers' 1,980 MHz; `holder` holds it, p0 holds GPU 0."""
    usage = [PodUsage("inference", "p0", 1, 40.0, ("0",))]
    if holder:
        usage.append(PodUsage("inference", holder, 1, 90.0, ("3",)))
    readings = ((f"{CLOCK}:3", clock), (f"{PEERS}:3", 1980.0))
    return telemetry("slow-a", 20.0, pods=usage, readings=readings)


def plan(nodes, pods, policy=POLICY):
    snap = ClusterSnapshot(NOW, tuple(nodes), newest_sample_at=NOW)
    fleet = fleet_heat(snap, HeatPolicy(), now=NOW, staleness_limit_seconds=60)
    return plan_evictions(fleet=fleet, snapshot=snap, windows={"utilisation": window(cool_b=(10.0, 8.0, 1.0))},
                          cluster=cluster(*(node_obj(n.name) for n in nodes), *pods), ledger=LedgerState(),
                          policy=policy, now=NOW)


def test_the_pod_on_a_degraded_gpu_moves_when_the_move_pays():
    pods = [pod_obj(p, "slow-a", owner_name=f"{p}-5d4f") for p in ("p0", "p3")]
    # The slow node is cooler than the destination: by utilisation alone, no move could pay.
    result = plan([slow_node(), telemetry("cool-b", 30.0)], pods)
    (eviction,) = result.evictions
    assert (eviction.pod, eviction.node) == ("p3", "slow-a")
    assert eviction.reason.startswith("degraded: GPU 3 at 1,320 of 1,980 MHz under load")
    # A third of its service lost: 1 − 1,320 / 1,980 of the horizon, against the restart.
    assert eviction.payback.gain_seconds == POLICY.payback_horizon_seconds * (1 - 1320 / 1980)
    assert eviction.payback.pays


def test_a_move_that_does_not_pay_waits():
    pods = [pod_obj(p, "slow-a", owner_name=f"{p}-5d4f") for p in ("p0", "p3")]
    # 15 % slower: under the signal's default threshold, but judged here as if the signal said so.
    costly = replace(POLICY, restart_cost_seconds=POLICY.payback_horizon_seconds)
    result = plan([slow_node(clock=1700.0), telemetry("cool-b", 30.0)], pods, costly)
    assert result.evictions == ()
    assert any(s.pod == "p3" and s.reason.startswith("move does not pay") for s in result.skipped)


def test_a_degraded_gpu_no_pod_holds_moves_nothing_and_says_so():
    pods = [pod_obj("p0", "slow-a", owner_name="p0-5d4f")]
    result = plan([slow_node(holder=None), telemetry("cool-b", 30.0)], pods)
    assert result.evictions == ()
    assert "slow-a has a degraded GPU (GPU 3) and no workload pod on it to move" in result.notes


def test_it_runs_after_health_by_default_and_a_policy_can_leave_it_out():
    assert list(REGISTERED)[:2] == ["health", "degraded"]
    assert [s.name for s in configure(DeschedulerPolicy())] == ["health", "degraded", "utilisation", "throttling",
                                                                "serving"]
    chosen = parse_policy("descheduler:\n  strategies: [{name: health}, {name: utilisation}]\n").descheduler
    assert [s.name for s in configure(chosen)] == ["health", "utilisation"]


def test_a_slow_replica_whose_peers_could_not_take_its_traffic_stays():
    pods = [pod_obj(p, "slow-a", owner_name="svc-5d4f") for p in ("p0", "p3")]
    busy = ServingReplica("inference", "p3", "vllm", queue=0.0, latency_seconds=0.9, latency_label="TTFT p95",
                          target=ServingTarget(latency_seconds=1.0), workload="svc", peer_pressure=0.8)
    node = replace(slow_node(), serving=(busy,))
    result = plan([node, telemetry("cool-b", 30.0)], pods)
    assert result.evictions == ()
    assert any(s.pod == "p3" and "would reach" in s.reason for s in result.skipped)
