"""An HPA's load over its target, read from its status as the API server lists it (`autoscaling/v2`)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from scoring.cluster.autoscalers import load_ratio, scaled_workload
from scoring.cluster.cluster_state import ClusterState
from scoring.policy import PlacementPolicy

NOW = datetime(2026, 12, 7, tzinfo=timezone.utc)


def hpa(name="svc", namespace="ml", metrics=(), current=(), target="svc") -> dict:
    """An HPA scaling Deployment `target`, with `spec.metrics` and `status.currentMetrics`."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "maxReplicas": 10, "metrics": list(metrics)},
            "status": {"currentReplicas": 4, "desiredReplicas": 6, "currentMetrics": list(current)}}


def pods_metric(name: str, figure: str, side: str = "target") -> dict:
    values = {"type": "AverageValue", "averageValue": figure} if side == "target" else {"averageValue": figure}
    return {"type": "Pods", "pods": {"metric": {"name": name}, side: values}}


def cpu(utilisation: int, side: str = "target") -> dict:
    values = {"type": "Utilization", "averageUtilization": utilisation} if side == "target" \
        else {"averageUtilization": utilisation, "averageValue": "3"}
    return {"type": "Resource", "resource": {"name": "cpu", side: values}}


def test_the_ratio_is_each_metrics_reading_over_its_target_and_the_highest_counts():
    running = pods_metric("vllm:num_requests_running", "48")
    object_metric = {"type": "Object", "object": {"metric": {"name": "requests_per_second"},
                                                   "describedObject": {"kind": "Service", "name": "svc"},
                                                   "target": {"type": "Value", "value": "100"}}}
    object_now = {"type": "Object", "object": {"metric": {"name": "requests_per_second"},
                                                "describedObject": {"kind": "Service", "name": "svc"},
                                                "current": {"value": "130"}}}
    found = hpa(metrics=[running, cpu(60), object_metric],
                current=[pods_metric("vllm:num_requests_running", "72", "current"), cpu(30, "current"), object_now])
    assert load_ratio(found) == pytest.approx(1.5)  # 72 of 48; cpu 0.5 and requests 1.3 are lower
    assert scaled_workload(found) == ("ml", "svc")


@pytest.mark.parametrize("current", [
    [],  # a new HPA: nothing read yet
    [pods_metric("another_metric", "900", "current")],  # a reading of a metric it does not target
    [pods_metric("vllm:num_requests_running", "lots", "current")],  # not a quantity
])
def test_without_a_reading_for_a_target_there_is_no_ratio(current):
    assert load_ratio(hpa(metrics=[pods_metric("vllm:num_requests_running", "48")], current=current)) is None


def test_quantities_in_milli_units_compare_as_the_api_server_writes_them():
    found = hpa(metrics=[pods_metric("gpu_busy_share", "600m")],
                current=[pods_metric("gpu_busy_share", "900m", "current")])
    assert load_ratio(found) == pytest.approx(1.5)


def test_the_cluster_state_keeps_each_hpas_ratio_by_the_workload_it_scales_until_it_goes():
    state = ClusterState(PlacementPolicy())
    hot = hpa(metrics=[cpu(60)], current=[cpu(90, "current")])
    state.replace("horizontalpodautoscalers", [hot, hpa(name="idle", target="web", metrics=[cpu(60)])], NOW)
    assert state.view(NOW).scaling == {("ml", "svc"): pytest.approx(1.5)}, "an HPA with no reading counts for nothing"
    state.apply("horizontalpodautoscalers", "MODIFIED", hpa(metrics=[cpu(60)], current=[cpu(54, "current")]), NOW)
    assert state.view(NOW).scaling == {("ml", "svc"): pytest.approx(0.9)}
    state.apply("horizontalpodautoscalers", "DELETED", hot, NOW)
    assert state.view(NOW).scaling == {}
    state.replace("horizontalpodautoscalers", [hot], NOW)
    state.clear("horizontalpodautoscalers")
    assert state.view(NOW).scaling == {}, "a cluster that does not serve HPAs, or a role that cannot read them"
