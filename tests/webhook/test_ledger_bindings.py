"""The in-flight ledger with a cluster view: bindings from any replica, a steered pod's booking
moving to where it bound, room from the view's exact free units, and no double counting."""

from __future__ import annotations

from datetime import timedelta

from scoring.advice.placement import index_fleet
from scoring.cluster.feasibility import NodeFacts, PodConstraints
from scoring.cluster.view import Binding, ClusterView
from tests.webhook.helpers import NOW, fleet, node
from webhook.ledger import SteeringLedger

GPU = "nvidia.com/gpu"
ONE = PodConstraints(units=((GPU, 1),))


def view(held=None, bound=frozenset(), names=("a", "b", "c")):
    return ClusterView({n: NodeFacts(n, {}, (), False, {GPU: 8}) for n in names}, held or {}, frozenset(bound), NOW)


def test_a_steered_pods_booking_moves_to_the_node_it_bound_to():
    ledger = SteeringLedger(45, replica="r1-")
    ledger.prepare(index_fleet(fleet(node("a", util=5), node("b", util=30), node("c", util=60))), view())
    booking = ledger.booking_id()
    ledger.record("a", ((GPU, 2),), NOW, booking)
    assert ledger.pending(NOW) == {"a": 2}
    ledger.bind(Binding("ml/web-1", "b", ((GPU, 2),), NOW + timedelta(seconds=2), booking))
    assert ledger.pending(NOW) == {"b": 2}, "the scheduler chose b: the booking follows the pod"
    ledger.bind(Binding("ml/web-1", "b", ((GPU, 2),), NOW + timedelta(seconds=3), booking))
    assert ledger.pending(NOW) == {"b": 2}, "a binding seen twice (a relist) counts once"


def test_bindings_of_other_replicas_and_unsteered_pods_are_booked_too():
    ledger = SteeringLedger(45, replica="r1-")
    ledger.prepare(index_fleet(fleet(node("a", util=5), node("b", util=30))), view(names=("a", "b")))
    ledger.bind(Binding("ml/other", "a", ((GPU, 1),), NOW, "r2-7"))
    ledger.bind(Binding("ml/plain", "a", ((GPU, 3),), NOW, ""))
    assert ledger.pending(NOW) == {"a": 4}
    assert ledger.pending(NOW + timedelta(seconds=45)) == {}, "forgotten once telemetry can show them"


def test_bindings_seen_out_of_time_order_each_settle_on_their_own_time():
    """A relist hands bindings over in the list's order, each dated by its own scheduling: a pod
    bound a minute ago may come after one bound just now. The older one settles first all the
    same; behind the newer one it stayed booked and hid a warm node's room (issue 47)."""
    ledger = SteeringLedger(45, replica="r1-")
    ledger.prepare(index_fleet(fleet(node("a", util=5), node("b", util=30))), view(names=("a", "b")))
    ledger.bind(Binding("steer-job/worker-0", "a", ((GPU, 4),), NOW, ""))
    ledger.bind(Binding("steering-fill/fill-b", "b", ((GPU, 5),), NOW - timedelta(seconds=60), ""))
    assert ledger.pending(NOW - timedelta(seconds=30)) == {"a": 4, "b": 5}
    assert ledger.pending(NOW) == {"a": 4}, "the filler, bound 60 s ago, is in the telemetry now"
    assert ledger.pending(NOW + timedelta(seconds=45)) == {}


def test_a_pod_gone_before_its_booking_settled_takes_the_booking_with_it():
    ledger = SteeringLedger(45, replica="r1-")
    ledger.prepare(index_fleet(fleet(node("a", util=5), node("b", util=30))), view(names=("a", "b")))
    booking = ledger.booking_id()
    ledger.record("a", ((GPU, 2),), NOW, booking)
    ledger.bind(Binding("ml/steered", "a", ((GPU, 2),), NOW, booking))
    ledger.bind(Binding("ml/plain", "b", ((GPU, 3),), NOW, ""))
    ledger.unbind("ml/steered")
    assert ledger.pending(NOW) == {"b": 3}, "its load will not come"
    ledger.unbind("ml/plain")
    ledger.unbind("ml/never-bound")
    assert ledger.pending(NOW) == {}
    ledger.bind(Binding("ml/plain", "b", ((GPU, 3),), NOW, ""))
    assert ledger.pending(NOW) == {"b": 3}, "bound again (a new pod of the same name) is booked again"


def test_room_is_the_views_free_units_less_what_the_view_does_not_hold_yet():
    index = index_fleet(fleet(node("a", util=5), node("b", util=30)))
    ledger = SteeringLedger(45)
    ledger.prepare(index, view({"a": {GPU: 6}}, names=("a", "b")))
    chosen, _ = ledger.top(index, NOW, need=1, k=2, pod=ONE)
    assert {name: room for _, room, name in chosen} == {"a": 2, "b": 8}, "exact free units from the view"
    ledger.bind(Binding("ml/x", "a", ((GPU, 2),), NOW, ""))
    chosen, _ = ledger.top(index, NOW, need=1, k=2, pod=ONE)
    assert [c[2] for c in chosen] == ["b"], "a is full once the binding the view lacks is counted"
    # The next refresh's view holds that pod: its units are not counted twice.
    ledger.prepare(index, view({"a": {GPU: 8}}, bound={"ml/x"}, names=("a", "b")))
    assert [c[2] for c in ledger.top(index, NOW, need=1, k=2, pod=ONE)[0]] == ["b"]
    ledger.prepare(index, view({"a": {GPU: 6}}, bound={"ml/x"}, names=("a", "b")))
    assert "a" in [c[2] for c in ledger.top(index, NOW, need=1, k=2, pod=ONE)[0]], "2 free, none unseen"


