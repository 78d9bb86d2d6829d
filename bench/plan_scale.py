"""Benchmark: descheduler planning for 5,000 (or 15,000) GPU nodes and 8 pods each (pure planning, in process).

Builds `kubectl get nodes,pods -A -o json`-shaped objects, a snapshot and window statistics for a
skewed fleet, then times parsing the cluster plus `plan_evictions`, and reports peak RSS.
Targets: ≤ 5 s and ≤ 500 MB at 5,000 nodes (issue 4); ≤ 5 s and ≤ 800 MB at 15,000 (issue 17).

    .venv/bin/python bench/plan_scale.py [--nodes 5000] [--pods-per-node 8]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from descheduler.cluster import cluster_from_objects, namespace_object  # noqa: E402
from descheduler.ledger import LedgerState  # noqa: E402
from descheduler.plan import plan_evictions  # noqa: E402
from scoring.heat import fleet_heat  # noqa: E402
from scoring.ingest.series import aggregate_samples, build_snapshot  # noqa: E402
from scoring.ingest.telemetry import WindowStats  # noqa: E402
from scoring.policy import OptInPolicy, default_policy  # noqa: E402
from sim.fleet import FleetSpec, generate_fleet  # noqa: E402


def objects_for(samples, gpus_per_node: int) -> list[dict]:
    nodes = sorted({s.node for s in samples})
    items = [namespace_object(f"team-{number}", OptInPolicy()) for number in range(40)]
    items += [{"kind": "Node", "metadata": {"name": n}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus_per_node)}}}
              for n in nodes]
    for s in samples:
        name = s.pod.name if s.pod else f"idle-{s.node}-{s.gpu}"
        items.append({"kind": "Pod", "metadata": {
            "name": name, "namespace": f"team-{hash(name) % 40}",
            "labels": {"app": name.rsplit("-", 1)[0], "pod-template-hash": "abc12"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name.rsplit('-', 1)[0]}-abc12", "controller": True}]},
            "spec": {"nodeName": s.node if s.pod else "", "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running" if s.pod else "Pending"}})
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=8)
    args = parser.parse_args()
    policy = default_policy()
    now = datetime.now(timezone.utc)
    samples = generate_fleet(FleetSpec(nodes=args.nodes, gpus_per_node=args.pods_per_node, profile="skewed", seed=3))
    objects = objects_for(samples, args.pods_per_node)
    snapshot = build_snapshot(aggregate_samples(samples), taken_at=now, newest_sample_at=now)
    fleet = fleet_heat(snapshot, policy.heat, now=now, staleness_limit_seconds=120)
    rng = random.Random(1)
    window = {n.name: WindowStats(n.gpu_util, n.gpu_util - rng.uniform(0, 8), 1.0) for n in fleet.nodes}
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    started = time.perf_counter()
    cluster = cluster_from_objects(objects, policy.placement)
    parsed = time.perf_counter()
    plan = plan_evictions(fleet=fleet, snapshot=snapshot, windows={"utilisation": window}, cluster=cluster,
                          ledger=LedgerState(), policy=policy.descheduler, now=now)
    done = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(cluster.nodes)} nodes, {len(cluster.pods)} pods, {len(plan.hot_nodes)} sustained-hot nodes")
    print(f"parse cluster {parsed - started:.2f}s + plan {done - parsed:.2f}s = {done - started:.2f}s (target <= 5 s); "
          f"{len(plan.evictions)} evictions, {len(plan.skipped)} skipped")
    print(f"peak RSS {rss:.0f} MB (inputs built before timing: {rss_before:.0f} MB; target <= 500 MB at 5,000 nodes, 800 MB at 15,000)")


if __name__ == "__main__":
    main()
