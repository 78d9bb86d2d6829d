"""Placement advice: bounded, graded, never towards hot nodes, and spread across a burst."""

from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.advice.placement import advise, base_headroom, headroom, index_fleet, rank
from scoring.heat import Tier
from scoring.policy import PlacementPolicy
from tests.webhook.helpers import NOW, fleet, node
from webhook.ledger import SteeringLedger

POLICY = PlacementPolicy()


def indexed(*nodes, stale=False):
    return index_fleet(fleet(*nodes, stale=stale))


def test_cool_nodes_with_headroom_are_preferred_and_hot_ones_avoided():
    advice = advise(indexed(node("busy", tier=Tier.HOT, util=95), node("idle", util=5), node("half", util=40),
                          node("sick", tier=Tier.UNHEALTHY, util=0)), gpus_requested=1, pending_gpus={}, policy=POLICY)
    assert [p.node for p in advice.preferred] == ["idle", "half"]
    assert advice.preferred[0].weight == 100 and 1 <= advice.preferred[1].weight < 100
    assert {(a.node, a.reason) for a in advice.avoided} == {("busy", "hot"), ("sick", "unhealthy")}
    assert advice.excluded == ("sick",), "the unhealthy node is excluded; hot ones only by policy"


def test_an_unhealthy_node_is_excluded_only_while_the_pod_fits_elsewhere():
    sick = node("sick", tier=Tier.UNHEALTHY, allocated=1)
    roomy = advise(indexed(sick, node("small", allocated=6)), gpus_requested=2, pending_gpus={}, policy=POLICY)
    assert roomy.excluded == ("sick",) and not roomy.left_open
    # The only node with room for four GPUs is the sick one: a pending pod helps no one.
    tight = advise(indexed(sick, node("small", allocated=6)), gpus_requested=4, pending_gpus={}, policy=POLICY)
    assert tight.excluded == () and "no other node has room" in tight.left_open
    # Room counted after the GPUs already promised to pods steered since the telemetry.
    promised = advise(indexed(sick, node("small", allocated=6)), gpus_requested=2, pending_gpus={"small": 2},
                      policy=POLICY)
    assert promised.excluded == ()


def test_each_lower_preference_weighs_half_as_much_so_the_booked_top_node_leads():
    advice = advise(indexed(*(node(f"n{i}", util=10 + i) for i in range(5))), gpus_requested=1, pending_gpus={},
                    policy=POLICY)
    weights = [p.weight for p in advice.preferred]
    assert [p.node for p in advice.preferred] == ["n0", "n1", "n2", "n3", "n4"]
    assert weights[0] == 100
    for position in range(1, 5):  # near-equal headroom: the rank decides the weight
        assert weights[position] <= weights[position - 1] / 2 + 1
        assert weights[position] >= weights[0] * 0.9 / 2 ** position - 1


def test_warm_nodes_rank_below_cool_ones():
    advice = advise(indexed(node("warm", tier=Tier.WARM, util=55), node("cool", util=45)),
                    gpus_requested=1, pending_gpus={}, policy=POLICY)
    assert [p.node for p in advice.preferred] == ["cool", "warm"]


def test_nodes_without_enough_free_gpus_are_not_preferred():
    advice = advise(indexed(node("small", allocated=6), node("big", allocated=0)), gpus_requested=4,
                    pending_gpus={}, policy=POLICY)
    assert [p.node for p in advice.preferred] == ["big"]


def test_advice_is_bounded_whatever_the_fleet_size():
    many = fleet(*(node(f"n{i:04d}", util=i % 50) for i in range(5000)))
    advice = advise(index_fleet(many), gpus_requested=1, pending_gpus={}, policy=PlacementPolicy(max_preferred_nodes=3))
    assert len(advice.preferred) == 3
    assert all(1 <= p.weight <= 100 for p in advice.preferred)


def test_stale_telemetry_gives_no_advice():
    advice = advise(indexed(node("idle"), stale=True), gpus_requested=1, pending_gpus={}, policy=POLICY)
    assert advice.preferred == () and advice.avoided == ()


