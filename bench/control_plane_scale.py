"""The webhook's cluster view on the real API server at scale (issue 35): 2,000 KWOK nodes × 8 GPUs
and 16,000 bound pods, listed and watched through our webhook ServiceAccount. Prints the webhook's
memory, its time to ready and its admission latency with the view live, beside the same webhook
with no cluster view (telemetry alone), measured in the same run against the same Prometheus.

    .venv/bin/python bench/control_plane_scale.py [--nodes 2000] [--gpus 8] [--admissions 1000]

The fleet's shape is an assumption fixed before measuring: 8 pods a node, 6 of them one-GPU
serving replicas and 2 with no GPU (node agents), so 75 % of the GPUs are allocated and every node
has room for more. Telemetry: `fake-dcgm` exporters (10 processes, skewed load) scraped every 15 s
by a real Prometheus with our recording rules (`bench/snapshot_scale.py`'s). Admissions: one-GPU
replica reviews POSTed one after another over TLS on a kept-alive connection (so the figure is the
webhook's answer plus loopback TLS, not a client queue). Does I/O: starts a control plane,
Prometheus, exporters and two webhooks.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import kubernetes
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.admission_mix import review  # noqa: E402
from bench.snapshot_scale import fleet_in_prometheus  # noqa: E402
from bench.webhook_latency import POD as REPLICA  # noqa: E402
from sim.fleet import FleetSpec  # noqa: E402
from tests.control_plane.install import HostWebhook, apply_install, gpu_node  # noqa: E402
from tests.control_plane.plane import ControlPlane, build_binaries  # noqa: E402

EXPORTERS = 10
GPU_PODS_PER_NODE, OTHER_PODS_PER_NODE = 6, 2


def node_names(nodes: int, gpus: int) -> list[str]:
    """The names `fleet_in_prometheus`'s exporters give their nodes (one rack an exporter)."""
    per_rack = nodes // EXPORTERS
    return [FleetSpec(nodes=per_rack, gpus_per_node=gpus, node_prefix=f"rack{rack:02d}-node-").node_name(i)
            for rack in range(EXPORTERS) for i in range(per_rack)]


def _bound_pod(node: str, index: int) -> dict:
    limits = {"nvidia.com/gpu": "1"} if index < GPU_PODS_PER_NODE else {"cpu": "500m"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{node}-p{index}", "namespace": "fleet"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/app:1",
                                                       "resources": {"limits": limits}}]}}


