"""Evictions, Events and the ledger through the real `kubernetes` client against a stateful
Kubernetes API stand-in (kmock) on loopback."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kubernetes import client

from descheduler.evictor import carry_out
from descheduler.ledger import EvictionRecord, LedgerState
from descheduler.ledger_store import load_ledger, save_ledger
from descheduler.plan import Plan, PlannedEviction
from scoring.policy import DeschedulerPolicy
from tests.descheduler.helpers import NOW
from tests.kube_semantics import GuardedObject, serve_evictions, status

POLICY = DeschedulerPolicy()


def planned(*names):
    return Plan(("hot-a",), tuple(PlannedEviction("ml", n, "hot-a", f"ml/Deployment/{n}", "hot") for n in names), (), ())


def eviction_requests(emulator, pod):
    return list(emulator[f"post /api/v1/namespaces/ml/pods/{pod}/eviction"])


def budget(name, app, allowed):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed}}


def labelled_pod(name, app):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "vllm"}]}}


def test_evictions_honour_pdbs_report_500s_and_leave_events(kube):
    """The API server's answers computed from PodDisruptionBudget objects (tests/kube_semantics.py)."""
    api, emulator = kube
    core, events, policy = client.CoreV1Api(api), client.EventsV1Api(api), client.PolicyV1Api(api)
    for name, app in (("ok", "chat"), ("ok-2", "chat"), ("guarded", "embed"), ("broken", "rank")):
        core.create_namespaced_pod("ml", labelled_pod(name, app))
    policy.create_namespaced_pod_disruption_budget("ml", budget("chat", "chat", 1))  # one disruption left
    policy.create_namespaced_pod_disruption_budget("ml", budget("embed", "embed", 0))
    policy.create_namespaced_pod_disruption_budget("ml", budget("rank", "rank", 1))
    policy.create_namespaced_pod_disruption_budget("ml", budget("rank-too", "rank", 1))  # two budgets: 500
    serve_evictions(emulator, "ml", ["ok", "ok-2", "guarded", "broken", "gone"])
    outcomes = carry_out(planned("ok", "guarded", "broken", "gone", "ok-2"), core, events, dry_run=False, now=NOW)
    assert [(o.eviction.pod, o.result) for o in outcomes] == [
        ("ok", "evicted"), ("guarded", "blocked"), ("broken", "error"), ("gone", "gone"), ("ok-2", "blocked")]
    assert "PodDisruptionBudget" in outcomes[1].detail and "500" in outcomes[2].detail
    assert "PodDisruptionBudget" in outcomes[4].detail, "the first eviction used the chat budget's only disruption"
    assert len(eviction_requests(emulator, "guarded")) == 1, "a PDB refusal is not retried in the same run"
    for pod in ("ok", "guarded", "broken", "gone"):  # what the API server's PDB check reads: an Eviction of the pod
        (request,) = eviction_requests(emulator, pod)
        assert request.data["kind"] == "Eviction" and request.data["apiVersion"] == "policy/v1", request.data
        assert request.data["metadata"] == {"name": pod, "namespace": "ml"}
        assert "deleteOptions" not in request.data, "no grace-period or precondition override of the PDB's say"
    assert [o.done for o in outcomes] == [True, False, False, True, False], "only evicted and gone count as done"
    assert sorted(p.metadata.name for p in core.list_namespaced_pod("ml").items) == ["broken", "guarded", "ok-2"]
    assert policy.read_namespaced_pod_disruption_budget("chat", "ml").status.disruptions_allowed == 0
    recorded = events.list_namespaced_event("ml").items
    assert [(e.regarding.name, e.action, e.reporting_controller) for e in recorded] == [
        ("ok", "Evict", "gpu-balancer.io/descheduler")]
    assert "hot-a" in recorded[0].note


def test_dry_run_evicts_nothing_and_reports_would_evict_events(kube):
    api, emulator = kube
    events = client.EventsV1Api(api)
    outcomes = carry_out(planned("a", "b"), client.CoreV1Api(api), events, dry_run=True, now=NOW)
    assert [o.result for o in outcomes] == ["dry-run", "dry-run"]
    assert eviction_requests(emulator, "a") == [] and eviction_requests(emulator, "b") == []
    assert list(emulator["patch"]) == [] and list(emulator["put"]) == []
    recorded = events.list_namespaced_event("ml").items
    assert sorted((e.regarding.name, e.reason) for e in recorded) == [("a", "WouldEvict"), ("b", "WouldEvict")]
    assert all("nothing was evicted" in e.note for e in recorded)