@pytest.mark.parametrize(("spare_needed", "max_avoided", "hard"), [(8, 32, True), (100, 32, False), (8, 0, False)])
def test_hard_avoidance_needs_spare_cool_capacity_and_a_bounded_list(spare_needed, max_avoided, hard):
    policy = PlacementPolicy(hard_avoid_hot=True, hard_avoid_min_spare_gpus=spare_needed, max_avoided_nodes=max_avoided)
    advice = advise(indexed(node("hot", tier=Tier.HOT), node("a"), node("b")), gpus_requested=1, pending_gpus={},
                    policy=policy)
    assert (advice.excluded == ("hot",)) is hard
    assert bool(advice.left_open) is not hard


def test_pending_load_lowers_a_nodes_headroom_in_proportion_to_its_free_gpus():
    base = base_headroom(node("roomy"))
    assert headroom(base, 8, 4) == pytest.approx(headroom(base, 8, 0) / 2)
    assert headroom(base, 8, 8) == 0


def test_a_burst_within_one_interval_spreads_top_preferences_in_proportion_to_free_gpus():
    free = {"a": 96, "b": 72, "c": 48, "d": 24}
    cool = fleet(*(node(name, gpus=128, allocated=128 - f, util=20) for name, f in free.items()),
                 node("hot", tier=Tier.HOT, gpus=128, util=95))
    ledger = SteeringLedger(settle_seconds=60)
    tops = Counter()
    for _ in range(200):
        advice = advise(index_fleet(cool), gpus_requested=1, pending_gpus=ledger.pending(NOW), policy=POLICY)
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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(Tier)), st.integers(0, 8), st.floats(0, 100), st.integers(0, 10)),
                min_size=1, max_size=40),
       st.integers(0, 4), st.integers(1, 6))
def test_the_ranked_index_finds_the_same_top_nodes_as_scoring_every_node(nodes, need, k):
    fleet_heat = fleet(*(node(f"n{i}", tier=tier, allocated=alloc, util=util) for i, (tier, alloc, util, _) in
                         enumerate(nodes)))
    pending = {f"n{i}": p for i, (*_, p) in enumerate(nodes) if p}
    policy = PlacementPolicy(max_preferred_nodes=k)
    def adjusted(n):
        pend = pending.get(n.name, 0)
        return headroom(base_headroom(n), n.gpus_free, pend), n.gpus_free - pend

    eligible = [n for n in fleet_heat.nodes if base_headroom(n) > 0 and adjusted(n)[1] >= max(1, need)]
    # Best first; ties go to the higher base headroom, then more free GPUs, then the name.
    eligible.sort(key=lambda n: (-adjusted(n)[0], -adjusted(n)[1], -base_headroom(n), -n.gpus_free, n.name))
    brute = [(None, None, n.name) for n in eligible[:k]]
    advice = advise(index_fleet(fleet_heat), gpus_requested=need, pending_gpus=pending, policy=policy)
    assert [p.node for p in advice.preferred] == [name for *_, name in brute]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.floats(0, 100)), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 29), st.integers(1, 3), st.booleans()), max_size=60),
       st.integers(1, 4), st.integers(1, 5))
def test_the_ledgers_incremental_ranking_equals_a_fresh_ranking(nodes, steps, need, k):
    fleet_heat = fleet(*(node(f"n{i}", allocated=alloc, util=util) for i, (alloc, util) in enumerate(nodes)))
    index = index_fleet(fleet_heat)
    ledger = SteeringLedger(settle_seconds=10)
    clock = NOW
    for target, gpus, advance in steps:
        if advance:
            clock += timedelta(seconds=4)  # older promises expire as telemetry moves on
        ledger.record(f"n{target % len(nodes)}", gpus, clock)
        incremental, promised = ledger.top(index, clock, need=need, k=k)
        pending = ledger.pending(clock)
        assert incremental == rank(index, need=need, pending_gpus=pending, k=k)
        assert promised == sum(pending.values())