def populate(plane: ControlPlane, names: list[str], gpus: int) -> dict[str, float]:
    """Nodes and bound pods through the API server, 16 requests in flight; returns the rates."""
    api = kubernetes.config.new_client_from_config(str(plane.admin_kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    core = kubernetes.client.CoreV1Api(api)
    figures = {}
    with ThreadPoolExecutor(16) as pool:
        started = time.monotonic()
        list(pool.map(lambda name: core.create_node(gpu_node(name, gpus=gpus)), names))
        figures["nodes_per_s"] = len(names) / (time.monotonic() - started)
        plane.create_namespaces("fleet")
        pods = [_bound_pod(name, i) for name in names for i in range(GPU_PODS_PER_NODE + OTHER_PODS_PER_NODE)]
        started = time.monotonic()
        list(pool.map(lambda pod: core.create_namespaced_pod("fleet", pod), pods))
        figures["pods_per_s"] = len(pods) / (time.monotonic() - started)
    api.close()
    # KWOK marks them Running; measure only once that churn is over.
    plane.wait_for(lambda: not plane.kubectl("get", "pods", "-n", "fleet", "--field-selector", "status.phase!=Running",
                                             "-o", "name", "--chunk-size=2000").stdout.strip(),
                   "every pod Running", 1800)
    return figures


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process and, summed, of its children (the telemetry reader)."""
    def status(p: int) -> dict[str, int]:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{p}/status").read_text().splitlines() if ":" in line)
        return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}

    own = status(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    kids = [status(int(child)) for child in children]
    return {"rss": own["VmRSS"], "peak": own["VmHWM"], "children_rss": sum(k["VmRSS"] for k in kids)}


def admissions(webhook: HostWebhook, count: int) -> dict[str, float]:
    context = ssl.create_default_context(cadata=webhook.trusted)
    latencies, advised = [], 0
    with httpx.Client(verify=context, timeout=10) as client:
        for uid in range(count + 50):
            body = json.dumps(review(uid, REPLICA))
            started = time.perf_counter()
            answer = client.post(f"{webhook.url}/mutate", content=body, headers={"Content-Type": "application/json"})
            elapsed = time.perf_counter() - started
            if uid >= 50:  # the first few warm the connection and the signature's ranking
                latencies.append(elapsed)
                advised += "patch" in answer.json()["response"]
    latencies.sort()
    return {"p50_ms": 1000 * statistics.median(latencies), "p99_ms": 1000 * latencies[int(0.99 * len(latencies)) - 1],
            "max_ms": 1000 * latencies[-1], "advised": advised / len(latencies)}


def measure(webhook: HostWebhook, count: int) -> dict:
    started = time.monotonic()
    webhook.start(timeout=900)
    figures = {"ready_s": time.monotonic() - started, "memory_ready": memory_kb(webhook.process.pid)}
    figures.update(admissions(webhook, count))
    figures["memory_after"] = memory_kb(webhook.process.pid)
    webhook.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--admissions", type=int, default=1000)
    args = parser.parse_args()
    if args.nodes < EXPORTERS:
        parser.error(f"--nodes: at least {EXPORTERS} (the fleet is served by {EXPORTERS} exporters)")
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")  # as the image runs the webhook (Dockerfile)
    names = node_names(args.nodes, args.gpus)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        plane = ControlPlane(build_binaries(), workdir / "plane").start()
        try:
            started = time.monotonic()
            figures = populate(plane, names, args.gpus)
            figures["populated_s"] = time.monotonic() - started
            with fleet_in_prometheus(len(names), args.gpus, EXPORTERS, recorded=True) as prometheus:
                policy = workdir / "policy.yaml"
                policy.write_text(yaml.safe_dump({"apiVersion": "gpu-balancer.io/v1alpha1", "kind": "BalancerPolicy",
                                                  "prometheus": {"url": prometheus.url}}))
                results = {}
                for name, with_view in (("no-view", False), ("view", True)):
                    home = workdir / name
                    home.mkdir()
                    webhook = HostWebhook(home, policy, home / "webhook.kubeconfig" if with_view else None, name=name)
                    if with_view:
                        apply_install(plane, webhook, home / "overlay")
                    results[name] = measure(webhook, args.admissions)
            print(json.dumps({"nodes": len(names), "gpus": len(names) * args.gpus,
                              "pods": len(names) * (GPU_PODS_PER_NODE + OTHER_PODS_PER_NODE), **figures,
                              **results}, indent=2))
            view, alone = results["view"], results["no-view"]
            print(f"time to ready: {view['ready_s']:.1f} s with the view, {alone['ready_s']:.1f} s without; "
                  f"webhook RSS at ready {view['memory_ready']['rss'] / 1024:.0f} MB vs "
                  f"{alone['memory_ready']['rss'] / 1024:.0f} MB (the view: "
                  f"{(view['memory_ready']['rss'] - alone['memory_ready']['rss']) / 1024:.0f} MB); "
                  f"admission p99 {view['p99_ms']:.2f} ms vs {alone['p99_ms']:.2f} ms "
                  f"({view['p99_ms'] / alone['p99_ms']:.2f}x), p50 {view['p50_ms']:.2f} vs {alone['p50_ms']:.2f} ms")
        finally:
            plane.remove()


if __name__ == "__main__":
    main()
