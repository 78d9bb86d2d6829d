"""Benchmark: admission latency and throughput over TLS as production runs it — the cluster view on
and a mix of pods, most of them advised — against a raw-ASGI null webhook on the same stack.

Three servers, uvicorn over TLS in a process each: a raw ASGI app that decodes the review and
echoes an allowed answer (the floor), the same as a FastAPI route, and the real webhook (child
reader, cache, ledger) with a cluster view of the synthetic fleet: three pools (one tainted),
node labels, GPUs held by the pods the telemetry shows, images listed (`node_images`, so the
time-to-ready ranking runs). The client is wrk cycling through the
mix below at N connections. Bookings are settled at each refresh (`settleSeconds: 0`) so the
fleet does not fill during the run: a real fleet admits tens of pods a second, not thousands.
The share of answers that carried node advice is read from the webhook's own /metrics.
Targets (issue 34): at concurrency 8, p99 ≤ 2× the raw-ASGI null and throughput ≥ 50 % of it.

    .venv/bin/python bench/admission_mix.py [--seconds 10] [--concurrency 8] [--nodes 5000]
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.webhook_latency import WRK_DONE, SyntheticRead, load_arguments, null_app, run_wrk, served, tls_bundle  # noqa: E402
from scoring.policy import default_policy  # noqa: E402
from sim.fleet import FleetSpec, generate_fleet  # noqa: E402

POOLS = ("h100", "h100", "l40s", "reserved")
"""Node i is in pool POOLS[i % 4]: half H100, a quarter L40S, a quarter tainted `reserved`."""


def pool_of(index: int) -> str:
    return POOLS[index % len(POOLS)]


def _pod(name: str, *, gpus: int = 1, labels: dict | None = None, spec: dict | None = None) -> dict:
    owner = f"{name}-6d9f8c7b5"
    limits = {"cpu": "8", "memory": "64Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": f"{owner}-", "namespace": "serving",
        "labels": {"app.kubernetes.io/name": name, "pod-template-hash": "6d9f8c7b5", **(labels or {})},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": f"uid-{name}",
                             "controller": True}]},
        "spec": {"containers": [{"name": "server", "image": f"registry.example/{name}:1",
                                 "resources": {"limits": limits}}], **(spec or {})}}


def pod_mix() -> list[dict]:
    """Twenty pods in the shares a serving cluster admits them (an assumption, written before
    measuring): replicas of eight Deployments, some pinned to a pool or tolerating the tainted
    one, some multi-GPU, one training worker, and pods that need no GPU at all."""
    pinned = {"nodeSelector": {"pool": "l40s"}}
    tolerant = {"tolerations": [{"key": "reserved", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
                "nodeSelector": {"pool": "reserved"}}
    pods = [_pod(f"chat-{i}") for i in range(8)]                          # 40 %: plain 1-GPU replicas
    pods += [_pod(f"embed-{i}", spec=pinned) for i in range(3)]          # 15 %: pinned to a pool
    pods += [_pod(f"batch-{i}", spec=tolerant) for i in range(2)]        # 10 %: the tainted pool
    pods += [_pod("llm-70b", gpus=4), _pod("llm-405b", gpus=8)]          # 10 %: multi-GPU replicas
    pods += [_pod("train", gpus=4, labels={"training.kubeflow.org/job-name": "ft-1"},
                  spec={"subdomain": "ft-1"})]                           # 5 %: a training worker
    pods += [_pod(f"web-{i}", gpus=0) for i in range(4)]                 # 20 %: no GPU
    return pods


def node_images(index: int) -> list[dict]:
    """What a serving node's kubelet lists (an assumption, written before measuring): the images
    of two chat and one embedding Deployment, as replicas left them, among 20 images of 10 GB, so
    that the time-to-ready ranking runs for every GPU pod of the mix."""
    held = [f"chat-{index % 8}", f"chat-{(index + 3) % 8}", f"embed-{index % 3}"]
    held += [f"old-{index % 50 + k}" for k in range(20 - len(held))]
    return [{"names": [f"registry.example/{name}:1"], "sizeBytes": 10 * 10**9} for name in held]


def review(uid: int, pod: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"uid-{uid}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "serving",
        "operation": "CREATE", "object": pod}}


class FixedClusterView:
    """The cluster view the webhook's watch would hold for the synthetic fleet: its nodes (labels,
    the tainted pool, GPU allocatable) and the GPUs its busy pods hold. Same three calls as
    `webhook.cluster_watch.ClusterWatch`; nothing changes while the bench runs."""

    def __init__(self, nodes: int) -> None:
        from datetime import datetime, timezone

        from scoring.cluster.claims import EMPTY_BOOK
        from scoring.cluster.feasibility import node_facts
        from scoring.cluster.view import ClusterView

        policy = default_policy().placement
        spec = FleetSpec(nodes=nodes, gpus_per_node=8, profile="skewed", seed=7)
        held = Counter(sample.node for sample in generate_fleet(spec) if sample.util_percent > 0)
        facts = {}
        for i in range(nodes):
            name, pool = spec.node_name(i), pool_of(i)
            taints = [{"key": "reserved", "value": "batch", "effect": "NoSchedule"}] if pool == "reserved" else []
            facts[name] = node_facts({"metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "pool": pool, "nvidia.com/gpu.clique": f"clique-{i // 4}"}},
                "spec": {"taints": taints}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"},
                                                       "images": node_images(i)}}, policy)
        self.view = ClusterView(facts, {n: {"nvidia.com/gpu": c} for n, c in held.items()}, frozenset(),
                                datetime.now(timezone.utc), EMPTY_BOOK)
        self.live_claims = EMPTY_BOOK
        self.relists = Counter()
        """Relists by kind after an expired watch, as `ClusterWatch.relists`: none, nothing is watched."""

    def freeze(self):
        return self.view

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def raw_asgi_null():
    """The floor: decode the review, answer allowed; no framework."""
    import orjson

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        uid = orjson.loads(body)["request"]["uid"] if scope["method"] == "POST" else ""
        answer = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": {"uid": uid, "allowed": True}})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})

    return app


def webhook_app(nodes: int):
    from webhook.app import create_app
    from webhook.cache import SnapshotCache
    from webhook.refresher import ChildProcessReader

    policy = default_policy()
    policy = replace(policy, placement=replace(policy.placement, settle_seconds=0.0))
    reader = ChildProcessReader(policy, read=SyntheticRead(nodes))
    cache = SnapshotCache(reader, policy, on_stop=reader.close)
    return create_app(policy, cache, cluster=FixedClusterView(nodes))


def serve(kind: str, nodes: int, port: int, cert: str, key: str) -> None:
    from webhook.serve import tls_server, tune_process_for_latency

    app = {"raw": raw_asgi_null, "fastapi": null_app}.get(kind, lambda: webhook_app(nodes))()
    server, _ = tls_server(app, tls_cert=cert, tls_key=key, host="127.0.0.1", port=port, log_level="warning")
    tune_process_for_latency()
    server.run()


WRK_SCRIPT = """
bodies = {%s}
prepared = {}
counter = 0
init = function(args)  -- each request is formatted once, so cycling costs the client nothing
  for i, body in ipairs(bodies) do
    prepared[i] = wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
  end
