"""Our install on a real control plane: the real API server calls our webhook, the real scheduler
places the pods, the real Eviction API and PodDisruptionBudgets stand between the descheduler and
the pods. The webhook and descheduler run as host processes with our ServiceAccounts' tokens."""

from __future__ import annotations

import base64
import ipaddress
import itertools
import json
import subprocess
import sys
import time

from certs.files import write_bundle
from certs.issue import issue_ca, issue_serving
from sim.fleet import node_load_levels
from tests.control_plane.install import (ADVICE, FLEET, OPTED_IN, advised, fill, list_pods, new_deployment,
                                         new_pod, preferred_nodes)
from tests.control_plane.plane import REPOSITORY, ControlPlane
from tests.scoring.test_autoscalers import hpa, pods_metric


def test_control_plane_webhook_is_called_only_for_opted_in_namespaces_and_gpu_pods(installed):
    plane = installed.plane
    plane.create_namespaces("cp-opted-in", labels=OPTED_IN)
    plane.create_namespaces("cp-not-opted")
    plane.apply([new_pod("gpu", "cp-opted-in"), new_pod("cpu-only", "cp-opted-in", gpus=0),
                 new_pod("gpu", "cp-not-opted")])
    gpu_pod = plane.get("pod", "gpu", "-n", "cp-opted-in")
    assert advised(gpu_pod), "the API server called the webhook"
    assert gpu_pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    for namespace, name in (("cp-opted-in", "cpu-only"), ("cp-not-opted", "gpu")):
        passed = plane.get("pod", name, "-n", namespace)
        assert not advised(passed), (namespace, name)
        assert "affinity" not in passed["spec"], (namespace, name, "matchConditions or namespaceSelector missed it")


def test_control_plane_real_scheduler_places_a_deployment_where_the_advice_points(installed):
    plane = installed.plane
    levels = node_load_levels(FLEET)
    hot = {FLEET.node_name(i) for i, level in enumerate(levels) if level >= 0.8}
    assert hot, "the fleet has a hot node to avoid"
    plane.create_namespaces("cp-serving", labels=OPTED_IN)
    plane.apply(new_deployment("llm", "cp-serving", replicas=6))
    replicas = plane.wait_for(lambda: (p := list_pods(plane, "cp-serving", "app=llm")) and len(p) == 6
                              and all(x["spec"].get("nodeName") for x in p) and p, "six replicas bound", 60)
    # The advice prefers the cool and warm nodes and avoids the hot one softly; its hostname spread
    # term counts every node, the hot one too, so once the preferred nodes hold two replicas each
    # the spread score outweighs the preference and one replica of six goes to the hot node.
    # (Measured on this control plane; the closing note of issue 35 reports it.)
    followed = [p for p in replicas if p["spec"]["nodeName"] in preferred_nodes(p)]
    on_hot = [p["spec"]["nodeName"] for p in replicas if p["spec"]["nodeName"] in hot]
    assert all(preferred_nodes(p) and not preferred_nodes(p) & hot for p in replicas), "advice avoids the hot node"
    assert len(followed) >= 5 and len(on_hot) <= 1, [(p["spec"]["nodeName"], p["metadata"]["annotations"][ADVICE])
                                                   for p in replicas]
    plane.wait_for(lambda: all(p["status"].get("phase") == "Running"
                               for p in list_pods(plane, "cp-serving", "app=llm")),
                   "KWOK marks the bound pods Running", 60)


def _autoscaler(name: str, namespace: str, now_milli: int) -> tuple[dict, str]:
    """An HPA of Deployment `name` targeting 600m of a Pods metric, and the status its controller
    would write having read `now_milli` (none runs here: there is no metrics API)."""
    obj = hpa(name=name, namespace=namespace, target=name, metrics=[pods_metric("vllm_busy_share", "600m")],
              current=[pods_metric("vllm_busy_share", f"{now_milli}m", "current")])
    return obj, json.dumps({"status": obj.pop("status")})


