"""How often `sim/scheduler.py` puts a pending pod where the real kube-scheduler does, over
generated cluster states on the real control plane the tests build (controlplane/build.sh).

    .venv/bin/python bench/scheduler_agreement.py [--states 500] [--seed 1] [--batch 10]

A state is a few nodes (capacity, labels, taints, cordons), pods already bound to them, and one
pending pod (requests, nodeSelector, node affinity, tolerations, topology spread, pod
anti-affinity). States run `--batch` at a time, each fenced to its own nodes by a nodeSelector
(a filter, so no score changes) and its own zone names. Agreement: the real node is one of the
model's top-scoring feasible nodes (the real scheduler breaks ties at random), or neither finds a
feasible node. Every disagreement is named by kind. Does I/O: starts a control plane.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.explain import context_from_list, nodes_from_list  # noqa: E402
from sim.scheduler import evaluate  # noqa: E402
from tests.control_plane.plane import ControlPlane, build_binaries  # noqa: E402

FENCE = "agreement.gpu-balancer.io/state"
PRODUCTS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")


def _node(rng: random.Random, state: str, index: int) -> dict:
    name = f"{state}-n{index}"
    capacity = {"cpu": str(rng.choice((16, 32, 64))), "memory": f"{rng.choice((64, 128, 256))}Gi",
                "pods": "110", "nvidia.com/gpu": str(rng.choice((4, 8)))}
    taints = []
    if rng.random() < 0.2:
        taints.append({"key": "dedicated", "value": "training", "effect": "NoSchedule"})
    if rng.random() < 0.2:
        taints.append({"key": "busy", "value": "true", "effect": "PreferNoSchedule"})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, FENCE: state, "type": "kwok",
                                    "topology.kubernetes.io/zone": f"{state}-z{index % 2}",
                                    "nvidia.com/gpu.product": rng.choice(PRODUCTS)}},
            "spec": {"taints": taints, "unschedulable": rng.random() < 0.1},
            "status": {"capacity": capacity, "allocatable": capacity}}


def _container(rng: random.Random, gpus: int) -> dict:
    requests = {"cpu": f"{rng.choice((0, 500, 2000, 8000))}m", "memory": f"{rng.choice((0, 1, 8, 32))}Gi"}
    requests = {k: v for k, v in requests.items() if not v.startswith("0")}
    resources = {"requests": requests} if requests else {}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"name": "main", "image": "registry.example/app:1", "resources": resources}


def _bound_pod(rng: random.Random, state: str, index: int, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"bound-{index}", "namespace": state, "labels": {"app": rng.choice("ab")}},
            "spec": {"nodeName": node, "containers": [_container(rng, rng.choice((0, 1, 2)))],
                     "tolerations": [{"operator": "Exists"}]}}


def _pending_pod(rng: random.Random, state: str) -> dict:
    app = rng.choice("ab")
    spec: dict = {"nodeSelector": {FENCE: state}, "containers": [_container(rng, rng.choice((0, 1, 2, 4)))]}
    if rng.random() < 0.3:
        spec["nodeSelector"]["nvidia.com/gpu.product"] = rng.choice(PRODUCTS)
    affinity: dict = {}
    if rng.random() < 0.5:
        affinity["nodeAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": rng.choice((1, 10, 50, 100)), "preference": {"matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": [rng.choice(PRODUCTS)]}]}}]}
    if rng.random() < 0.3:
        term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
        affinity["podAntiAffinity"] = ({"requiredDuringSchedulingIgnoredDuringExecution": [term]}
                                       if rng.random() < 0.4 else
                                       {"preferredDuringSchedulingIgnoredDuringExecution": [
                                           {"weight": rng.choice((1, 50, 100)), "podAffinityTerm": term}]})
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.4:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "labelSelector": {"matchLabels": {"app": app}},
            "topologyKey": rng.choice(("kubernetes.io/hostname", "topology.kubernetes.io/zone")),
            "whenUnsatisfiable": rng.choice(("ScheduleAnyway", "DoNotSchedule"))}]
    if rng.random() < 0.5:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pending", "namespace": state, "labels": {"app": app}}, "spec": spec}


def generate(rng: random.Random, state: str) -> tuple[list[dict], list[dict], dict]:
    nodes = [_node(rng, state, i) for i in range(rng.randint(2, 5))]
    bound = [_bound_pod(rng, state, i, rng.choice(nodes)["metadata"]["name"]) for i in range(rng.randint(0, 6))]
    return nodes, bound, _pending_pod(rng, state)


def model_verdict(pending: dict, nodes: list[dict], bound: list[dict]) -> tuple[set[str], list]:
    """The model's top-scoring feasible nodes for the pod, and all its verdicts."""
    document = {"kind": "List", "items": [dict(n, kind="Node") for n in nodes] + [dict(p, kind="Pod") for p in bound]}
    verdicts = evaluate(pending, nodes_from_list(document), context=context_from_list(document))
    feasible = [v for v in verdicts if v.feasible]
    if not feasible:
        return set(), verdicts
    best = max(v.total for v in feasible)
    return {v.name for v in feasible if v.total >= best - 1e-9}, verdicts


