"""Benchmark: admission decisions with a cluster view at 5,000 nodes, in 20 pools against one pool,
and the view's memory at 5,000 nodes / 40,000 pods (in process, no HTTP).

Decision cost: `decide` for pods pinned by nodeSelector to one of 20 pools (each pool's replicas
share a constraint signature) against unpinned pods on a one-pool fleet of the same size, each
timed after the first admission of its signature (the per-snapshot feasible set), as the webhook
runs between refreshes; and the one-pool fleet again with every node listing 20 serving images of
10 GB in `status.images` (the pod's on every other node), so the time-to-ready ranking runs.
Memory: the watch's state after applying the objects, by tracemalloc.

    .venv/bin/python bench/feasible_scale.py [--nodes 5000] [--pods 40000] [--admissions 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scoring.advice.placement import index_fleet  # noqa: E402
from scoring.advice.readiness import StartupCosts  # noqa: E402
from scoring.cluster.feasibility import node_facts  # noqa: E402
from scoring.cluster.view import ClusterView  # noqa: E402
from scoring.heat import FleetHeat, NodeHeat, Tier  # noqa: E402
from scoring.policy import PlacementPolicy  # noqa: E402
from webhook.admit import decide  # noqa: E402
from webhook.cluster_watch import OPTIONAL_KINDS, ClusterWatch  # noqa: E402
from webhook.ledger import SteeringLedger  # noqa: E402
from webhook.review import decode_review, pod_review  # noqa: E402

POLICY = PlacementPolicy()
NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)


SERVING_IMAGE = "registry.example/llm/server-0:1"
IMAGES_PER_NODE = 20


def node_object(i: int, pools: int, images: bool = False) -> dict:
    node = {"metadata": {"name": f"gpu-{i:05d}", "labels": {
        "pool": f"p{i % pools}", "kubernetes.io/hostname": f"gpu-{i:05d}", "topology.kubernetes.io/zone": f"z{i % 4}",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.clique": f"c.{i // 4}"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}}}
    if images:  # the pod's image on every other node, among others of the same size
        first = i % 2
        node["status"]["images"] = [{"names": [f"registry.example/llm/server-{first + k}:1"], "sizeBytes": 10 * 10**9}
                                    for k in range(IMAGES_PER_NODE)]
    return node


def pod_object(i: int, pool: str | None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": SERVING_IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    if pool:
        spec["nodeSelector"] = {"pool": pool}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{i}", "namespace": "ml"}, "spec": spec}


def decision_cost(nodes: int, pools: int, admissions: int, seed: int, images: bool = False) -> float:
    """Median microseconds per admission; with `images`, nodes list them and the time-to-ready
    ranking runs (the default policy's startup costs)."""
    rng = random.Random(seed)
    startup = StartupCosts() if images else None
    objects = [node_object(i, pools, images) for i in range(nodes)]
    facts = {f.name: f for f in (node_facts(o, POLICY) for o in objects)}
    heat = FleetHeat(NOW, False, 5.0, tuple(
        NodeHeat(name, 8, rng.randint(0, 6), u, u, 0.3, 50.0, None, Tier.COOL if u < 50 else Tier.WARM, ())
        for name in facts for u in (rng.uniform(0, 79),)))
    index = index_fleet(heat)
    ledger = SteeringLedger(45)
    ledger.prepare(index, ClusterView(facts, {}, frozenset(), NOW))
    # One untimed admission per signature first, then `admissions` timed ones.
    reviews = [decode_review(json.dumps(pod_review(pod_object(i, f"p{i % pools}" if pools > 1 else None))).encode())
               for i in range(pools + admissions)]
    for review in reviews[:pools]:  # first admission of each signature builds its feasible set
        decide(review, index=index, telemetry_time=NOW, snapshot_age_seconds=5.0, ledger=ledger, policy=POLICY,
               now=NOW, startup=startup)
    times = []
    for review in reviews[pools:]:
        started = time.perf_counter()
        decide(review, index=index, telemetry_time=NOW, snapshot_age_seconds=5.0, ledger=ledger, policy=POLICY,
               now=NOW + timedelta(seconds=1), startup=startup)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def view_memory(nodes: int, pods: int) -> tuple[float, int]:
    """(MB held by the watch's state, GPU pods held)."""
    from kubernetes import client

    tracemalloc.start()
    watch = ClusterWatch(client.ApiClient(client.Configuration()), POLICY)
    baseline = tracemalloc.get_traced_memory()[0]
    watch.on_list("nodes", [node_object(i, 20) for i in range(nodes)])
    bound = []
    for i in range(pods):
        pod = pod_object(i, f"p{i % 20}")
        pod["spec"]["nodeName"] = f"gpu-{i % nodes:05d}"
        pod["status"] = {"phase": "Running"}
        bound.append(pod)
    watch.on_list("pods", bound)
    for kind in OPTIONAL_KINDS:
        watch.on_list(kind, [])  # a fleet without DRA objects or HPAs: listed, and empty
    view = watch.freeze()
    used = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    assert view is not None and len(view.bound) == pods
    return used / 2**20, len(view.bound)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--admissions", type=int, default=2000)
    args = parser.parse_args()
    one, twenty, timed = [], [], []
    for seed in range(1, 6):  # interleaved, so drift in the machine's speed hits all alike
        one.append(decision_cost(args.nodes, 1, args.admissions, seed))
        twenty.append(decision_cost(args.nodes, 20, args.admissions, seed))
        timed.append(decision_cost(args.nodes, 1, args.admissions, seed, images=True))
    print(f"decision, {args.nodes} nodes in 1 pool:   median {statistics.median(one):.0f} µs per admission "
          f"(seeds 1-5: {', '.join(f'{v:.0f}' for v in one)})")
    print(f"decision, {args.nodes} nodes in 20 pools: median {statistics.median(twenty):.0f} µs per admission "
          f"(seeds 1-5: {', '.join(f'{v:.0f}' for v in twenty)})")
    print(f"ratio 20 pools / 1 pool: {statistics.median(twenty) / statistics.median(one):.2f}x (target ≤ 1.3x)")
    print(f"decision, {args.nodes} nodes in 1 pool listing {IMAGES_PER_NODE} images each (time to ready ranked): "
          f"median {statistics.median(timed):.0f} µs (seeds 1-5: {', '.join(f'{v:.0f}' for v in timed)}); "
          f"{statistics.median(timed) / statistics.median(one):.2f}x the same fleet without images")
    megabytes, held = view_memory(args.nodes, args.pods)
    print(f"cluster view: {args.nodes} nodes, {held} GPU pods held: {megabytes:.0f} MB (target ≤ 150 MB)")


if __name__ == "__main__":
    main()
