"""Our install on the test control plane: the fleet it steers, the webhook as a host process with
its ServiceAccount's token, and the objects the tests create. Does I/O: processes, files, kubectl."""

from __future__ import annotations

import base64
import ipaddress
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from certs.files import write_bundle
from certs.issue import issue_ca, issue_serving
from gpu_balancer.local_prometheus import LocalPrometheus, ScrapeTarget, free_port, stop_process
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec, generate_fleet
from tests.conftest import require_tool
from tests.control_plane.plane import REPOSITORY, ControlPlane, spawn_tied
from tests.polling import wait_until
from webhook.pods import ADVICE_ANNOTATION

ADVICE = ADVICE_ANNOTATION
# Four H100 nodes; the skewed profile puts node 00 near 90 % and node 01 near 60 %, 02 and 03 cool.
FLEET = FleetSpec(nodes=4, gpus_per_node=8, profile="skewed", seed=1)
OPTED_IN = {"gpu-balancer.io/enabled": "true"}


GPU_OPERATOR_LABELS = {
    # What NVIDIA's GPU Operator (GPU feature discovery) puts on an H100 node.
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/cuda.driver.major": "550",
    "feature.node.kubernetes.io/pci-10de.present": "true",
}


def gpu_node(name: str, *, gpus: int = 8, labels: dict | None = None) -> dict:
    """A Node KWOK keeps Ready (its annotation), with GPU capacity the device plugin would report."""
    capacity = {"cpu": "96", "memory": "1536Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok",
                                **GPU_OPERATOR_LABELS, "nvidia.com/gpu.count": str(gpus), **(labels or {})}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def container(gpus: int = 1) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "100m"}
    return {"name": "server", "image": "registry.example/llm-server:1", "resources": {"limits": limits}}


def new_pod(name: str, namespace: str, gpus: int = 1) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [container(gpus)]}}


def new_deployment(name: str, namespace: str, replicas: int, **spec) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container()], **spec}}}}


def list_pods(plane: ControlPlane, namespace: str, selector: str = "") -> list[dict]:
    return plane.get("pods", "-n", namespace, *(["-l", selector] if selector else []))["items"]


def advised(pod: dict) -> bool:
    return ADVICE in pod["metadata"].get("annotations", {})


