"""Our install on a real control plane: the real API server calls our webhook, the real scheduler
places the pods, the real Eviction API and PodDisruptionBudgets stand between the descheduler and
the pods. The webhook and descheduler run as host processes with our ServiceAccounts' tokens."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from certs.files import write_bundle
from certs.issue import issue_ca, issue_serving
from gpu_balancer.local_prometheus import LocalPrometheus, ScrapeTarget, free_port, stop_process
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec, generate_fleet, node_load_levels
from tests.conftest import require_tool
from tests.control_plane.conftest import gpu_node
from tests.control_plane.plane import REPOSITORY, ControlPlane
from webhook.pods import ADVICE_ANNOTATION

ADVICE = ADVICE_ANNOTATION
# Four H100 nodes; the skewed profile puts node 00 near 90 % and node 01 near 60 %, 02 and 03 cool.
FLEET = FleetSpec(nodes=4, gpus_per_node=8, profile="skewed", seed=1)
OPTED_IN = {"gpu-balancer.io/enabled": "true"}


def _namespace(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def _create_namespaces(plane: ControlPlane, *namespaces: dict) -> None:
    """Namespaces, and their `default` ServiceAccount (the controller manager's, which the
    ServiceAccount admission plugin wants before any pod there is created)."""
    plane.apply(list(namespaces))
    for namespace in namespaces:
        name = namespace["metadata"]["name"]
        _wait(lambda: plane.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
              f"the default ServiceAccount of {name}")


def _container(gpus: int = 1) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "100m"}
    return {"name": "server", "image": "registry.example/llm-server:1", "resources": {"limits": limits}}


def _pod(name: str, namespace: str, gpus: int = 1) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [_container(gpus)]}}


def _deployment(name: str, namespace: str, replicas: int, **spec) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [_container()], **spec}}}}


def _policy(prometheus_url: str) -> str:
    # Short windows so a test need not wait ten minutes for heat to be "sustained".
    return yaml.safe_dump({
        "apiVersion": "gpu-balancer.io/v1alpha1", "kind": "BalancerPolicy",
        "prometheus": {"url": prometheus_url, "timeoutSeconds": 3},
        "telemetry": {"refreshSeconds": 1, "stalenessLimitSeconds": 60},
        "descheduler": {"windowSeconds": 8, "stepSeconds": 2, "minWindowCoverage": 0.5, "dryRun": True,
                        "maxEvictionsPerRun": 4, "maxEvictionsPerNode": 4, "maxEvictionsPerNamespace": 4},
    })


class HostWebhook:
    """`gpu-balancer webhook` as a process on loopback, acting with the webhook ServiceAccount."""

    def __init__(self, workdir: Path, policy: Path, kubeconfig: Path):
        self.workdir, self.policy, self.kubeconfig = workdir, policy, kubeconfig
        self.port = free_port()
        ca = issue_ca("gpu-balancer-test-webhook-ca")
        self.tls = write_bundle(workdir / "tls", ca, issue_serving(
            ca, ["localhost"], ip_addresses=(ipaddress.ip_address("127.0.0.1"),)))
        self.trusted = ca.certificate_pem.decode()
        """The CAs this test trusts the webhook with (both, while a rotation is under way)."""
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.workdir / "webhook.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpu_balancer", "webhook", "--tls-cert", str(self.tls["tls.crt"]),
             "--tls-key", str(self.tls["tls.key"]), "--host", "127.0.0.1", "--port", str(self.port),
             "--config", str(self.policy)],
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)}, stdout=log, stderr=subprocess.STDOUT,
            cwd=REPOSITORY)
        log.close()
        self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the webhook exited: {self.log()}"
            try:
                # Ready to steer: fresh telemetry and the cluster view listed through our RBAC.
                if (self.get("/readyz").json()["telemetry"] == "fresh"
                        and "gpu_balancer_cluster_view_available 1.0" in self.get("/metrics").text):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"webhook not ready: {self.log()}")

    def get(self, path: str):
        import httpx

        return httpx.get(f"{self.url}{path}", verify=ssl.create_default_context(cadata=self.trusted), timeout=2)

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None

    def log(self) -> str:
        return (self.workdir / "webhook.log").read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane, tmp_path_factory):
    """Fake GPU nodes, a real Prometheus scraping fake-dcgm for them, our install applied with
    `kubectl apply -k` (the host-processes overlay) and the webhook running with its own token."""
    require_tool("prometheus", why="Debian package `prometheus`; `make test` installs it as root")
    workdir = tmp_path_factory.mktemp("install")
    plane = control_plane
    plane.apply([gpu_node(FLEET.node_name(i)) for i in range(FLEET.nodes)])
    exporter = make_server(render_exposition(generate_fleet(FLEET)), port=0)
    serve_in_background(exporter)
    prometheus = LocalPrometheus([ScrapeTarget(f"127.0.0.1:{exporter.server_port}")]).start()
    policy = workdir / "policy.yaml"
    policy.write_text(_policy(prometheus.url))
    # The overlay as shipped, with this run's webhook port and CA: what an operator's own overlay does.
    webhook = HostWebhook(workdir, policy, workdir / "webhook.kubeconfig")
    overlay = workdir / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(REPOSITORY / "deploy" / "examples" / "host-processes", overlay)],
        "patches": [{"target": {"kind": "MutatingWebhookConfiguration", "name": "gpu-balancer"}, "patch": yaml.safe_dump([
            {"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": f"{webhook.url}/mutate"},
            {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
             "value": base64.b64encode(webhook.tls["ca.crt"].read_bytes()).decode()}])}],
    }))
    plane.kubectl("apply", "-k", str(overlay))
    plane.service_account_kubeconfig("gpu-balancer", "gpu-balancer-webhook", webhook.kubeconfig)
    prometheus.wait_for("DCGM_FI_DEV_GPU_UTIL", at_least=FLEET.nodes * FLEET.gpus_per_node)
    webhook.start()
    yield plane, webhook, prometheus, workdir
    webhook.stop()
    prometheus.stop()
    exporter.shutdown()
    exporter.server_close()


def _wait(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.3)
    raise TimeoutError(what)


def _preferred_nodes(pod: dict) -> set[str]:
    """The nodes a pod's preferred node-affinity terms name (by metadata.name, as the advice does)."""
    terms = pod["spec"].get("affinity", {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    return {value for term in terms for requirement in term["preference"].get("matchFields", [])
            if requirement["key"] == "metadata.name" and requirement["operator"] == "In"
            for value in requirement["values"]}


def _pods(plane: ControlPlane, namespace: str, selector: str = "") -> list[dict]:
    return plane.get("pods", "-n", namespace, *(["-l", selector] if selector else []))["items"]


def test_control_plane_webhook_is_called_only_for_opted_in_namespaces_and_gpu_pods(installed):
    plane, webhook, _, _ = installed
    _create_namespaces(plane, _namespace("cp-opted-in", OPTED_IN), _namespace("cp-not-opted"))
    plane.apply([_pod("gpu", "cp-opted-in"), _pod("cpu-only", "cp-opted-in", gpus=0), _pod("gpu", "cp-not-opted")])
    advised = plane.get("pod", "gpu", "-n", "cp-opted-in")
    assert ADVICE in advised["metadata"].get("annotations", {}), "the API server called the webhook"
    assert advised["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    for namespace, name in (("cp-opted-in", "cpu-only"), ("cp-not-opted", "gpu")):
        pod = plane.get("pod", name, "-n", namespace)
        assert ADVICE not in pod["metadata"].get("annotations", {}), (namespace, name)
        assert "affinity" not in pod["spec"], (namespace, name, "matchConditions or namespaceSelector let it through")


def test_control_plane_real_scheduler_places_a_deployment_where_the_advice_points(installed):
    plane, _, _, _ = installed
    levels = node_load_levels(FLEET)
    hot = {FLEET.node_name(i) for i, level in enumerate(levels) if level >= 0.8}
    assert hot, "the fleet has a hot node to avoid"
    _create_namespaces(plane, _namespace("cp-serving", OPTED_IN))
    plane.apply(_deployment("llm", "cp-serving", replicas=6))
    pods = _wait(lambda: (p := _pods(plane, "cp-serving", "app=llm")) and len(p) == 6
                 and all(x["spec"].get("nodeName") for x in p) and p, "six replicas bound")
    # The advice prefers the cool and warm nodes and avoids the hot one softly; its hostname spread
    # term counts every node, the hot one too, so once the preferred nodes hold two replicas each
    # the spread score outweighs the preference and one replica of six goes to the hot node.
    # (Measured on this control plane; the closing note of issue 35 reports it.)
    followed = [p for p in pods if p["spec"]["nodeName"] in _preferred_nodes(p)]
    on_hot = [p["spec"]["nodeName"] for p in pods if p["spec"]["nodeName"] in hot]
    assert all(_preferred_nodes(p) and not _preferred_nodes(p) & hot for p in pods), "advice avoids the hot node"
    assert len(followed) >= 5 and len(on_hot) <= 1, [(p["spec"]["nodeName"], p["metadata"]["annotations"][ADVICE])
                                                   for p in pods]
    _wait(lambda: all(p["status"].get("phase") == "Running" for p in _pods(plane, "cp-serving", "app=llm")),
          "KWOK marks the bound pods Running")


def test_control_plane_pods_are_still_created_when_the_webhook_is_down(installed):
    plane, webhook, _, _ = installed
    _create_namespaces(plane, _namespace("cp-outage", OPTED_IN))
    webhook.stop()
    try:
        started = time.monotonic()
        plane.apply(_pod("during-outage", "cp-outage"))
        elapsed = time.monotonic() - started
        pod = plane.get("pod", "during-outage", "-n", "cp-outage")
        assert ADVICE not in pod["metadata"].get("annotations", {})
        timeout = plane.get("mutatingwebhookconfiguration", "gpu-balancer")["webhooks"][0]["timeoutSeconds"]
        # failurePolicy Ignore: created unmutated, within the webhook's timeout (plus kubectl's own work).
        assert elapsed < timeout + 10, elapsed
    finally:
        webhook.start()
    plane.apply(_pod("after-outage", "cp-outage"))
    assert ADVICE in plane.get("pod", "after-outage", "-n", "cp-outage")["metadata"].get("annotations", {})


def test_control_plane_descheduler_evicts_through_the_eviction_api_and_a_pdb_holds(installed):
    """On the hot node: a Deployment whose PodDisruptionBudget allows no disruption, and one
    without a budget. The descheduler, with its own token, evicts through the Eviction API: the
    guarded pods are refused (429) and stay; where the plan takes the unguarded one, it goes and its
    ReplicaSet recreates it.
    (A budget of maxUnavailable 1 does not hold a run of evictions here: KWOK deletes an evicted
    pod and readies its replacement within milliseconds, and the disruption controller allows the
    next one before the run's next eviction; a real LLM pod takes minutes.)"""
    plane, _, prometheus, workdir = installed
    hot = FLEET.node_name(0)
    others = [FLEET.node_name(i) for i in range(1, FLEET.nodes)]
    # Placed while the other nodes are cordoned, opted in only afterwards (so the webhook does not
    # steer them away from the hot node).
    _create_namespaces(plane, _namespace("cp-evict"))
    for name in others:
        plane.kubectl("cordon", name)
    try:
        plane.apply([_deployment("guarded", "cp-evict", replicas=3), _deployment("free", "cp-evict", replicas=1),
                     {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                      "metadata": {"name": "guarded", "namespace": "cp-evict"},
                      "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "guarded"}}}}])
        _wait(lambda: (p := _pods(plane, "cp-evict")) and len(p) == 4
              and all(x["status"].get("phase") == "Running" and x["spec"].get("nodeName") == hot for x in p),
              "four replicas Running on the hot node")
        _wait(lambda: plane.get("pdb", "guarded", "-n", "cp-evict").get("status", {}).get("currentHealthy") == 3,
              "the disruption controller counts three healthy")
    finally:
        for name in others:
            plane.kubectl("uncordon", name)
    plane.kubectl("label", "namespace", "cp-evict", "gpu-balancer.io/enabled=true")
    guarded = {p["metadata"]["name"] for p in _pods(plane, "cp-evict", "app=guarded")}
    (free,) = [p["metadata"]["name"] for p in _pods(plane, "cp-evict", "app=free")]
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
    assert guarded <= {p["metadata"]["name"] for p in _pods(plane, "cp-evict", "app=guarded")}, "the budget held"
    if free in evicted:
        _wait(lambda: free not in {p["metadata"]["name"] for p in _pods(plane, "cp-evict")}, "the evicted pod gone")
        _wait(lambda: len(_pods(plane, "cp-evict", "app=free")) == 1, "its ReplicaSet recreated it")
    # Whatever it evicted (elsewhere too: the serving replica the spread term put here) is gone.
    assert report["evictions"], ("the descheduler evicted nothing through the Eviction API", report)
    for eviction in report["evictions"]:
        _wait(lambda: plane.kubectl("get", "pod", eviction["pod"], "-n", eviction["namespace"],
                                    check=False).returncode != 0, f"{eviction['pod']} deleted")


def _advised(plane: ControlPlane, namespace: str, name: str) -> bool:
    plane.kubectl("delete", "pod", name, "-n", namespace, "--ignore-not-found", "--wait=false")
    _wait(lambda: plane.kubectl("get", "pod", name, "-n", namespace, check=False).returncode != 0, "pod gone")
    plane.apply(_pod(name, namespace))
    return ADVICE in plane.get("pod", name, "-n", namespace)["metadata"].get("annotations", {})


def _set_ca_bundle(plane: ControlPlane, pem: bytes) -> None:
    plane.kubectl("patch", "mutatingwebhookconfiguration", "gpu-balancer", "--type", "json", "-p", json.dumps([
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": base64.b64encode(pem).decode()}]))


def test_control_plane_certificate_rotation_under_the_api_servers_calls(installed):
    """A new CA is added to caBundle, the serving certificate is swapped on disk, the old CA is
    dropped: the API server's calls succeed at every step (the webhook reloads without a restart)."""
    plane, webhook, _, workdir = installed
    _create_namespaces(plane, _namespace("cp-rotation", OPTED_IN))
    old_ca = webhook.tls["ca.crt"].read_bytes()
    new_ca = issue_ca("gpu-balancer-test-webhook-ca-2")
    _set_ca_bundle(plane, old_ca + new_ca.certificate_pem)
    webhook.trusted += new_ca.certificate_pem.decode()
    time.sleep(2)  # the API server's webhook informer takes the new bundle
    assert _advised(plane, "cp-rotation", "before-swap")
    swaps = _metric(webhook, "gpu_balancer_certificate_swaps_total")
    write_bundle(workdir / "tls", new_ca, issue_serving(new_ca, ["localhost"],
                                                        ip_addresses=(ipaddress.ip_address("127.0.0.1"),)))
    _wait(lambda: _metric(webhook, "gpu_balancer_certificate_swaps_total") > swaps, "the webhook took the new pair")
    assert _advised(plane, "cp-rotation", "after-swap")
    _set_ca_bundle(plane, new_ca.certificate_pem)
    # Only the new CA trusted now: an old serving certificate would be refused (and the pod created
    # unadvised, failurePolicy Ignore), so advice proves the swap happened.
    assert _wait(lambda: _advised(plane, "cp-rotation", "old-ca-dropped"), "advised with the new CA alone", 20)
    assert webhook.process.poll() is None, "rotated without a restart"


def _metric(webhook: HostWebhook, name: str) -> float:
    for line in webhook.get("/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_control_plane_cluster_view_survives_an_api_server_restart(installed):
    """After kube-apiserver restarts, the webhook's watch resumes: nodes filled after the restart
    are known to be full, and the advice names only nodes with room."""
    plane, webhook, _, _ = installed
    plane.restart_apiserver()
    _create_namespaces(plane, _namespace("cp-restart", OPTED_IN), _namespace("cp-filler"))
    cool = [FLEET.node_name(i) for i, level in enumerate(node_load_levels(FLEET)) if level < 0.5]
    # Fill the cool nodes (the advice's first choice) in a namespace the webhook leaves alone.
    fillers = []
    for node in cool:
        free = 8 - sum(int(c["resources"].get("limits", {}).get("nvidia.com/gpu", 0))
                       for p in plane.get("pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
                       if p["status"].get("phase") in ("Pending", "Running") for c in p["spec"]["containers"])
        if free:
            pod = _pod(f"fill-{node}", "cp-filler", gpus=free)
            pod["spec"]["nodeName"] = node
            fillers.append(pod)
    plane.apply(fillers)
    _wait(lambda: all(p["status"].get("phase") == "Running" for p in _pods(plane, "cp-filler")), "fillers Running")
    time.sleep(2)  # the watch delivers the fillers
    plane.apply(_pod("after-restart", "cp-restart"))
    pod = plane.get("pod", "after-restart", "-n", "cp-restart")
    assert ADVICE in pod["metadata"].get("annotations", {}), webhook.log()
    named = _preferred_nodes(pod)
    assert named and not named & set(cool), (named, cool, pod["metadata"]["annotations"][ADVICE])