def test_dry_run_without_an_events_api_makes_no_write_call_at_all(kube):
    api, emulator = kube
    outcomes = carry_out(planned("a"), client.CoreV1Api(api), None, dry_run=True, now=NOW)
    assert [o.result for o in outcomes] == ["dry-run"]
    assert list(emulator["post"]) == [] and list(emulator["patch"]) == [] and list(emulator["put"]) == []


def test_the_ledger_is_kept_in_a_configmap_the_next_run_reads(kube):
    api, _ = kube
    core = client.CoreV1Api(api)
    state, version = load_ledger(core, POLICY)
    assert state == LedgerState() and version is None
    first = state.with_evictions([EvictionRecord("ml/Deployment/svc", "ml", "svc-1", "hot-a", NOW)], NOW, POLICY)
    save_ledger(core, first, version, POLICY)
    loaded, version = load_ledger(core, POLICY)
    assert loaded == first and version is not None
    second = loaded.with_evictions([EvictionRecord("ml/Deployment/web", "ml", "web-1", "hot-b",
                                                   NOW + timedelta(minutes=5))], NOW, POLICY)
    save_ledger(core, second, version, POLICY)
    assert load_ledger(core, POLICY)[0] == second
    assert load_ledger(core, POLICY)[0].cooldown_until("ml/Deployment/svc", NOW + timedelta(minutes=1), POLICY)


def test_a_ledger_that_changes_under_every_write_gives_up_and_the_report_says_so(kube):
    """409 on every guarded write (the real server's answer is proven in tests/control_plane):
    read again and retry, a bounded number of times; then the run reports its evictions and says
    their cooldowns were not recorded, and counts it as an error (exit 1)."""
    from descheduler.ledger_store import CONFLICT_ATTEMPTS, LedgerConflict, record_evictions
    from descheduler.run import Report

    api, emulator = kube
    core = client.CoreV1Api(api)
    save_ledger(core, LedgerState(), None, POLICY)
    path = f"/api/v1/namespaces/{POLICY.ledger_namespace}/configmaps/{POLICY.ledger_name}"
    emulator[f"patch {path}"] << status(409, "Conflict", "the object has been modified; please apply "
                                         "your changes to the latest version and try again")
    record = EvictionRecord("ml/Deployment/svc", "ml", "svc-1", "hot-a", NOW)
    with pytest.raises(LedgerConflict) as gave_up:
        record_evictions(core, [record], NOW, POLICY, read=(LedgerState(), "41"))
    assert len(list(emulator[f"patch {path}"])) == CONFLICT_ATTEMPTS, "bounded: it does not spin"
    report = Report(False, planned("ok"), (), ledger_error=str(gave_up.value))
    assert report.errors == 1 and any("ledger not updated" in note for note in report.as_dict()["notes"])


def test_two_runs_racing_on_the_ledger_lose_no_record(kube):
    """Computed 409s (tests/kube_semantics.py): run A and run B read the ledger at the same
    version; B writes first, so A's guarded write is refused, and A reads again and adds its
    record to B's instead of overwriting it."""
    from descheduler.ledger_store import record_evictions

    api, emulator = kube
    core = client.CoreV1Api(api)
    ledger = GuardedObject(emulator, namespace=POLICY.ledger_namespace, plural="configmaps", name=POLICY.ledger_name,
                           kind="ConfigMap")
    save_ledger(core, LedgerState(), None, POLICY)
    read_by_a, read_by_b = load_ledger(core, POLICY), load_ledger(core, POLICY)
    assert read_by_a[1] == read_by_b[1] == "1"
    b = EvictionRecord("ml/Deployment/web", "ml", "web-1", "hot-b", NOW)
    a = EvictionRecord("ml/Deployment/svc", "ml", "svc-1", "hot-a", NOW)
    record_evictions(core, [b], NOW, POLICY, read=read_by_b)
    stored = record_evictions(core, [a], NOW, POLICY, read=read_by_a)
    final, version = load_ledger(core, POLICY)
    assert final == stored and version == "3", "A's first write was refused and changed nothing"
    assert final.cooldown_until(a.workload, NOW, POLICY) and final.cooldown_until(b.workload, NOW, POLICY)
    assert ledger.writes == 3  # the create, B's write, A's second write