def test_a_distributed_job_is_steered_to_the_domain_with_the_coolest_room_and_stays_there():
    from scoring.advice.placement import advise_group

    nodes = [node("a1", allocated=6), node("a2", allocated=6), node("b1", allocated=0), node("b2", allocated=4),
             node("c1", allocated=0)]
    topology = {"a1": (("clique", "A"),), "a2": (("clique", "A"),), "b1": (("clique", "B"),),
                "b2": (("clique", "B"),)}  # c1's labels are unknown: it cannot anchor a job
    index = index_fleet(fleet(*nodes), topology)
    first = advise_group(index, gpus_requested=4, pending_gpus={}, policy=POLICY)
    assert first.domain == ("clique", "B") and {p.node for p in first.preferred} == {"b1", "b2"}
    # Once B is promised, A would look roomier, but the job keeps the domain it started in.
    sticky = advise_group(index, gpus_requested=2, pending_gpus={"b1": 4}, policy=POLICY, chosen_before=("clique", "B"))
    assert sticky.domain == ("clique", "B")
    assert advise_group(index_fleet(fleet(*nodes)), gpus_requested=4, pending_gpus={}, policy=POLICY).preferred == ()
    # Even once telemetry shows B full, the job stays: moving on would split it for certain.
    full = advise_group(index, gpus_requested=4, pending_gpus={"b1": 8, "b2": 4}, policy=POLICY,
                        chosen_before=("clique", "B"))
    assert full.domain == ("clique", "B") and {p.node for p in full.preferred} <= {"b1", "b2"}
    assert "kept" in full.reason
    fresh = advise_group(index, gpus_requested=4, pending_gpus={"b1": 8, "b2": 4}, policy=POLICY)
    assert fresh.domain is None and fresh.preferred == () and "no domain has room" in fresh.reason


def test_of_two_domains_with_equal_room_a_job_goes_where_the_serving_load_is_lower():
    # Held-out fleet (issue 34, seed 4): a job packed beside replicas at their replica cap pushed
    # those nodes past the contention knee, and its p99 went from 2.6 s (stock) to 13.6 s.
    from scoring.advice.placement import advise_group

    busy = [node(f"a{i}", allocated=4, util=45.0) for i in range(2)]
    quiet = [node(f"b{i}", allocated=4, util=12.0) for i in range(2)]
    topology = {**{n.name: (("clique", "A"),) for n in busy}, **{n.name: (("clique", "B"),) for n in quiet}}
    advice = advise_group(index_fleet(fleet(*busy, *quiet), topology), gpus_requested=4, pending_gpus={},
                          policy=POLICY)
    assert advice.domain == ("clique", "B") and {p.node for p in advice.preferred} == {"b0", "b1"}
    # Room still counts: twice the room at the same load wins.
    roomy = [node(f"c{i}", allocated=4, util=12.0) for i in range(4)]
    topology.update({n.name: (("clique", "C"),) for n in roomy})
    advice = advise_group(index_fleet(fleet(*busy, *quiet, *roomy), topology), gpus_requested=4, pending_gpus={},
                          policy=POLICY)
    assert advice.domain == ("clique", "C")


def test_the_ledger_remembers_a_jobs_domain_until_telemetry_can_show_it():
    ledger = SteeringLedger(settle_seconds=30)
    ledger.remember_group("ns/job=x", ("clique", "B"), NOW)
    assert ledger.group_domain("ns/job=x", NOW + timedelta(seconds=10)) == ("clique", "B")
    assert ledger.group_domain("ns/job=x", NOW + timedelta(seconds=31)) is None


def test_the_ledger_forgets_a_jobs_domain_with_its_telemetry_even_if_never_asked_again():
    ledger = SteeringLedger(settle_seconds=30)
    for number in range(100):
        ledger.remember_group(f"ns/job={number}", ("clique", "B"), NOW)
    ledger.remember_group("ns/job=late", ("clique", "C"), NOW + timedelta(seconds=20))
    assert ledger.groups_remembered() == 101
    ledger.pending(NOW + timedelta(seconds=31))  # any later look at the ledger expires old entries
    assert ledger.groups_remembered() == 1
    assert ledger.group_domain("ns/job=late", NOW + timedelta(seconds=31)) == ("clique", "C")