def test_control_plane_a_pod_whose_hpa_reads_its_load_well_over_target_is_urgent(installed):
    """With its own token the webhook lists and watches HPAs; a Deployment whose HPA read 1.5× its
    target gets urgent advice with no spread term, one at 1.0× the steady-state advice."""
    plane = installed.plane
    plane.create_namespaces("cp-urgent", labels=OPTED_IN)
    for name, milli in (("surge", 900), ("calm", 600)):
        autoscaler, status = _autoscaler(name, "cp-urgent", milli)
        plane.apply(autoscaler)
        plane.kubectl("patch", "hpa", name, "-n", "cp-urgent", "--subresource=status", "--type=merge", "-p", status)
    probes = itertools.count()

    def probe_is_urgent() -> bool:
        # A bare pod named like the Deployment's ("surge-<hash>-<suffix>") until the view has the HPA.
        name = f"surge-probe-{next(probes)}"
        plane.apply(new_pod(name, "cp-urgent"))
        return plane.get("pod", name, "-n", "cp-urgent")["metadata"]["annotations"].get(ADVICE, "").startswith("urgent")

    try:
        plane.wait_for(probe_is_urgent, "the webhook's view holds the HPA", 60)
        plane.apply([new_deployment("surge", "cp-urgent", replicas=2),
                     new_deployment("calm", "cp-urgent", replicas=2)])
        pods = plane.wait_for(lambda: (p := list_pods(plane, "cp-urgent", "app in (surge,calm)")) and len(p) == 4
                              and p, "four replicas created", 60)
        for pod in pods:
            note, app = pod["metadata"]["annotations"][ADVICE], pod["metadata"]["labels"]["app"]
            if app == "surge":
                assert note.startswith("urgent: surge scaling: HPA at 1.50× target; preferred "), note
                assert "topologySpreadConstraints" not in pod["spec"]
            else:
                assert not note.startswith("urgent") and "spread hostname" in note, note
    finally:  # the GPUs back for the tests after this one
        plane.kubectl("delete", "deployments,pods", "--all", "-n", "cp-urgent", "--grace-period=0", "--force",
                      check=False)


def test_control_plane_pods_are_still_created_when_the_webhook_is_down(installed):
    plane, webhook = installed.plane, installed.webhook
    plane.create_namespaces("cp-outage", labels=OPTED_IN)
    webhook.stop()
    try:
        started = time.monotonic()
        plane.apply(new_pod("during-outage", "cp-outage"))
        elapsed = time.monotonic() - started
        assert not advised(plane.get("pod", "during-outage", "-n", "cp-outage"))
        timeout = plane.get("mutatingwebhookconfiguration", "gpu-balancer")["webhooks"][0]["timeoutSeconds"]
        # failurePolicy Ignore: created unmutated, within the webhook's timeout (plus kubectl's own work).
        assert elapsed < timeout + 10, elapsed
    finally:
        webhook.start()
    plane.apply(new_pod("after-outage", "cp-outage"))
    assert advised(plane.get("pod", "after-outage", "-n", "cp-outage"))


