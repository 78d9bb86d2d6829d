"""Placement advice: bounded, graded, never towards hot nodes, and spread across a burst."""

from collections import Counter
from datetime import timedelta

import pytest

from scoring.heat import Tier
from scoring.placement import advise, headroom
from scoring.policy import PlacementPolicy
from tests.webhook.helpers import NOW, fleet, node
from webhook.ledger import SteeringLedger

POLICY = PlacementPolicy()


def test_cool_nodes_with_headroom_are_preferred_and_hot_ones_avoided():
    advice = advise(fleet(node("busy", tier=Tier.HOT, util=95), node("idle", util=5), node("half", util=40),
                          node("sick", tier=Tier.UNHEALTHY, util=0)), gpus_requested=1, pending_gpus={}, policy=POLICY)
    assert [p.node for p in advice.preferred] == ["idle", "half"]
    assert advice.preferred[0].weight == 100 and 1 <= advice.preferred[1].weight < 100
    assert {(a.node, a.reason) for a in advice.avoided} == {("busy", "hot"), ("sick", "unhealthy")}
    assert not advice.hard, "hard avoidance is opt-in"


def test_warm_nodes_rank_below_cool_ones():
    advice = advise(fleet(node("warm", tier=Tier.WARM, util=55), node("cool", util=45)),
                    gpus_requested=1, pending_gpus={}, policy=POLICY)
    assert [p.node for p in advice.preferred] == ["cool", "warm"]


def test_nodes_without_enough_free_gpus_are_not_preferred():
    advice = advise(fleet(node("small", allocated=6), node("big", allocated=0)), gpus_requested=4,
                    pending_gpus={}, policy=POLICY)
    assert [p.node for p in advice.preferred] == ["big"]


def test_advice_is_bounded_whatever_the_fleet_size():
    many = fleet(*(node(f"n{i:04d}", util=i % 50) for i in range(5000)))
    advice = advise(many, gpus_requested=1, pending_gpus={}, policy=PlacementPolicy(max_preferred_nodes=3))
    assert len(advice.preferred) == 3
    assert all(1 <= p.weight <= 100 for p in advice.preferred)


def test_stale_telemetry_gives_no_advice():
    advice = advise(fleet(node("idle"), stale=True), gpus_requested=1, pending_gpus={}, policy=POLICY)
    assert advice.preferred == () and advice.avoided == ()


@pytest.mark.parametrize(("spare_needed", "max_avoided", "hard"), [(8, 32, True), (100, 32, False), (8, 0, False)])
def test_hard_avoidance_needs_spare_cool_capacity_and_a_bounded_list(spare_needed, max_avoided, hard):
    policy = PlacementPolicy(hard_avoid_hot=True, hard_avoid_min_spare_gpus=spare_needed, max_avoided_nodes=max_avoided)
    advice = advise(fleet(node("hot", tier=Tier.HOT), node("a"), node("b")), gpus_requested=1, pending_gpus={},
                    policy=policy)
    assert advice.hard is hard


def test_pending_load_lowers_a_nodes_headroom_in_proportion_to_its_free_gpus():
    roomy = node("roomy")
    assert headroom(roomy, 4) == pytest.approx(headroom(roomy, 0) / 2)
    assert headroom(roomy, 8) == 0


def test_a_burst_within_one_interval_spreads_top_preferences_in_proportion_to_free_gpus():
    free = {"a": 96, "b": 72, "c": 48, "d": 24}
    cool = fleet(*(node(name, gpus=128, allocated=128 - f, util=20) for name, f in free.items()),
                 node("hot", tier=Tier.HOT, gpus=128, util=95))
    ledger = SteeringLedger(settle_seconds=60)
    tops = Counter()
    for _ in range(200):
        advice = advise(cool, gpus_requested=1, pending_gpus=ledger.pending(NOW), policy=POLICY)
        tops[advice.preferred[0].node] += 1
        ledger.record(advice.preferred[0].node, 1, NOW)
    for name, gpus_free in free.items():
        expected = 200 * gpus_free / sum(free.values())
        assert abs(tops[name] - expected) <= 2, (name, tops, expected)
    assert tops["hot"] == 0


def test_the_ledger_forgets_promises_once_telemetry_can_show_them():
    ledger = SteeringLedger(settle_seconds=30)
    ledger.record("a", 2, NOW)
    assert ledger.pending(NOW + timedelta(seconds=29)) == {"a": 2}
    assert ledger.pending(NOW + timedelta(seconds=30)) == {}