def test_nodes_the_view_does_not_know_are_never_candidates():
    index = index_fleet(fleet(node("a", util=5), node("ghost", util=1)))
    ledger = SteeringLedger(45)
    ledger.prepare(index, view(names=("a",)))
    assert [c[2] for c in ledger.top(index, NOW, need=1, k=5, pod=ONE)[0]] == ["a"]


def _decide(ledger, index, pod):
    import json

    from scoring.policy import PlacementPolicy
    from webhook.admit import decide
    from webhook.review import decode_review, patched, pod_review

    decision = decide(decode_review(json.dumps(pod_review(pod)).encode()), index=index, telemetry_time=NOW,
                      snapshot_age_seconds=5.0, ledger=ledger, policy=PlacementPolicy(), now=NOW)
    return decision, patched(pod, decision.review)


def test_no_feasible_node_with_room_means_no_node_terms_and_the_annotation_says_so():
    index = index_fleet(fleet(node("a", util=5), node("b", util=30)))
    ledger = SteeringLedger(45)
    ledger.prepare(index, view(names=("a", "b")))
    pod = {"metadata": {"name": "m", "namespace": "ml"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}}
    decision, advised = _decide(ledger, index, pod)
    assert "nodeAffinity" not in advised["spec"].get("affinity", {})
    assert "no cool or warm node the pod can use" in advised["metadata"]["annotations"]["gpu-balancer.io/advice"]
    assert decision.reason == "no-room" and ledger.pending(NOW) == {}


def test_a_training_job_picks_its_domain_among_nodes_it_can_use():
    nodes = [node(f"{pool}-{i}", util=5 if pool == "l4" else 30) for pool in ("l4", "h100") for i in range(2)]
    index = index_fleet(fleet(*nodes), {n.name: (("nvidia.com/gpu.clique", n.name.split("-")[0]),) for n in nodes})
    facts = {n.name: NodeFacts(n.name, {"pool": n.name.split("-")[0]}, (), False, {GPU: 8}) for n in nodes}
    ledger = SteeringLedger(45)
    ledger.prepare(index, ClusterView(facts, {}, frozenset(), NOW))
    worker = {"metadata": {"name": "w0", "namespace": "ml", "labels": {"jobset.sigs.k8s.io/jobset-name": "job"}},
              "spec": {"nodeSelector": {"pool": "h100"}, "containers": [
                  {"name": "c", "resources": {"limits": {GPU: "4"}}}]}}
    _, advised = _decide(ledger, index, worker)
    terms = advised["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms and {t["preference"]["matchFields"][0]["values"][0] for t in terms} <= {"h100-0", "h100-1"}, \
        "the cooler l4 clique is not one the job can use"


def test_a_node_whose_telemetry_free_gpus_are_all_booked_is_no_candidate_even_with_units_free_in_the_view():
    # Telemetry: 2 of 8 free on "a"; the view: 8 free (the busy pods ended); bookings 2 since.
    index = index_fleet(fleet(node("a", util=5, allocated=6), node("b", util=40)))
    ledger = SteeringLedger(45)
    ledger.prepare(index, view(names=("a", "b")))
    ledger.bind(Binding("ml/x", "a", ((GPU, 2),), NOW, ""))
    chosen, _ = ledger.top(index, NOW, need=1, k=2, pod=ONE)
    assert [name for _, _, name in chosen] == ["b"] and all(score > 0 for score, _, _ in chosen)
    decision, _ = _decide(ledger, index, {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {GPU: "1"}}}]}})
    assert decision.reason == "steered"


def test_a_refresh_ranks_the_signatures_the_last_snapshot_was_asked_about_before_any_admission():
    pinned = PodConstraints(node_selector=(("pool", "h100"),), units=((GPU, 1),))
    facts = {n: NodeFacts(n, {"pool": "h100" if n == "a" else "l4"}, (), False, {GPU: 8}) for n in ("a", "b")}
    ledger = SteeringLedger(45)
    first = index_fleet(fleet(node("a", util=5), node("b", util=30)))
    ledger.prepare(first, ClusterView(facts, {}, frozenset(), NOW))
    ledger.top(first, NOW, need=1, k=2, pod=pinned)
    second = index_fleet(fleet(node("a", util=20), node("b", util=1)))
    ledger.prepare(second, ClusterView(facts, {}, frozenset(), NOW))
    assert pinned in ledger._rankings, "ranked in the refresh, not by the next admission"
    assert [c[2] for c in ledger.top(second, NOW, need=1, k=2, pod=pinned)[0]] == ["a"]
