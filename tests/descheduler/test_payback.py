"""Moves that pay for themselves: a pod leaves a hot node only when what the move gains over the
payback horizon exceeds what restarting it costs; the plan shows both."""

from __future__ import annotations

from dataclasses import replace

import pytest

from descheduler.ledger import LedgerState
from descheduler.payback import payback, restart_seconds
from scoring.cluster.images import IMAGE_BYTES_ANNOTATION, MODEL_BYTES_ANNOTATION
from descheduler.plan import plan_evictions
from descheduler.strategies.utilisation import SERVES
from descheduler.summary import reason_code
from scoring.ingest.serving import ServingReplica
from scoring.policy import DeschedulerPolicy, ServingTarget
from tests.descheduler.helpers import NOW, cluster, fleet, heat, node_obj, pod_obj, snapshot, window

POLICY = DeschedulerPolicy()
LLM = {IMAGE_BYTES_ANNOTATION: str(15 * 2**30), MODEL_BYTES_ANNOTATION: str(16_060_000_000)}
"""A vLLM image of 15 GiB serving Llama-3.1-8B (16 GB of BF16 weights)."""


def replica(pod: str, pressure_latency: float, peers: float | None) -> ServingReplica:
    target = ServingTarget(latency_seconds=1.0)
    return ServingReplica("inference", pod, "vllm", queue=0.0, latency_seconds=pressure_latency,
                          latency_label="TTFT p95", target=target, workload="svc", peer_pressure=peers)


def plan_for(*, annotations=None, serving=(), policy=POLICY, destination_util=10.0):
    pods = [pod_obj(f"p{i}", "hot-a", owner_name=f"svc{i}-5d4f", annotations=annotations) for i in range(4)]
    snap = snapshot({"hot-a": [("inference", f"p{i}", 1, 100.0 - 5 * i) for i in range(4)]})
    if serving:
        snap = replace(snap, nodes=tuple(replace(n, serving=tuple(serving)) for n in snap.nodes))
    return plan_evictions(fleet=fleet(heat("hot-a", 92), heat("cool-b", destination_util)), snapshot=snap,
                          windows={"utilisation": window(hot_a=(92.0, 85.0, 1.0), cool_b=(10.0, 8.0, 1.0))},
                          cluster=cluster(node_obj("hot-a"), node_obj("cool-b"), *pods),
                          ledger=LedgerState(),
                          policy=policy, now=NOW)


def test_time_to_ready_comes_from_the_pods_image_and_model_sizes_where_it_gives_them():
    # 15 GiB at 200 MB/s, 16 GB at 2 GB/s, 30 s of start: ~80.5 + 8.0 + 30.
    assert restart_seconds(LLM, POLICY) == pytest.approx(15 * 2**30 / 200e6 + 16_060_000_000 / 2e9 + 30)
    assert restart_seconds({}, POLICY) == POLICY.restart_cost_seconds
    assert restart_seconds({IMAGE_BYTES_ANNOTATION: "fifteen gigs"}, POLICY) == POLICY.restart_cost_seconds
    assert restart_seconds({IMAGE_BYTES_ANNOTATION: "nan"}, POLICY) == POLICY.restart_cost_seconds


def test_a_replica_no_slower_than_its_peers_elsewhere_gains_nothing_by_moving():
    same = payback(LLM, source_util=92, destination_util=10, replica=replica("p0", 0.5, 0.5), policy=POLICY)
    assert same.gain_seconds == 0 and not same.pays
    slowed = payback(LLM, source_util=92, destination_util=10, replica=replica("p0", 2.0, 0.5), policy=POLICY)
    assert slowed.gain_seconds == pytest.approx(0.75 * 1800) and slowed.pays


def test_a_move_from_a_hot_node_to_a_cool_one_pays_and_the_plan_shows_both_numbers():
    result = plan_for(annotations=LLM)
    (eviction,) = result.evictions
    assert eviction.payback.pays
    assert eviction.payback.gain_seconds == pytest.approx(1800 * (92 - 10) / 100)
    assert "gain ~1476 s of its service in 30 min > restart ~119 s" in eviction.reason


