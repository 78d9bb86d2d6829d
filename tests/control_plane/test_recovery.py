"""What the real API server does to state kept across calls: a watch expired by etcd compaction
(410 Gone) and the ledger ConfigMap written by two runs at once (409 Conflict)."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta, timezone

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from descheduler.ledger import EvictionRecord
from descheduler.ledger_store import load_ledger, record_evictions, save_ledger
from scoring.policy import DeschedulerPolicy
from sim.fleet import node_load_levels
from tests.control_plane.install import FLEET, OPTED_IN, advised, fill, new_pod, preferred_nodes

PODS_LISTED = "gpu_balancer_cluster_view_lists_total"


def test_control_plane_cluster_view_relists_after_a_watch_expired_by_etcd_compaction(installed):
    """The webhook sleeps (SIGSTOP) through a deletion, etcd's history is compacted past it and
    kube-apiserver restarts: the resumed watch is answered 410 Gone, the view lists again, and
    advice names the node the deletion freed (a watch alone never told it)."""
    plane, webhook = installed.plane, installed.webhook
    plane.create_namespaces("cp-gone", labels=OPTED_IN)
    plane.create_namespaces("cp-gone-filler")
    cool = [FLEET.node_name(i) for i, level in enumerate(node_load_levels(FLEET)) if level < 0.5]
    fill(plane, [FLEET.node_name(i) for i in range(1, FLEET.nodes)], "cp-gone-filler")
    freed = cool[0]
    # What fills it and no controller would recreate: this test's filler, or an earlier test's.
    bare = [p["metadata"] for p in plane.get("pods", "-A", "--field-selector", f"spec.nodeName={freed}")["items"]
            if not p["metadata"].get("ownerReferences")]
    assert bare, f"{freed} is held by pods no filler can free"
    plane.wait_for(lambda: webhook.metric(PODS_LISTED, kind="pods") >= 1, "the view listed pods")
    listed = webhook.metric(PODS_LISTED, kind="pods")
    os.kill(webhook.process.pid, signal.SIGSTOP)
    try:
        for metadata in bare:
            plane.kubectl("delete", "pod", metadata["name"], "-n", metadata["namespace"], "--timeout=60s")
        plane.compact_etcd()
        plane.restart_apiserver()  # the watch cache starts again after the compacted revision
    finally:
        os.kill(webhook.process.pid, signal.SIGCONT)
    plane.wait_for(lambda: webhook.metric(PODS_LISTED, kind="pods") > listed,
                   "the view relisted pods after 410 Gone", 60)
    assert "410 Gone" in webhook.log()
    time.sleep(3)  # the relisted view is taken into the advice at the next telemetry refresh (every 1 s)
    plane.apply(new_pod("after-compaction", "cp-gone"))
    pod = plane.get("pod", "after-compaction", "-n", "cp-gone")
    assert advised(pod), webhook.log()
    assert freed in preferred_nodes(pod), (freed, pod["metadata"]["annotations"])


@pytest.fixture
def ledger_api(installed):
    """The CoreV1Api of the descheduler's own ServiceAccount token, and a clean slate."""
    plane = installed.plane
    plane.kubectl("delete", "configmap", "gpu-balancer-eviction-ledger", "-n", "gpu-balancer", "--ignore-not-found")
    kubeconfig = plane.service_account_kubeconfig("gpu-balancer", "gpu-balancer-descheduler",
                                                  installed.workdir / "ledger.kubeconfig")
    api = kubernetes.config.new_client_from_config(str(kubeconfig))
    yield kubernetes.client.CoreV1Api(api)
    api.close()


def _record(workload: str, at: datetime) -> EvictionRecord:
    return EvictionRecord(f"ml/Deployment/{workload}", "ml", f"{workload}-1", FLEET.node_name(0), at)


def test_control_plane_ledger_keeps_both_runs_records_through_real_conflicts(ledger_api):
    """Two runs read the ledger, both evict, both write: the second meets 409 (a create that lost
    the race, then a resourceVersion that moved on) and adds its records to what the first stored."""
    core, policy = ledger_api, DeschedulerPolicy()
    now = datetime.now(timezone.utc)
    for round_ in range(2):  # first with no ConfigMap yet (create against create), then with one (patch)
        first, second = load_ledger(core, policy), load_ledger(core, policy)
        assert first[1] == second[1]
        mine, theirs = _record(f"a{round_}", now), _record(f"b{round_}", now + timedelta(seconds=1))
        record_evictions(core, [theirs], now, policy, read=second)
        if round_:
            with pytest.raises(ApiException) as refused:  # what the guarded write meets, unretried
                save_ledger(core, first[0].with_evictions([mine], now, policy), first[1], policy)
            assert refused.value.status == 409
        record_evictions(core, [mine], now, policy, read=first)
        stored = load_ledger(core, policy)[0].records
        assert {mine, theirs} <= set(stored), stored
    assert len(load_ledger(core, policy)[0].records) == 4
