"""Advice that holds on the real scheduler (issue 47, item 0b): a fleet shaped unlike the other
tests' own, the real kube-scheduler placing a Deployment and a two-worker job, and the share of
pods it puts on nodes the advice avoided, measured against the same Deployment without the webhook.

The fleet, fixed from the issue's report before anything was measured: eight H100 nodes, two hot
with one GPU free each, one with a critical XID (79, "fallen off the bus") and seven GPUs free, one
warm, four cool in two NVLink cliques. It is its own pool (a label and a taint its pods select and
tolerate), so the other tests' pods never land on it and its pods never land on theirs. A webhook
of its own, with its own MutatingWebhookConfiguration and opt-in label, reads a Prometheus scraping
this fleet's exporter; it acts with the installed webhook ServiceAccount's token."""

from __future__ import annotations

import base64
import copy
import json
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gpu_balancer.local_prometheus import LocalPrometheus, ScrapeTarget
from scoring.ingest.telemetry import GpuSample, PodRef
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from tests.control_plane.install import ADVICE, HostWebhook, gpu_node, list_pods, new_deployment, policy_text
from tests.control_plane.plane import ControlPlane

POOL = "steering"
POOL_LABEL = "gpu-balancer.test/pool"
OPT_IN = "steering.gpu-balancer.io/enabled"
CLIQUE = "nvidia.com/gpu.clique"
GPUS = 8
FILLERS = "steering-fill"


def _name(i: int) -> str:
    return f"steer-{i}"


HOT, XID, WARM = (_name(0), _name(1)), _name(2), _name(3)
COOL = tuple(_name(i) for i in range(4, 8))
AVOIDED = {*HOT, XID}
# Per node: GPUs held and how busy each held GPU is; the XID node's fault sits on a held GPU.
LOAD = {HOT[0]: (7, 97.0), HOT[1]: (7, 95.0), XID: (1, 40.0), WARM: (5, 90.0),
        COOL[0]: (1, 15.0), COOL[1]: (1, 10.0), COOL[2]: (1, 20.0), COOL[3]: (1, 12.0)}
CLIQUES = {COOL[0]: "A.1", COOL[1]: "A.1", COOL[2]: "B.1", COOL[3]: "B.1", XID: "C.1", WARM: "D.1",
           HOT[0]: "E.1", HOT[1]: "E.1"}
REPLICAS = 10


def _readings() -> list[GpuSample]:
    readings = []
    for n in range(8):
        node = _name(n)
        held, util = LOAD[node]
        for g in range(GPUS):
            busy = g < held
            readings.append(GpuSample(
                node=node, gpu=str(g), uuid=f"GPU-57ee0000-0000-{n:04x}-{g:04x}-000000000000",
                model="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{0x18 + g * 0x10:02X}:00.0",
                util_percent=util if busy else 0.0, fb_used_mib=40000.0 if busy else 512.0,
                fb_free_mib=81559.0 - (40000.0 if busy else 512.0), temperature_c=40 + util / 3,
                power_w=70 + 6 * (util if busy else 0), last_xid=79 if node == XID and g == 0 else 0,
                pod=PodRef(FILLERS, f"fill-{node}", "server") if busy else None))
    return readings


def _pool_spec() -> dict:
    return {"nodeSelector": {POOL_LABEL: POOL},
            "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": POOL, "effect": "NoSchedule"}]}


def _pool_node(name: str) -> dict:
    node = gpu_node(name, gpus=GPUS, labels={POOL_LABEL: POOL, CLIQUE: CLIQUES[name]})
    node["spec"] = {"taints": [{"key": POOL_LABEL, "value": POOL, "effect": "NoSchedule"}]}
    return node


