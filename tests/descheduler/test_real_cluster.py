"""Optional: read a real cluster when KUBECONFIG is set (read-only: list nodes and pods, plan)."""

from __future__ import annotations

import os

import pytest

from descheduler.ledger import LedgerState
from descheduler.plan import plan_evictions
from descheduler.run import live_cluster
from scoring.heat import FleetHeat
from scoring.policy import default_policy
from scoring.telemetry import ClusterSnapshot
from tests.descheduler.helpers import NOW


@pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="KUBECONFIG is not set: real-cluster suite skipped")
def test_a_real_cluster_is_read_and_planned_without_writing():
    from kubernetes import client, config

    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    policy = default_policy()
    cluster = live_cluster(client.CoreV1Api(), policy)
    assert cluster.nodes, "a real cluster has nodes"
    assert cluster.opted_in_namespaces is not None, "namespaces are listed, so the opt-in can be checked"
    plan = plan_evictions(fleet=FleetHeat(NOW, False, 0, ()), snapshot=ClusterSnapshot(NOW, ()), window={},
                          cluster=cluster, ledger=LedgerState(), policy=policy.descheduler, now=NOW)
    assert plan.evictions == ()
