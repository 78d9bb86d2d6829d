"""The cluster view's list/watch through the real `kubernetes` client against a stateful API
stand-in on loopback: pagination, bindings, bookmarks, 410 relists (an ERROR event, the HTTP
status, an expired continue token), 429 with Retry-After, dropped streams, 403 fallback."""

from __future__ import annotations

import time

from scoring.cluster.view import BOOKING_ANNOTATION
from tests.polling import wait_until
from tests.scoring.test_autoscalers import cpu, hpa
from tests.webhook.conftest import POLICY


def node(name: str, gpus: int = 8, **extra) -> dict:
    return {"metadata": {"name": name, "labels": {"pool": extra.pop("pool", "h100")}},
            "spec": extra, "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": str(gpus)}}}


def pod(name: str, node_name: str | None, gpus: int = 1, phase: str = "Running", booking: str = "",
        resource: str = "nvidia.com/gpu") -> dict:
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": {resource: str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    metadata: dict = {"name": name, "namespace": "ml"}
    if booking:
        metadata["annotations"] = {BOOKING_ANNOTATION: booking}
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def test_lists_in_pages_and_keeps_units_held_per_node_and_resource(cluster):
    api, start, bindings = cluster
    for i in range(7):
        api.put("nodes", node(f"n{i}"))
    api.put("nodes", node("mig", 0) | {"status": {"allocatable": {"nvidia.com/mig-1g.10gb": "28"}}})
    api.put("pods", pod("a", "n1", 2))
    api.put("pods", pod("b", "mig", 3, resource="nvidia.com/mig-1g.10gb"))
    api.put("pods", pod("pending", None))
    api.put("pods", pod("done", "n1", 4, phase="Succeeded"))
    api.put("pods", {"metadata": {"name": "cpu", "namespace": "ml"}, "spec": {"nodeName": "n2", "containers": []},
                     "status": {"phase": "Running"}})
    watch = start()
    wait_until(watch.freeze)
    view = watch.freeze()
    assert sorted(view.nodes) == ["mig"] + [f"n{i}" for i in range(7)]
    assert view.free("n1")["nvidia.com/gpu"] == 6 and view.free("mig") == {"nvidia.com/mig-1g.10gb": 25}
    assert view.bound == {"ml/a", "ml/b"}
    node_lists = [q for path, q in api.requests if path == "/api/v1/nodes" and "watch" not in q]
    assert len(node_lists) == 3 and all(q["limit"] == ["3"] for q in node_lists)
    assert "continue" in node_lists[1] and "continue" in node_lists[2]
    pod_queries = [q for path, q in api.requests if path == "/api/v1/pods"]
    assert all("spec.nodeName!=" in q["fieldSelector"][0] for q in pod_queries)
    assert watch.state == "ok"