def _filler(node: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"fill-{node}", "namespace": FILLERS},
            "spec": {"nodeName": node, **_pool_spec(), "containers": [
                {"name": "server", "image": "registry.example/llm-server:1",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


class Pool:
    def __init__(self, plane: ControlPlane, webhook: HostWebhook, policy: Path, prometheus_url: str):
        self.plane, self.webhook, self.policy, self.prometheus_url = plane, webhook, policy, prometheus_url

    def use_policy(self, descheduler: dict | None = None, **placement) -> None:
        """Restart the webhook on the test policy with these placement (and descheduler) settings."""
        document = yaml.safe_load(policy_text(self.prometheus_url))
        document["optIn"] = {"label": OPT_IN}
        document["placement"] = placement
        if descheduler:
            document.setdefault("descheduler", {}).update(descheduler)
        self.policy.write_text(yaml.safe_dump(document))
        self.webhook.stop()
        self.webhook.start()

    def deploy(self, namespace: str, opted_in: bool) -> list[dict]:
        """A 10-replica Deployment on the pool; its pods once all are bound."""
        self.plane.create_namespaces(namespace, labels={OPT_IN: "true"} if opted_in else None)
        self.plane.apply(new_deployment("llm", namespace, REPLICAS, **_pool_spec()))
        pods = self.plane.wait_for(lambda: (p := list_pods(self.plane, namespace, "app=llm")) and len(p) == REPLICAS
                                   and all(x["spec"].get("nodeName") for x in p) and p, "ten replicas bound", 90)
        self.plane.kubectl("delete", "deployment", "llm", "-n", namespace, "--wait=true")
        self.plane.wait_for(lambda: not list_pods(self.plane, namespace, "app=llm"), "the replicas gone", 90)
        return pods


def spread(pods: list[dict]) -> dict[str, int]:
    return dict(sorted(Counter(p["spec"]["nodeName"] for p in pods).items()))


def on_avoided(pods: list[dict]) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in pods if p["spec"]["nodeName"] in AVOIDED)


@pytest.fixture(scope="module")
def pool(installed, tmp_path_factory):
    plane = installed.plane
    workdir = tmp_path_factory.mktemp("steering")
    plane.apply([_pool_node(_name(i)) for i in range(8)])
    plane.create_namespaces(FILLERS)
    plane.apply([_filler(node, held) for node, (held, _) in LOAD.items()])
    plane.wait_for(lambda: all(p["status"].get("phase") == "Running" for p in list_pods(plane, FILLERS)),
                   "the fillers Running", 60)
    exporter = make_server(render_exposition(_readings()), port=0)
    serve_in_background(exporter)
    prometheus = LocalPrometheus([ScrapeTarget(f"127.0.0.1:{exporter.server_port}")]).start()
    prometheus.wait_for("DCGM_FI_DEV_GPU_UTIL", at_least=8 * GPUS)
    kubeconfig = plane.service_account_kubeconfig("gpu-balancer", "gpu-balancer-webhook",
                                                  workdir / "webhook.kubeconfig")
    webhook = HostWebhook(workdir, workdir / "policy.yaml", kubeconfig, name="steering-webhook")
    chosen = Pool(plane, webhook, workdir / "policy.yaml", prometheus.url)
    chosen.use_policy()
    configuration = copy.deepcopy(plane.get("mutatingwebhookconfiguration", "gpu-balancer"))
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "annotations"):
        configuration["metadata"].pop(key, None)
    configuration["metadata"]["name"] = "gpu-balancer-steering-test"
    (hook,) = configuration["webhooks"]
    hook["name"] = "steering.gpu-balancer.io"
    hook["namespaceSelector"] = {"matchLabels": {OPT_IN: "true"}}
    hook["clientConfig"] = {"url": f"{webhook.url}/mutate",
                            "caBundle": base64.b64encode(webhook.tls["ca.crt"].read_bytes()).decode()}
    plane.apply(configuration)
    try:
        yield chosen
    finally:
        webhook.stop()
        plane.kubectl("delete", "mutatingwebhookconfiguration", "gpu-balancer-steering-test", "--ignore-not-found")
        prometheus.stop()
        exporter.shutdown()
        exporter.server_close()


def test_control_plane_advised_replicas_stay_off_the_nodes_the_advice_avoids(pool, capsys):
    stock = pool.deploy("steer-stock", opted_in=False)
    advised = pool.deploy("steer-advised", opted_in=True)
    figures = {"stock": on_avoided(stock), "gpu-balancer": on_avoided(advised)}
    pool.use_policy(replicaSpread="ledger")
    figures["gpu-balancer, replicaSpread ledger"] = on_avoided(pool.deploy("steer-ledger", opted_in=True))
    pool.use_policy(hardAvoidHot=True, hardAvoidMinSpareGpus=4)
    hard = pool.deploy("steer-hard-hot", opted_in=True)
    figures["gpu-balancer, hardAvoidHot"] = on_avoided(hard)
    pool.use_policy()
    with capsys.disabled():
        for name, nodes in figures.items():
            print(f"\n[steering] {name}: {len(nodes)} of {REPLICAS} replicas on avoided nodes {nodes}")
        print(f"[steering] replicas per node, stock {spread(stock)}, gpu-balancer {spread(advised)}")
    annotations = [p["metadata"]["annotations"][ADVICE] for p in advised]
    assert all(f"excluded {XID}(unhealthy" in a for a in annotations), annotations
    assert all(p["spec"]["nodeName"] != XID for p in advised), "the required term keeps the XID node out"
    assert len(figures["gpu-balancer"]) <= len(figures["stock"]), figures
    assert not figures["gpu-balancer, hardAvoidHot"], figures


def _worker(name: str, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"training.kubeflow.org/job-name": "bert"},
                         "annotations": {"gpu-balancer.io/job-size": "2"}},
            "spec": {**_pool_spec(), "containers": [
                {"name": "trainer", "image": "registry.example/trainer:1",
                 "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}


def test_control_plane_a_jobs_first_worker_is_advised_a_domain_and_the_second_is_held_to_it(pool):
    plane = pool.plane
    plane.create_namespaces("steer-job", labels={OPT_IN: "true"})
    placed = []
    for name in ("worker-0", "worker-1"):
        plane.apply(_worker(name, "steer-job"))
        placed.append(plane.wait_for(lambda: (p := plane.get("pod", name, "-n", "steer-job"))["spec"].get("nodeName")
                                     and p, f"{name} bound", 60))
    first, second = (p["metadata"]["annotations"][ADVICE] for p in placed)
    assert "preferred " in first and f"domain {CLIQUE}=" in first, first
    assert f"required {CLIQUE}=" in second, second
    domains = {CLIQUES[p["spec"]["nodeName"]] for p in placed}
    assert len(domains) == 1 and XID not in {p["spec"]["nodeName"] for p in placed}, (domains, first, second)
    assert domains <= {CLIQUES[n] for n in COOL}, (domains, first)


SERVING_IMAGE = "registry.example/vllm-openai:v0.8.5"
IMAGE_BYTES = 15_000_000_000


def test_control_plane_a_replica_goes_where_its_image_is_when_the_pull_costs_more_than_the_heat(pool):
    """The warm node holds the serving image (its kubelet lists it in status.images); at 30 MB/s
    the 15 GB pull would keep a replica on a cool node from serving for over eight of the ten
    minutes the advice is judged over, so the advice ranks the warm node first and says why, and
    the real scheduler binds the pod there. With the pull priced at 1 GB/s the cool nodes' idle
    cycles win again."""
    plane = pool.plane
    status = {"status": {"images": [{"names": [f"{SERVING_IMAGE}"], "sizeBytes": IMAGE_BYTES},
                                    {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320_000}]}}
    plane.kubectl("patch", "node", WARM, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    plane.create_namespaces("steer-image", labels={OPT_IN: "true"})

    def admitted(name: str) -> dict:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "steer-image"},
               "spec": {**_pool_spec(), "containers": [{"name": "server", "image": SERVING_IMAGE,
                                                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        plane.apply(pod)
        return plane.wait_for(lambda: (p := plane.get("pod", name, "-n", "steer-image"))["spec"].get("nodeName")
                              and p, f"{name} bound", 60)

    # The fillers' bookings settle 45 s after they were bound (the default settleSeconds): until
    # then the webhook rightly counts the warm node's free GPUs as promised.
    created = datetime.fromisoformat(plane.get("pod", f"fill-{WARM}", "-n", FILLERS)["metadata"]["creationTimestamp"]
                                     .replace("Z", "+00:00"))
    time.sleep(max(0.0, (created + timedelta(seconds=50) - datetime.now(timezone.utc)).total_seconds()))
    try:
        pool.use_policy(descheduler={"imagePullBytesPerSecond": 30e6})
        slow = admitted("slow-pull")
        pool.use_policy(descheduler={"imagePullBytesPerSecond": 1e9})
        fast = admitted("fast-pull")
    finally:
        pool.use_policy()
        plane.kubectl("delete", "namespace", "steer-image", "--wait=false")
    advice = slow["metadata"]["annotations"][ADVICE]
    assert advice.startswith(f"preferred {WARM}(100)"), advice
    assert f"ready {WARM} ~30 s (image cached)" in advice and "(pull 15.0 GB)" in advice, advice
    assert slow["spec"]["nodeName"] == WARM, (slow["spec"]["nodeName"], advice)
    fast_advice = fast["metadata"]["annotations"][ADVICE]
    assert fast_advice.split("(")[0].removeprefix("preferred ") in COOL, fast_advice
    assert fast["spec"]["nodeName"] in COOL, (fast["spec"]["nodeName"], fast_advice)
