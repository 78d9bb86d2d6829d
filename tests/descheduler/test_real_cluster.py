"""Optional: read a real cluster when KUBECONFIG is set (read-only: list nodes and pods, plan)."""

from __future__ import annotations

import os

import pytest

from descheduler.ledger import LedgerState
from descheduler.plan import plan_evictions
from descheduler.run import live_cluster
from scoring.policy import default_policy
from tests.descheduler.helpers import NOW, fleet, heat, snapshot, window


@pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="KUBECONFIG is not set: real-cluster suite skipped")
def test_a_real_cluster_is_read_as_the_api_lists_it_and_planned_only_inside_the_opt_in():
    from kubernetes import client, config

    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    core = client.CoreV1Api()
    policy = default_policy()
    cluster = live_cluster(core, policy)
    listed = {node.metadata.name for node in core.list_node().items}
    assert listed and set(cluster.nodes) == listed, "every node the API lists, and no other"
    bound = {(p.metadata.namespace, p.metadata.name) for p in core.list_pod_for_all_namespaces().items
             if p.spec.node_name and p.status.phase in ("Pending", "Running")}
    read = {(pod.namespace, pod.name) for name in cluster.nodes for pod in cluster.pods_on(name)}
    assert read <= bound, f"pods read that the API does not list as bound: {sorted(read - bound)[:5]}"
    # Half the nodes sustained-hot, half cool: whatever the plan would move must be in an
    # opted-in namespace and come from a hot node the cluster has.
    names = sorted(cluster.nodes)
    hot = set(names[: len(names) // 2 + 1])
    utils = {name: 95.0 if name in hot else 10.0 for name in names}
    plan = plan_evictions(fleet=fleet(*(heat(name, u) for name, u in utils.items())), snapshot=snapshot({}),
                          windows={"utilisation": window(**{name.replace("-", "_"): (u, u - 5, 1.0) for name, u in utils.items()})},
                          cluster=cluster, ledger=LedgerState(), policy=policy.descheduler, now=NOW)
    assert set(plan.hot_nodes) == hot
    for eviction in plan.evictions:
        assert cluster.why_namespace_excluded(eviction.namespace) is None, eviction
        assert eviction.node in hot, eviction