def test_control_plane_descheduler_evicts_through_the_eviction_api_and_a_pdb_holds(installed):
    """On the hot node: a Deployment whose PodDisruptionBudget allows no disruption, and one
    without a budget. The descheduler, with its own token, evicts through the Eviction API: the
    guarded pods are refused (429) and stay; where the plan takes the unguarded one, it goes and its
    ReplicaSet recreates it.
    (A budget of maxUnavailable 1 does not hold a run of evictions here: KWOK deletes an evicted
    pod and readies its replacement within milliseconds, and the disruption controller allows the
    next one before the run's next eviction; a real LLM pod takes minutes.)"""
    plane, workdir = installed.plane, installed.workdir
    hot = FLEET.node_name(0)
    others = [FLEET.node_name(i) for i in range(1, FLEET.nodes)]
    # Placed while the other nodes are cordoned, opted in only afterwards (so the webhook does not
    # steer them away from the hot node).
    plane.create_namespaces("cp-evict")
    for name in others:
        plane.kubectl("cordon", name)
    try:
        plane.apply([new_deployment("guarded", "cp-evict", replicas=3), new_deployment("free", "cp-evict", replicas=1),
                     {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                      "metadata": {"name": "guarded", "namespace": "cp-evict"},
                      "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "guarded"}}}}])
        plane.wait_for(lambda: (p := list_pods(plane, "cp-evict")) and len(p) == 4
                       and all(x["status"].get("phase") == "Running" and x["spec"].get("nodeName") == hot for x in p),
                       "four replicas Running on the hot node", 60)
        plane.wait_for(lambda: plane.get("pdb", "guarded", "-n", "cp-evict").get("status", {}).get(
            "currentHealthy") == 3, "the disruption controller counts three healthy", 60)
    finally:
        for name in others:
            plane.kubectl("uncordon", name)
    plane.kubectl("label", "namespace", "cp-evict", "gpu-balancer.io/enabled=true")
    guarded = {p["metadata"]["name"] for p in list_pods(plane, "cp-evict", "app=guarded")}
    (free,) = [p["metadata"]["name"] for p in list_pods(plane, "cp-evict", "app=free")]
    kubeconfig = plane.service_account_kubeconfig("gpu-balancer", "gpu-balancer-descheduler",
                                                  workdir / "descheduler.kubeconfig")
    result = subprocess.run(
        [sys.executable, "-m", "gpu_balancer", "deschedule", "--live", "--config", str(workdir / "policy.yaml"),
         "--kubeconfig", str(kubeconfig), "--output", "json"], capture_output=True, text=True, cwd=REPOSITORY,
        timeout=120)
    report = json.loads(result.stdout)
    assert hot in report["hot_nodes"], report
    evicted = {e["pod"] for e in report["evictions"] if e["namespace"] == "cp-evict"}
    blocked = {s["pod"] for s in report["skipped"]
               if s["namespace"] == "cp-evict" and "PodDisruptionBudget" in s["reason"]}
    assert not evicted & guarded and blocked and blocked <= guarded, (report, result.stderr[-2000:])
    assert guarded <= {p["metadata"]["name"] for p in list_pods(plane, "cp-evict", "app=guarded")}, "the budget held"
    if free in evicted:
        plane.wait_for(lambda: free not in {p["metadata"]["name"] for p in list_pods(plane, "cp-evict")},
                       "the evicted pod gone", 60)
        plane.wait_for(lambda: len(list_pods(plane, "cp-evict", "app=free")) == 1, "its ReplicaSet recreated it", 60)
    # Whatever it evicted (elsewhere too: the serving replica the spread term put here) is gone.
    assert report["evictions"], ("the descheduler evicted nothing through the Eviction API", report)
    # Make before break, with the descheduler's own token: no node lists the image, so each move's
    # pre-pull pod was created on its destination (KWOK ran it there), and only then the eviction.
    for eviction in report["evictions"]:
        assert eviction["destination"] in others and eviction["prestage"].startswith(
            f"pulled 1 image on {eviction['destination']} in "), (eviction, result.stderr[-2000:])
    assert not list_pods(plane, "gpu-balancer", "app.kubernetes.io/component=prepull"), "no pre-pull pod left"
    assert report["summary"]["staged"] >= len(report["evictions"]), report["summary"]
    for eviction in report["evictions"]:
        plane.wait_for(lambda: plane.kubectl("get", "pod", eviction["pod"], "-n", eviction["namespace"],
                                             check=False).returncode != 0, f"{eviction['pod']} deleted", 60)


def _advised_afresh(plane: ControlPlane, namespace: str, name: str) -> bool:
    plane.kubectl("delete", "pod", name, "-n", namespace, "--ignore-not-found", "--wait=false")
    plane.wait_for(lambda: plane.kubectl("get", "pod", name, "-n", namespace, check=False).returncode != 0,
                   "pod gone", 60)
    plane.apply(new_pod(name, namespace))
    return advised(plane.get("pod", name, "-n", namespace))


def _set_ca_bundle(plane: ControlPlane, pem: bytes) -> None:
    plane.kubectl("patch", "mutatingwebhookconfiguration", "gpu-balancer", "--type", "json", "-p", json.dumps([
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": base64.b64encode(pem).decode()}]))


def test_control_plane_certificate_rotation_under_the_api_servers_calls(installed):
    """A new CA is added to caBundle, the serving certificate is swapped on disk, the old CA is
    dropped: the API server's calls succeed at every step (the webhook reloads without a restart)."""
    plane, webhook, workdir = installed.plane, installed.webhook, installed.workdir
    plane.create_namespaces("cp-rotation", labels=OPTED_IN)
    old_ca = webhook.tls["ca.crt"].read_bytes()
    new_ca = issue_ca("gpu-balancer-test-webhook-ca-2")
    _set_ca_bundle(plane, old_ca + new_ca.certificate_pem)
    webhook.trusted += new_ca.certificate_pem.decode()
    time.sleep(2)  # the API server's webhook informer takes the new bundle
    assert _advised_afresh(plane, "cp-rotation", "before-swap")
    swaps = webhook.metric("gpu_balancer_certificate_swaps_total")
    write_bundle(workdir / "tls", new_ca, issue_serving(new_ca, ["localhost"],
                                                        ip_addresses=(ipaddress.ip_address("127.0.0.1"),)))
    plane.wait_for(lambda: webhook.metric("gpu_balancer_certificate_swaps_total") > swaps,
                   "the webhook took the new pair", 60)
    assert _advised_afresh(plane, "cp-rotation", "after-swap")
    _set_ca_bundle(plane, new_ca.certificate_pem)
    # Only the new CA trusted now: an old serving certificate would be refused (and the pod created
    # unadvised, failurePolicy Ignore), so advice proves the swap happened.
    assert plane.wait_for(lambda: _advised_afresh(plane, "cp-rotation", "old-ca-dropped"),
                          "advised with the new CA alone", 20)
    assert webhook.process.poll() is None, "rotated without a restart"


def test_control_plane_cluster_view_survives_an_api_server_restart(installed):
    """After kube-apiserver restarts, the webhook's watch resumes: nodes filled after the restart
    are known to be full, and the advice names only nodes with room. The watch, and the telemetry
    refresh that carries its view to admissions, catch up at their own pace on a loaded machine,
    so the probe is repeated (a fresh pod each time) for a bounded while: a watch that never
    resumed still fails."""
    plane, webhook = installed.plane, installed.webhook
    plane.restart_apiserver()
    plane.create_namespaces("cp-restart", labels=OPTED_IN)
    plane.create_namespaces("cp-filler")
    cool = [FLEET.node_name(i) for i, level in enumerate(node_load_levels(FLEET)) if level < 0.5]
    # Fill the cool nodes (the advice's first choice) in a namespace the webhook leaves alone.
    fill(plane, cool, "cp-filler")
    probes: list[tuple[set[str], str]] = []

    def advice_avoids_the_full_nodes() -> bool:
        name = f"after-restart-{len(probes)}"
        plane.apply(new_pod(name, "cp-restart"))
        pod = plane.get("pod", name, "-n", "cp-restart")
        assert advised(pod), webhook.log()
        named = preferred_nodes(pod)
        probes.append((named, pod["metadata"]["annotations"][ADVICE]))
        if named and not named & set(cool):
            return True
        plane.kubectl("delete", "pod", name, "-n", "cp-restart", "--wait=false")
        time.sleep(1)
        return False

    try:
        plane.wait_for(advice_avoids_the_full_nodes, "advice naming only nodes with room", 30)
    except TimeoutError:
        held = {node: [(p["metadata"]["namespace"], p["metadata"]["name"], p["status"].get("phase"))
                       for p in plane.get("pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]]
                for node in (FLEET.node_name(i) for i in range(FLEET.nodes))}
        raise AssertionError((probes, cool, held, webhook.log()[-4000:])) from None