end
request = function()
  counter = counter + 1
  return prepared[(counter %% #prepared) + 1]
end
""" + WRK_DONE.replace("%", "%%")


def load_with_wrk(url: str, seconds: int, concurrency: int, workdir: Path) -> dict[str, float]:
    bodies = ", ".join(f"[[{json.dumps(review(i, pod))}]]" for i, pod in enumerate(pod_mix()))
    script = workdir / "mix.lua"
    script.write_text(WRK_SCRIPT % bodies)
    return run_wrk(script, url, seconds, concurrency)


def outcomes(url: str, ca: str) -> Counter:
    """The webhook's own count of answers by outcome and reason, from its /metrics."""
    text = httpx.get(url + "/metrics", verify=ssl.create_default_context(cafile=ca), timeout=10).text
    counts: Counter = Counter()
    for line in text.splitlines():
        if line.startswith("gpu_balancer_admissions_total{"):
            reason = re.search(r'reason="([^"]*)"', line)
            counts[reason.group(1) if reason else "?"] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def main() -> None:
    args = load_arguments(__doc__.splitlines()[0], ("raw", "fastapi", "webhook"), nodes=5000,
                          nodes_help="nodes in the fleet and the cluster view")
    if args.serve:
        serve(args.serve, args.nodes, args.port, args.cert, args.key)
        return
    results: dict[str, dict[str, float]] = {}
    answers: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        paths = tls_bundle(Path(tmp))
        for kind in ("raw", "fastapi", "webhook"):
            with served(__file__, kind, args.nodes, paths) as url:
                results[kind] = load_with_wrk(url + "/mutate", args.seconds, args.concurrency, Path(tmp))
                if kind == "webhook":
                    answers = outcomes(url, str(paths["ca.crt"]))
    print(f"wrk, {args.seconds}s at concurrency {args.concurrency}, over TLS, a mix of {len(pod_mix())} pods; "
          f"webhook with the cluster view of {args.nodes} nodes:")
    for name, r in results.items():
        print(f"  {name:8s} p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
              f"throughput {r['throughput']:6.0f}/s  errors {r['errors']:.0f}")
    raw, real = results["raw"], results["webhook"]
    total = sum(answers.values()) or 1
    print(f"  answers by reason: {dict(answers.most_common())}; advised (steered) {answers['steered'] / total:.0%}, "
          f"of GPU pods {answers['steered'] / max(1, total - answers['not-gpu']):.0%}")
    print(f"  webhook/raw-ASGI: p99 ratio {real['p99_ms'] / raw['p99_ms']:.2f} (target <= 2.0), "
          f"throughput {real['throughput'] / raw['throughput']:.0%} (target >= 50%)")
    print(f"  webhook/FastAPI null: p99 ratio {real['p99_ms'] / results['fastapi']['p99_ms']:.2f}, "
          f"throughput {real['throughput'] / results['fastapi']['throughput']:.0%}")


if __name__ == "__main__":
    main()