def test_bindings_and_releases_arrive_through_the_watch(cluster):
    api, start, bindings = cluster
    api.put("nodes", node("n1"))
    watch = start()
    wait_until(watch.freeze)
    api.put("pods", pod("web-1", None))
    api.put("pods", pod("web-1", "n1", 2, booking="r1-7"))
    wait_until(lambda: bindings)
    assert [(b.pod, b.node, b.units, b.booking) for b in bindings] == [("ml/web-1", "n1", (("nvidia.com/gpu", 2),),
                                                                         "r1-7")]
    wait_until(lambda: watch.freeze().free("n1")["nvidia.com/gpu"] == 6)
    api.put("pods", pod("web-1", "n1", 2, phase="Succeeded"))
    wait_until(lambda: watch.freeze().free("n1")["nvidia.com/gpu"] == 8)
    api.put("nodes", node("n1", unschedulable=True, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
    wait_until(lambda: watch.freeze().nodes["n1"].unschedulable)
    assert watch.freeze().nodes["n1"].taints[0].key == "k"
    assert len(bindings) == 1, "a pod's end is not a binding"


def test_watch_resumes_from_bookmarks_and_relists_on_410_gone(cluster):
    api, start, _ = cluster
    api.put("nodes", node("n1"))
    watch = start(watch_seconds=1)
    wait_until(watch.freeze)
    api.bookmark()
    bookmarked = api.version
    wait_until(lambda: any(q.get("resourceVersion") == [str(bookmarked)] for path, q in api.requests
                           if path == "/api/v1/nodes" and "watch" in q))
    assert watch.relists["nodes"] == 1
    api.put("nodes", node("n2"))
    api.compact()  # the open watch ends and the history it would resume from is gone
    api.put("nodes", node("n3"))
    wait_until(lambda: watch.relists["nodes"] >= 2)
    wait_until(lambda: sorted(watch.freeze().nodes) == ["n1", "n2", "n3"])


def test_410_gone_as_the_http_status_of_a_watch_relists_too(cluster):
    api, start, _ = cluster
    api.gone_as_status = True
    api.put("nodes", node("n1"))
    watch = start(watch_seconds=1)
    wait_until(watch.freeze)
    api.compact()
    api.put("nodes", node("n2"))
    wait_until(lambda: watch.relists["nodes"] >= 2)
    wait_until(lambda: sorted(watch.freeze().nodes) == ["n1", "n2"])
    gone = [q for path, q in api.requests if path == "/api/v1/nodes" and "watch" in q]
    assert gone and watch.state == "ok"


def test_an_expired_continue_token_starts_the_list_over(cluster):
    api, start, _ = cluster
    for i in range(7):
        api.put("nodes", node(f"n{i}"))
    api.compact_before_next_page = True  # the history the first page was cut from is gone by the second
    watch = start()
    wait_until(lambda: watch.freeze() is not None and len(watch.freeze().nodes) == 7)
    lists = [q for path, q in api.requests if path == "/api/v1/nodes" and "watch" not in q]
    # page 1, page 2 refused (410 Expired), then pages 1-3 again from the start
    assert ["continue" in q for q in lists[:5]] == [False, True, False, True, True]
    assert watch.state == "ok"


def test_too_many_requests_waits_as_told_and_is_not_a_failure(cluster):
    api, start, _ = cluster
    api.put("nodes", node("n1"))
    api.throttle_next, api.retry_after_seconds = 1, 1
    states: list[str] = []
    watch = start(on_state=states.append, backoff=(0.05, 2.0))
    wait_until(lambda: watch.freeze() is not None)
    assert "unreachable" not in states
    throttled = api.requests[0][0]  # the one request answered 429; the other kinds' went through
    first, second = [at for (path, _), at in zip(api.requests, api.requests_at) if path == throttled][:2]
    assert second - first >= 0.9, "its next request waited the second Retry-After asked for"


def test_a_pod_gone_while_the_watch_was_away_is_released_by_the_relist(cluster):
    """Deleted, and its DELETED event compacted away before the watch resumed: only the relist
    after 410 Gone can tell, and it does: the pod is released (its booking dropped) as a
    DELETED event would."""
    api, start, bindings = cluster
    api.put("nodes", node("n1"))
    api.put("pods", pod("a", "n1", gpus=2))
    api.put("pods", pod("b", "n1"))
    watch = start(watch_seconds=30)
    wait_until(lambda: watch.freeze() is not None and watch.freeze().free("n1")["nvidia.com/gpu"] == 5)
    with api.changed:  # one step, so the open watch never sees the DELETED event
        api.delete("pods", "ml/a")
        api.compact()
    wait_until(lambda: watch.relists["pods"] >= 2)
    wait_until(lambda: watch.freeze().free("n1")["nvidia.com/gpu"] == 7)
    assert start.released == ["ml/a"]
    api.delete("pods", "ml/b")  # and a DELETED event seen releases it too
    wait_until(lambda: start.released == ["ml/a", "ml/b"])


def test_a_stream_dropped_mid_way_resumes_without_losing_events(cluster):
    api, start, bindings = cluster
    api.put("nodes", node("n1"))
    watch = start(watch_seconds=30)
    wait_until(watch.freeze)
    wait_until(lambda: any("watch" in q for path, q in api.requests if path == "/api/v1/pods"))
    api.drop_watch_after = 1
    api.put("pods", pod("a", "n1"))  # the pods stream drops after sending this one
    api.put("pods", pod("b", "n1"))
    api.put("pods", pod("c", "n1"))
    wait_until(lambda: {b.pod for b in bindings} == {"ml/a", "ml/b", "ml/c"})
    wait_until(lambda: watch.freeze().free("n1")["nvidia.com/gpu"] == 5)
    assert watch.relists["pods"] == 1, "resumed from its version, no relist needed"


def test_forbidden_means_no_view_and_one_state_change_until_access_returns(cluster):
    api, start, _ = cluster
    api.put("nodes", node("n1"))
    api.forbidden = True
    states: list[str] = []
    watch = start(on_state=states.append)
    wait_until(lambda: watch.state == "forbidden")
    time.sleep(0.5)  # several retries, still one state change
    assert watch.freeze() is None and states == ["forbidden"]
    api.forbidden = False
    wait_until(watch.freeze)
    assert states == ["forbidden", "ok"]


def test_each_hpas_load_over_target_is_listed_and_watched_and_a_cluster_without_them_still_has_a_view(cluster):
    api, start, _ = cluster
    api.put("nodes", node("n1"))
    api.put("horizontalpodautoscalers", hpa(metrics=[cpu(60)], current=[cpu(90, "current")]))
    watch = start()
    wait_until(lambda: (view := watch.freeze()) is not None and view.scaling)
    assert watch.freeze().scaling == {("ml", "svc"): 1.5}
    api.put("horizontalpodautoscalers", hpa(metrics=[cpu(60)], current=[cpu(48, "current")]))
    wait_until(lambda: watch.freeze().scaling == {("ml", "svc"): 0.8})
    watch.stop()

    api.serves_autoscaling = False
    without = start()
    wait_until(without.freeze)
    assert without.freeze().scaling == {} and without.absent == {"horizontalpodautoscalers": "not served by this cluster"}


def test_advice_from_the_watched_view_names_only_the_pool_the_pod_selects(cluster):
    """The issue's fleet: 8 busy h100 nodes, 8 idle l4 nodes, a burst of 8 pods pinned to h100."""
    import json
    from datetime import datetime, timedelta, timezone

    from scoring.advice.placement import index_fleet
    from scoring.heat import FleetHeat, NodeHeat, Tier
    from webhook.admit import decide
    from webhook.ledger import SteeringLedger
    from webhook.review import decode_review, patched, pod_review

    api, start, bindings = cluster
    now = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    utils = {}
    for i in range(8):
        api.put("nodes", node(f"h100-{i}", pool="h100"))
        api.put("nodes", node(f"l4-{i}", pool="l4"))
        utils[f"h100-{i}"], utils[f"l4-{i}"] = 38 + 4 * i, 0.0
    ledger = SteeringLedger(45, replica="a-")
    watch = start(clock=lambda: now)
    wait_until(watch.freeze)
    heat = FleetHeat(now, False, 5.0, tuple(NodeHeat(n, 8, 0, u, u, 0.3, 50.0, None,
                                                     Tier.COOL if u < 50 else Tier.WARM, ()) for n, u in utils.items()))
    index = index_fleet(heat)
    ledger.prepare(index, watch.freeze())
    chosen = []
    for i in range(8):
        obj = pod(f"burst-{i}", None)
        obj["spec"]["nodeSelector"] = {"pool": "h100"}
        decision = decide(decode_review(json.dumps(pod_review(obj)).encode()), index=index, telemetry_time=now,
                          snapshot_age_seconds=5.0, ledger=ledger, policy=POLICY, now=now + timedelta(seconds=1))
        terms = patched(obj, decision.review)["spec"]["affinity"]["nodeAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        names = [t["preference"]["matchFields"][0]["values"][0] for t in terms]
        assert names and all(n.startswith("h100-") for n in names), names
        chosen.append(names[0])
    assert max(chosen.count(n) for n in chosen) <= 3, f"the burst is spread, not piled up: {chosen}"
    assert set(ledger.pending(now)) == set(chosen), "every booking sits on an h100 node"
    # Without API access the same pod is advised on telemetry alone (the ledger has no view).
    api.forbidden = True
    blind = SteeringLedger(45)
    blind.prepare(index, None)
    obj = pod("blind", None)
    obj["spec"]["nodeSelector"] = {"pool": "h100"}
    decision = decide(decode_review(json.dumps(pod_review(obj)).encode()), index=index, telemetry_time=now,
                      snapshot_age_seconds=5.0, ledger=blind, policy=POLICY, now=now)
    assert decision.outcome == "mutated" and decision.review["response"]["allowed"] is True


def test_without_api_access_the_app_stays_ready_and_says_so_on_metrics(cluster):
    from fastapi.testclient import TestClient

    from scoring.policy import default_policy
    from tests.webhook.helpers import fleet, gpu_pod, node, review
    from webhook.app import create_app
    from webhook.cache import SnapshotCache
    from webhook.refresh import telemetry_of
    from scoring.ingest.telemetry import ClusterSnapshot, NodeTelemetry

    api, start, _ = cluster
    api.forbidden = True
    watch = start()
    wait_until(lambda: watch.state == "forbidden")
    policy = default_policy()
    heat = fleet(node("a", util=5))
    telemetry = telemetry_of(ClusterSnapshot(heat.taken_at, (NodeTelemetry("a", 8),), newest_sample_at=heat.taken_at),
                             heat)
    cache = SnapshotCache(lambda: telemetry, policy)
    app = create_app(policy, cache, cluster=watch, run_cache=False, clock=lambda: heat.taken_at)
    cache.refresh_once()
    with TestClient(app) as http:
        assert http.get("/readyz").json()["ready"] is True
        answer = http.post("/mutate", json=review(gpu_pod())).json()
        assert answer["response"]["allowed"] is True
        metrics = http.get("/metrics").text
    assert "gpu_balancer_cluster_view_available 0.0" in metrics
    assert "gpu_balancer_advice_without_cluster_view_total 1.0" in metrics


def test_the_view_keeps_of_a_pod_what_it_reads_and_reads_the_same_from_it():
    """A pod as kube-apiserver serves it (managed fields, statuses, probes, a sidecar, a claim, a
    booking) is slimmed to what the view reads; what the view computes is the same either way."""
    import copy
    import json

    from scoring.cluster.claims import ClaimBook, pod_claims
    from scoring.cluster.workloads import gpu_request
    from webhook.cluster_watch import slim

    served = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "llm-0", "namespace": "ml", "uid": "u-1", "resourceVersion": "812",
                     "labels": {"app": "llm"}, "annotations": {
                         BOOKING_ANNOTATION: "r1-7", "kubectl.kubernetes.io/last-applied-configuration": "{}" * 500},
                     "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}] * 4},
        "spec": {"nodeName": "n1", "volumes": [{"name": "model", "emptyDir": {}}] * 3,
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                 "initContainers": [{"name": "proxy", "restartPolicy": "Always", "image": "proxy:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                 "containers": [{"name": "server", "image": "vllm:1", "env": [{"name": "X", "value": "1"}] * 20,
                                 "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                                 "resources": {"limits": {"nvidia.com/gpu": "2"}, "claims": [{"name": "gpu"}]}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.9",
                   "conditions": [{"type": "Initialized", "status": "True"},
                                  {"type": "PodScheduled", "status": "True",
                                   "lastTransitionTime": "2026-12-03T10:00:00Z"}],
                   "containerStatuses": [{"name": "server", "ready": True, "image": "vllm:1"}] * 2,
                   "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "llm-0-gpu-x7"}]},
    }
    slimmed = slim(copy.deepcopy(served))
    assert len(json.dumps(slimmed)) < len(json.dumps(served)) / 4
    book = ClaimBook({}, {})
    assert gpu_request(slimmed, POLICY, pod_claims(slimmed, book, POLICY)) == \
        gpu_request(served, POLICY, pod_claims(served, book, POLICY))
    assert slimmed["metadata"]["annotations"] == {BOOKING_ANNOTATION: "r1-7"}
    assert slimmed["metadata"]["resourceVersion"] == "812", "the watch resumes from it"
    assert [c["type"] for c in slimmed["status"]["conditions"]] == ["PodScheduled"]
    assert slimmed["spec"]["resourceClaims"] == served["spec"]["resourceClaims"]
    serving_image = {"names": ["docker.io/vllm/vllm-openai:v0.8.5"], "sizeBytes": 10_000_000_000}
    node = {"metadata": {"name": "n1", "managedFields": [{}], "labels": {"pool": "h100"}},
            "spec": {"taints": []}, "status": {"allocatable": {"nvidia.com/gpu": "8"}, "volumesInUse": ["v"],
                                               "images": [{"names": ["a"]}, serving_image,
                                                          {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320_000}]}}
    assert slim(node) == {"metadata": {"name": "n1", "labels": {"pool": "h100"}}, "spec": {"taints": []},
                          "status": {"allocatable": {"nvidia.com/gpu": "8"}, "images": [serving_image]}}, \
        "a node keeps only the images a time to ready turns on"