def preferred_nodes(pod: dict) -> set[str]:
    """The nodes a pod's preferred node-affinity terms name (by metadata.name, as the advice does)."""
    terms = pod["spec"].get("affinity", {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    return {value for term in terms for requirement in term["preference"].get("matchFields", [])
            if requirement["key"] == "metadata.name" and requirement["operator"] == "In"
            for value in requirement["values"]}


def fill(plane: ControlPlane, nodes: list[str], namespace: str) -> None:
    """Bind pods taking every free GPU of `nodes`, in `namespace` (one the webhook leaves alone),
    and wait until they run."""
    fillers = []
    for node in nodes:
        held = sum(int(c["resources"].get("limits", {}).get("nvidia.com/gpu", 0))
                   for p in plane.get("pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
                   if p["status"].get("phase") in ("Pending", "Running") for c in p["spec"]["containers"])
        if held < FLEET.gpus_per_node:
            filler = new_pod(f"fill-{node}", namespace, gpus=FLEET.gpus_per_node - held)
            filler["spec"]["nodeName"] = node
            fillers.append(filler)
    plane.apply(fillers)
    plane.wait_for(lambda: all(p["status"].get("phase") == "Running" for p in list_pods(plane, namespace)),
                   "the fillers Running", 60)


def policy_text(prometheus_url: str) -> str:
    # Short windows so a test need not wait ten minutes for heat to be "sustained".
    return yaml.safe_dump({
        "apiVersion": "gpu-balancer.io/v1alpha1", "kind": "BalancerPolicy",
        "prometheus": {"url": prometheus_url, "timeoutSeconds": 3},
        "telemetry": {"refreshSeconds": 1, "stalenessLimitSeconds": 60},
        "descheduler": {"windowSeconds": 8, "stepSeconds": 2, "minWindowCoverage": 0.5, "dryRun": True,
                        "maxEvictionsPerRun": 4, "maxEvictionsPerNode": 4, "maxEvictionsPerNamespace": 4},
    })


class HostWebhook:
    """`gpu-balancer webhook` as a process on loopback, acting with the webhook ServiceAccount
    (`kubeconfig`), or with no cluster view at all when `kubeconfig` is None."""

    def __init__(self, workdir: Path, policy: Path, kubeconfig: Path | None, name: str = "webhook"):
        self.workdir, self.policy, self.kubeconfig, self.name = workdir, policy, kubeconfig, name
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

    def start(self, timeout: float = 60.0) -> None:
        env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        self.process = spawn_tied(
            [sys.executable, "-m", "gpu_balancer", "webhook", "--tls-cert", str(self.tls["tls.crt"]),
             "--tls-key", str(self.tls["tls.key"]), "--host", "127.0.0.1", "--port", str(self.port),
             "--config", str(self.policy)],
            self.workdir / f"{self.name}.log", env=env, cwd=REPOSITORY)
        self.wait_ready(timeout)

    def ready(self) -> bool:
        """Ready to steer: fresh telemetry and the cluster view listed through our RBAC."""
        import httpx

        try:
            return (self.get("/readyz").json()["telemetry"] == "fresh"
                    and (self.kubeconfig is None or self.metric("gpu_balancer_cluster_view_available") == 1.0))
        except httpx.HTTPError:
            return False

    def _alive(self) -> None:
        assert self.process.poll() is None, f"the webhook exited: {self.log()}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_until(self.ready, "webhook ready", timeout, alive=self._alive, detail=lambda: f": {self.log()}",
                   interval=0.25)

    def get(self, path: str):
        import httpx

        return httpx.get(f"{self.url}{path}", verify=ssl.create_default_context(cadata=self.trusted), timeout=2)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of /metrics samples named `name` whose labels include `labels` (`kind="pods"`),
        read with prometheus_client's own parser; 0 where there is none."""
        from prometheus_client.parser import text_string_to_metric_families

        return sum(sample.value for family in text_string_to_metric_families(self.get("/metrics").text)
                   for sample in family.samples
                   if sample.name == name and labels.items() <= sample.labels.items())

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None

    def log(self) -> str:
        return (self.workdir / f"{self.name}.log").read_text(errors="replace")[-3000:]


def apply_install(plane: ControlPlane, webhook: HostWebhook, overlay: Path) -> None:
    """`kubectl apply -k` of the host-processes overlay as shipped, with this webhook's URL and CA
    patched in (what an operator's own overlay does), and the webhook's kubeconfig: a token of
    our webhook ServiceAccount."""
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(REPOSITORY / "deploy" / "examples" / "host-processes", overlay)],
        "patches": [{"target": {"kind": "MutatingWebhookConfiguration", "name": "gpu-balancer"},
                     "patch": yaml.safe_dump([
                         {"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": f"{webhook.url}/mutate"},
                         {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                          "value": base64.b64encode(webhook.tls["ca.crt"].read_bytes()).decode()}])}],
    }))
    plane.kubectl("apply", "-k", str(overlay))
    if webhook.kubeconfig is not None:
        plane.service_account_kubeconfig("gpu-balancer", "gpu-balancer-webhook", webhook.kubeconfig)


@dataclass
class Install:
    plane: ControlPlane
    webhook: HostWebhook
    prometheus: LocalPrometheus
    workdir: Path


@contextmanager
def installed_on(plane: ControlPlane, workdir: Path) -> Iterator[Install]:
    """Fake GPU nodes, a real Prometheus scraping fake-dcgm for them, our install applied with
    `kubectl apply -k` (the host-processes overlay) and the webhook running with its own token."""
    require_tool("prometheus", why="Debian package `prometheus`; `make test` installs it as root")
    plane.apply([gpu_node(FLEET.node_name(i)) for i in range(FLEET.nodes)])
    exporter = make_server(render_exposition(generate_fleet(FLEET)), port=0)
    serve_in_background(exporter)
    prometheus = LocalPrometheus([ScrapeTarget(f"127.0.0.1:{exporter.server_port}")]).start()
    policy = workdir / "policy.yaml"
    policy.write_text(policy_text(prometheus.url))
    webhook = HostWebhook(workdir, policy, workdir / "webhook.kubeconfig")
    apply_install(plane, webhook, workdir / "overlay")
    prometheus.wait_for("DCGM_FI_DEV_GPU_UTIL", at_least=FLEET.nodes * FLEET.gpus_per_node)
    webhook.start()
    try:
        yield Install(plane, webhook, prometheus, workdir)
    finally:
        webhook.stop()
        prometheus.stop()
        exporter.shutdown()
        exporter.server_close()
