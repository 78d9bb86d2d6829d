"""DRA in the webhook: ResourceSlices, ResourceClaims and templates watched through the real
`kubernetes` client against the API stand-in, free devices counted exactly, and DRA pods advised
like device-plugin pods (schema-checked after mutation with kubernetes-validate)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import kubernetes_validate
import pytest

from scoring.advice.placement import index_fleet
from scoring.cluster.claims import class_resource
from scoring.cluster.view import BOOKING_ANNOTATION
from scoring.heat import FleetHeat, NodeHeat, Tier
from tests.dra_objects import (CHANNEL_CLASS, MIG_CLASS, claim, dra_pod, exactly, first_available, gpu_slice,
                               template)
from tests.polling import wait_until
from tests.webhook.test_cluster_watch import POLICY, node
from webhook.admit import decide
from webhook.ledger import SteeringLedger
from webhook.review import decode_review, patched, pod_review

GPU = class_resource("gpu.nvidia.com")
NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
LATEST = kubernetes_validate.latest_version()


def dra_node(name: str, pool: str = "h100") -> dict:
    """A node whose GPUs only DRA publishes: no nvidia.com/gpu allocatable."""
    obj = node(name, pool=pool)
    obj["status"]["allocatable"] = {"cpu": "96"}
    return obj


def test_the_test_objects_are_valid_kubernetes_objects():
    for obj in (template("t", exactly(count=2), first_available((MIG_CLASS, 1), ("gpu.nvidia.com", 1), name="fa")),
                claim("c", exactly(), allocated=[("n1", "gpu-0")], node="n1"), gpu_slice("n1", 8, migs=2),
                dra_pod("p", template_name="t")):
        kubernetes_validate.validate(obj, LATEST, strict=True)


def test_slices_and_allocations_give_exact_free_devices_per_node(cluster):
    api, start, _ = cluster
    for name in ("n1", "n2"):
        api.put("nodes", dra_node(name))
        api.put("resourceslices", gpu_slice(name, 8))
    api.put("resourceclaims", claim("web-0-gpu-x1", exactly(count=3), owner_pod="web-0",
                                    allocated=[("n1", f"gpu-{i}") for i in range(3)]))
    api.put("resourceclaimtemplates", template("two-gpus", exactly(count=2)))
    watch = start()
    wait_until(lambda: watch.freeze() is not None and watch.freeze().free("n1").get(GPU) == 5)
    view = watch.freeze()
    assert view.free("n2") == {GPU: 8} and view.nodes["n1"].allocatable == {GPU: 8}
    assert ("ml", "two-gpus") in view.claims.templates and watch.absent == {}
    api.put("resourceclaims", claim("shared", exactly(), allocated=[("n1", "gpu-2"), ("n2", "gpu-0")]))
    wait_until(lambda: watch.freeze().free("n2").get(GPU) == 7)
    assert watch.freeze().free("n1")[GPU] == 5, "a device two claims name is held once"
    api.delete("resourceclaims", "ml/web-0-gpu-x1")
    wait_until(lambda: watch.freeze().free("n1").get(GPU) == 7)
    api.put("resourceslices", gpu_slice("n2", 4, generation=2, name="n2-gen2"))  # the driver republishes
    wait_until(lambda: watch.freeze().nodes["n2"].allocatable.get(GPU) == 4)


def test_a_bound_dra_pod_is_a_binding_with_its_claimed_devices_held_once(cluster):
    api, start, bindings = cluster
    api.put("nodes", dra_node("n1"))
    api.put("resourceslices", gpu_slice("n1", 8))
    api.put("resourceclaimtemplates", template("two-gpus", exactly(count=2)))
    watch = start()
    wait_until(lambda: watch.freeze() is not None and watch.freeze().claims.templates)
    api.put("resourceclaims", claim("web-1-gpu-ab", exactly(count=2), owner_pod="web-1",
                                    allocated=[("n1", "gpu-0"), ("n1", "gpu-1")]))
    bound = dra_pod("web-1", template_name="two-gpus", node="n1")
    bound["metadata"]["annotations"] = {BOOKING_ANNOTATION: "r1-3"}
    api.put("pods", bound)
    wait_until(lambda: bindings)
    assert [(b.pod, b.node, b.units, b.booking) for b in bindings] == [("ml/web-1", "n1", ((GPU, 2),), "r1-3")]
    wait_until(lambda: watch.freeze().free("n1")[GPU] == 6)
    assert "ml/web-1" in watch.freeze().bound


def test_a_cluster_without_the_dra_api_still_has_a_view(cluster):
    api, start, _ = cluster
    api.serves_dra = False
    api.put("nodes", node("n1"))
    watch = start()
    wait_until(lambda: watch.freeze() is not None)
    assert watch.state == "ok" and watch.freeze().free("n1") == {"nvidia.com/gpu": 8}
    wait_until(lambda: len(watch.absent) == 3)
    assert set(watch.absent.values()) == {"not served by this cluster"}


def admit(obj: dict, index, ledger: SteeringLedger):
    decision = decide(decode_review(json.dumps(pod_review(obj)).encode()), index=index, telemetry_time=NOW,
                      snapshot_age_seconds=5.0, ledger=ledger, policy=POLICY, now=NOW + timedelta(seconds=1))
    return decision, patched(obj, decision.review)


def preferred(pod: dict) -> list[str]:
    terms = pod["spec"].get("affinity", {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    return [t["preference"]["matchFields"][0]["values"][0] for t in terms]


@pytest.fixture
def dra_fleet(cluster):
    """Eight idle DRA nodes: four with every GPU claimed (the scheduler's view says full),
    four with all eight free; two MIG nodes. Returns (api, index, ledger)."""
    api, start, _ = cluster
    utils = {}
    for i in range(8):
        api.put("nodes", dra_node(f"h100-{i}"))
        api.put("resourceslices", gpu_slice(f"h100-{i}", 8))
        utils[f"h100-{i}"] = 5.0 + i
        if i < 4:
            api.put("resourceclaims", claim(f"full-{i}", exactly(count=8),
                                            allocated=[(f"h100-{i}", f"gpu-{g}") for g in range(8)]))
    for i in range(2):
        api.put("nodes", dra_node(f"mig-{i}", pool="mig"))
        api.put("resourceslices", gpu_slice(f"mig-{i}", 0, migs=7))
        utils[f"mig-{i}"] = 1.0
    api.put("resourceclaimtemplates", template("one-gpu", exactly()))
    api.put("resourceclaimtemplates", template("one-mig", exactly(MIG_CLASS, 1)))
    api.put("resourceclaimtemplates", template("nic", exactly("sriov.example.com", 1)))
    api.put("resourceclaimtemplates", template("channel", exactly(CHANNEL_CLASS, 1, name="channel")))
    watch = start(clock=lambda: NOW)
    wait_until(lambda: watch.freeze() is not None and len(watch.freeze().claims.templates) == 4
               and len(watch.freeze().nodes) == 10 and watch.freeze().free("h100-3").get(GPU) == 0)
    heat = FleetHeat(NOW, False, 5.0, tuple(NodeHeat(n, 8, 0, u, u, 0.3, 50.0, None, Tier.COOL, ())
                                            for n, u in utils.items()))
    index = index_fleet(heat)
    ledger = SteeringLedger(45, replica="a-")
    ledger.prepare(index, watch.freeze())
    return api, index, ledger


def test_a_dra_pod_is_advised_only_to_nodes_with_free_devices_of_its_class(dra_fleet):
    _, index, ledger = dra_fleet
    decision, gpu = admit(dra_pod("svc-a", template_name="one-gpu"), index, ledger)
    assert decision.reason == "steered", decision
    names = preferred(gpu)
    assert names and set(names) <= {f"h100-{i}" for i in range(4, 8)}, names
    assert gpu["spec"]["topologySpreadConstraints"], "replicas are spread as for device-plugin pods"
    kubernetes_validate.validate(gpu, LATEST, strict=True)
    _, mig = admit(dra_pod("svc-m", template_name="one-mig"), index, ledger)
    assert set(preferred(mig)) <= {"mig-0", "mig-1"} and preferred(mig)
    assert ledger.pending(NOW), "the steered pod's devices are booked"


def test_a_pod_with_no_gpu_claim_or_an_unknown_one_is_left_alone(dra_fleet):
    _, index, ledger = dra_fleet
    decision, pod = admit(dra_pod("nic-user", template_name="nic"), index, ledger)
    assert (decision.outcome, decision.reason) == ("unchanged", "not-gpu") and "affinity" not in pod["spec"]
    decision, _ = admit(dra_pod("early", template_name="not-yet"), index, ledger)
    assert (decision.outcome, decision.reason) == ("unchanged", "claims-unknown") and "not-yet" in decision.detail
    blind = SteeringLedger(45)
    blind.prepare(index, None)
    decision, _ = admit(dra_pod("blind", template_name="one-gpu"), index, blind)
    assert decision.reason == "claims-unknown" and decision.review["response"]["allowed"] is True


def test_pods_sharing_a_compute_domain_channel_are_packed_by_it(dra_fleet):
    _, index, ledger = dra_fleet
    worker = dra_pod("worker-0", template_name="one-gpu", owner=("StatefulSet", "job"), labels={"app": "job"},
                     extra_claims=[{"name": "channel", "resourceClaimTemplateName": "channel"}])
    decision, pod = admit(worker, index, ledger)
    assert pod["metadata"]["labels"]["gpu-balancer.io/compute-domain"] == "channel"
    terms = pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"gpu-balancer.io/compute-domain": "channel"}}
    assert "pack gpu-balancer.io/compute-domain=channel" in decision.detail
    kubernetes_validate.validate(pod, LATEST, strict=True)


def test_the_served_webhook_knows_a_pods_claims_before_any_telemetry(cluster):
    """Prometheus not read yet: the app still tells a DRA GPU pod from a NIC pod by the watched
    templates, and spreads the GPU pod's replicas as it does a device-plugin pod's."""
    from fastapi.testclient import TestClient

    from scoring.policy import default_policy
    from tests.webhook.helpers import review
    from webhook.app import create_app
    from webhook.cache import SnapshotCache

    api, start, _ = cluster
    api.put("nodes", dra_node("n1"))
    api.put("resourceclaimtemplates", template("one-gpu", exactly()))
    api.put("resourceclaimtemplates", template("nic", exactly("sriov.example.com", 1)))
    watch = start()
    wait_until(lambda: len(watch.live_claims.templates) == 2)

    def no_telemetry():
        raise RuntimeError("Prometheus is down")

    cache = SnapshotCache(no_telemetry, default_policy())
    app = create_app(default_policy(), cache, cluster=watch, run_cache=False, clock=lambda: NOW)
    with TestClient(app) as http:
        gpu = http.post("/mutate", json=review(dra_pod("svc-a", template_name="one-gpu"))).json()
        nic = http.post("/mutate", json=review(dra_pod("nic-a", template_name="nic"))).json()
        metrics = http.get("/metrics").text
    assert gpu["response"]["allowed"] and gpu["response"].get("patch"), "spread terms, though no node advice"
    assert nic["response"]["allowed"] and "patch" not in nic["response"]
    assert 'reason="no-telemetry"' in metrics and 'reason="not-gpu"' in metrics


@pytest.mark.parametrize("template_name", ["one-gpu", "one-mig"])
def test_a_dra_pod_is_never_advised_to_a_hot_node(cluster, template_name):
    # As for device-plugin pods: only nodes at or under the hot threshold are preferred, and hot
    # nodes (here the two idlest by free devices) are named as avoided, never as fallbacks.
    api, start, _ = cluster
    utils = {"gpu-cool": 5.0, "gpu-hot-a": 95.0, "gpu-hot-b": 92.0, "mig-cool": 4.0, "mig-hot": 97.0}
    for name in utils:
        mig = name.startswith("mig")
        api.put("nodes", dra_node(name, pool="mig" if mig else "h100"))
        api.put("resourceslices", gpu_slice(name, 0, migs=7) if mig else gpu_slice(name, 8))
    api.put("resourceclaims", claim("busy", exactly(count=6), allocated=[("gpu-cool", f"gpu-{g}") for g in range(6)]))
    api.put("resourceclaimtemplates", template("one-gpu", exactly()))
    api.put("resourceclaimtemplates", template("one-mig", exactly(MIG_CLASS, 1)))
    watch = start(clock=lambda: NOW)
    wait_until(lambda: watch.freeze() is not None and len(watch.freeze().claims.templates) == 2
               and watch.freeze().free("gpu-cool").get(GPU) == 2)
    heat = FleetHeat(NOW, False, 5.0, tuple(
        NodeHeat(n, 8, 0, u, u, 0.3, 50.0, None, Tier.HOT if u >= 80 else Tier.COOL, ()) for n, u in utils.items()))
    index = index_fleet(heat)
    ledger = SteeringLedger(45, replica="a-")
    ledger.prepare(index, watch.freeze())
    decision, pod = admit(dra_pod("svc-x", template_name=template_name), index, ledger)
    cool, hot = (("mig-cool", ["mig-hot"]) if template_name == "one-mig" else ("gpu-cool", ["gpu-hot-a", "gpu-hot-b"]))
    assert preferred(pod) == [cool], decision
    assert all(f"{name}(hot)" in decision.detail for name in hot), "named as avoided, among the nodes it could use"


def test_a_dra_job_is_advised_only_nodes_whose_devices_are_free(cluster):
    # Telemetry cannot see devices a claim holds (the GPUs of n-full are allocated and idle), so
    # the job's nodes are chosen on the cluster view's room, as a single pod's are.
    api, start, _ = cluster
    utils = {"n-cool": 5.0, "n-hot-a": 95.0, "n-hot-b": 92.0, "n-full": 3.0}
    for name in utils:
        api.put("nodes", dra_node(name))
        api.put("resourceslices", gpu_slice(name, 8))
    api.put("resourceclaims", claim("busy", exactly(count=8), allocated=[("n-full", f"gpu-{g}") for g in range(8)]))
    api.put("resourceclaimtemplates", template("one-gpu", exactly()))
    api.put("resourceclaimtemplates", template("channel", exactly(CHANNEL_CLASS, 1, name="channel")))
    watch = start(clock=lambda: NOW)
    wait_until(lambda: watch.freeze() is not None and len(watch.freeze().claims.templates) == 2
               and watch.freeze().free("n-full").get(GPU) == 0)
    heat = FleetHeat(NOW, False, 5.0, tuple(
        NodeHeat(n, 8, 0, u, u, 0.3, 50.0, None, Tier.HOT if u >= 80 else Tier.COOL, ()) for n, u in utils.items()))
    index = index_fleet(heat, {n: (("nvidia.com/gpu.clique", "c1"),) for n in utils})
    ledger = SteeringLedger(45, replica="a-")
    ledger.prepare(index, watch.freeze())
    worker = dra_pod("worker-0", template_name="one-gpu", owner=("StatefulSet", "job"), labels={"app": "job"},
                     extra_claims=[{"name": "channel", "resourceClaimTemplateName": "channel"}])
    decision, pod = admit(worker, index, ledger)
    assert preferred(pod) == ["n-cool"], decision.detail
    assert "n-hot-a(hot)" in decision.detail and "n-hot-b(hot)" in decision.detail