def _outcome(pod: dict) -> str | None:
    """The node it was bound to, "" if the scheduler found none, None while undecided."""
    if pod["spec"].get("nodeName"):
        return pod["spec"]["nodeName"]
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return ""
    return None


def run_batch(plane: ControlPlane, rng: random.Random, first: int, size: int) -> list[dict]:
    states = {f"s{first + i:04d}": generate(rng, f"s{first + i:04d}") for i in range(size)}
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s}} for s in states]
    plane.apply(namespaces + [n for nodes, _, _ in states.values() for n in nodes])
    for state in states:
        plane.wait_for(lambda: plane.kubectl("get", "sa", "default", "-n", state, check=False).returncode == 0,
                       f"ServiceAccount of {state}")
    plane.apply([p for _, bound, _ in states.values() for p in bound])
    time.sleep(1.0)  # the scheduler's cache takes the bound pods before the pending ones arrive
    plane.apply([pending for _, _, pending in states.values()])
    deadline, outcomes = time.monotonic() + 60, {}
    while len(outcomes) < len(states) and time.monotonic() < deadline:
        for state in states:
            if state not in outcomes:
                decided = _outcome(plane.get("pod", "pending", "-n", state))
                if decided is not None:
                    outcomes[state] = decided
        time.sleep(0.3)
    results = []
    for state, (nodes, bound, _) in states.items():
        served = {"items": plane.get("nodes", "-l", f"{FENCE}={state}")["items"]}
        pods = plane.get("pods", "-n", state)["items"]
        pending = next(p for p in pods if p["metadata"]["name"] == "pending")
        pending = dict(pending, spec={k: v for k, v in pending["spec"].items() if k != "nodeName"})
        best, verdicts = model_verdict(pending, served["items"], [p for p in pods if p["metadata"]["name"] != "pending"])
        real = outcomes.get(state)
        results.append({"state": state, "real": real, "model": sorted(best), "verdicts": verdicts})
    plane.kubectl("delete", "namespace", *states, "--wait=false")
    plane.kubectl("delete", "nodes", "-l", f"{FENCE} in ({','.join(states)})", "--wait=false")
    return results


def kind_of(result: dict) -> str | None:
    real, best, verdicts = result["real"], set(result["model"]), result["verdicts"]
    if real is None:
        return "real scheduler undecided after 60 s"
    if real == "" and not best:
        return None
    if real == "":
        return "model feasible, real unschedulable"
    if real in best:
        return None
    verdict = next((v for v in verdicts if v.name == real), None)
    if verdict is None or not verdict.feasible:
        return f"model filtered the real node ({verdict.failed_filter if verdict else 'unknown node'})"
    top = next(v for v in verdicts if v.name in best)
    plugins = sorted(k for k in set(top.scores) | set(verdict.scores) if top.scores.get(k) != verdict.scores.get(k))
    return f"another node scored higher (scores differ in {', '.join(plugins) or 'nothing'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--show", type=int, default=3, help="disagreements printed in full")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    plane = ControlPlane(build_binaries(), Path(tempfile.mkdtemp(prefix="gpu-balancer-agreement-")))
    started = time.monotonic()
    try:
        plane.start()
        results = []
        for first in range(0, args.states, args.batch):
            results += run_batch(plane, rng, first, min(args.batch, args.states - first))
    finally:
        plane.remove()
    kinds = Counter(kind_of(r) for r in results)
    agreed = kinds.pop(None, 0)
    bound = sum(1 for r in results if r["real"])
    print(f"{agreed} of {len(results)} states agree ({100 * agreed / len(results):.1f} %); "
          f"{bound} bound by the real scheduler, {len(results) - bound} unschedulable or undecided; "
          f"seed {args.seed}, {time.monotonic() - started:.0f} s")
    for kind, count in kinds.most_common():
        print(f"  {count:4d}  {kind}")
    shown = [r for r in results if kind_of(r)][: args.show]
    for r in shown:
        print(json.dumps({"state": r["state"], "real": r["real"], "model": r["model"], "verdicts": [
            {"node": v.name, "feasible": v.feasible, "filter": v.failed_filter, "scores": v.scores, "total": v.total}
            for v in r["verdicts"]]}))


if __name__ == "__main__":
    main()