def test_a_serving_replica_is_not_moved_on_duty_cycle():
    # A continuous-batching server reads busy from its first request: its own figures say how it
    # serves, and the serving strategy reads them. The other pods of the node still may go.
    serving = [replica(f"p{i}", 2.0, 0.5) for i in range(3)]  # slower than their peers, even so
    result = plan_for(annotations=LLM, serving=serving)
    assert [e.pod for e in result.evictions] == ["p3"]
    assert {s.pod: s.reason for s in result.skipped} == {f"p{i}": SERVES for i in range(3)}
    assert reason_code(SERVES) == "serving"


def test_a_warm_destination_leaves_too_little_gain_for_a_long_restart():
    slow_start = {**LLM, IMAGE_BYTES_ANNOTATION: str(400 * 2**30)}  # a 400 GiB image: ~36 min to pull
    result = plan_for(annotations=slow_start, destination_util=45.0)
    assert result.evictions == () and all("does not pay" in s.reason for s in result.skipped)


def test_a_zero_horizon_turns_the_rule_off():
    result = plan_for(annotations={IMAGE_BYTES_ANNOTATION: str(400 * 2**30)},
                      policy=replace(POLICY, payback_horizon_seconds=0.0))
    (eviction,) = result.evictions
    assert eviction.payback is None and "gain" not in eviction.reason


def test_the_run_report_shows_both_numbers_and_the_summary_counts_moves_that_did_not_pay():
    from descheduler.evictor import Outcome
    from descheduler.run import Report
    from descheduler.summary import summarise

    paid = plan_for(annotations=LLM)
    unpaid = plan_for(annotations={**LLM, IMAGE_BYTES_ANNOTATION: str(400 * 2**30)}, destination_util=45.0)
    report = Report(True, replace(paid, skipped=unpaid.skipped),
                    tuple(Outcome(e, "dry-run") for e in paid.evictions))
    (entry,) = report.as_dict()["would_evict"]
    assert entry["gain_seconds"] == 1476.0 and entry["restart_seconds"] == pytest.approx(118.6)
    assert summarise(report.plan, report.outcomes, dry_run=True, at=NOW).skipped == {"no-payback": len(unpaid.skipped)}


def test_the_restart_is_priced_on_the_destination_and_what_it_lacks_is_staged_there():
    """A destination that lists the pod's image pulls nothing (issue 47, item 4): the restart is
    the weights and the start alone, and nothing is pre-staged; one without it pays the pull."""
    image = {"names": ["docker.io/library/x@sha256:ab", "docker.io/library/x:latest"], "sizeBytes": 15 * 2**30}

    def move_to(cool_b):
        pods = [pod_obj("p0", "hot-a", owner_name="svc0-5d4f", annotations=LLM)]
        snap = snapshot({"hot-a": [("inference", "p0", 1, 100.0)]})
        (eviction,) = plan_evictions(
            fleet=fleet(heat("hot-a", 92), heat("cool-b", 10)), snapshot=snap,
            windows={"utilisation": window(hot_a=(92.0, 85.0, 1.0), cool_b=(10.0, 8.0, 1.0))},
            cluster=cluster(node_obj("hot-a"), cool_b, *pods), ledger=LedgerState(), policy=POLICY, now=NOW).evictions
        return eviction

    cached = node_obj("cool-b")
    cached["status"]["images"] = [image]
    there, bare = move_to(cached), move_to(node_obj("cool-b"))
    assert there.destination == bare.destination == "cool-b"
    assert there.payback.restart_seconds == pytest.approx(16_060_000_000 / 2e9 + 30) and there.stage == ()
    assert bare.payback.restart_seconds == pytest.approx(restart_seconds(LLM, POLICY))
    assert bare.stage == ("docker.io/library/x:latest",)
