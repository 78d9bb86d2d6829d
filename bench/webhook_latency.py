"""Benchmark: admission latency and throughput over TLS, against a null webhook on the same stack.

Both servers are uvicorn over TLS in their own process; the client is wrk with N connections
busy. The null webhook parses the review and echoes an allowed response; the real one runs the
full decision against a synthetic fleet. Also measures the pure per-admission cost at 10 and
5,000 nodes (in process) and the largest patch. Targets (issue 3): p99 ≤ 2× null and ≤ 10 ms at
concurrency 8; ≥ 1,000 admissions/s; cost at 5,000 nodes within 1.2× of 10 nodes; patch ≤ 4 KiB.

    .venv/bin/python bench/webhook_latency.py [--seconds 10] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from certs.files import write_bundle  # noqa: E402
from certs.issue import issue_ca, issue_serving  # noqa: E402
from gpu_balancer.local_prometheus import free_port  # noqa: E402
from scoring.ingest.series import aggregate_samples, build_snapshot  # noqa: E402
from scoring.policy import default_policy  # noqa: E402
from sim.fleet import FleetSpec, generate_fleet  # noqa: E402

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {
    "generateName": "llm-7b-6d9f8c7b5-", "namespace": "serving",
    "labels": {"app.kubernetes.io/name": "llm-7b", "pod-template-hash": "6d9f8c7b5"},
    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-7b-6d9f8c7b5",
                         "uid": "4a7b", "controller": True}]},
    "spec": {"containers": [{"name": "server", "image": "registry.example/llm:1",
                             "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}}}]}}


def review(uid: int) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"uid-{uid}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "serving",
        "operation": "CREATE", "object": POD}}


def fleet_snapshot(nodes: int):
    samples = generate_fleet(FleetSpec(nodes=nodes, gpus_per_node=8, profile="skewed", seed=7))
    now = datetime.now(timezone.utc)
    return build_snapshot(aggregate_samples(samples), taken_at=now, newest_sample_at=now)


class SyntheticRead:
    """Stands in for the Prometheus read in the webhook's child process: the fleet, re-dated."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.snapshot = None

    def __call__(self):
        if self.snapshot is None:
            self.snapshot = fleet_snapshot(self.nodes)
        return replace(self.snapshot, newest_sample_at=datetime.now(timezone.utc))


def null_app():
    app = FastAPI()

    @app.post("/mutate")
    async def mutate(request: Request):
        body = json.loads(await request.body())
        return JSONResponse({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                             "response": {"uid": body["request"]["uid"], "allowed": True}})

    return app


def real_app(nodes: int):
    from webhook.app import create_app
    from webhook.cache import SnapshotCache
    from webhook.refresher import ChildProcessReader

    policy = default_policy()
    # The real cache (refreshing every few seconds) and app. As in `gpu-balancer webhook`, the
    # read and the assessment run in a child process; only the read is a synthetic fleet, re-dated
    # at each refresh, instead of Prometheus.
    reader = ChildProcessReader(policy, read=SyntheticRead(nodes))
    cache = SnapshotCache(reader, policy, on_stop=reader.close)
    return create_app(policy, cache)


def serve(kind: str, nodes: int, port: int, cert: str, key: str) -> None:
    from webhook.serve import tls_server, tune_process_for_latency

    app = null_app() if kind == "null" else real_app(nodes)
    server, _ = tls_server(app, tls_cert=cert, tls_key=key, host="127.0.0.1", port=port, log_level="warning")
    tune_process_for_latency()  # both servers, as `gpu-balancer webhook` runs
    server.run()


WRK_DONE = """
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %f %f %d\\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), summary.errors.status + summary.errors.connect
    + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"""
"""The end of every load script: the figures `run_wrk` reads, on one RESULT line."""

WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[%s]]
""" + WRK_DONE.replace("%", "%%")


def load_with_wrk(url: str, seconds: int, concurrency: int, workdir: Path) -> dict[str, float]:
    """wrk (C, keep-alive, TLS) drives the load so the client is not the bottleneck."""
    script = workdir / "post.lua"
    script.write_text(WRK_SCRIPT % json.dumps(review(1)))
    return run_wrk(script, url, seconds, concurrency)


def run_wrk(script: Path, url: str, seconds: int, concurrency: int) -> dict[str, float]:
    """One wrk run of a script whose `done` prints the RESULT line; its figures."""
    output = subprocess.run(["wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", "-s", str(script), url],
                            capture_output=True, text=True, check=True).stdout
    _, requests, duration_us, p50_us, p99_us, errors = next(
        line for line in output.splitlines() if line.startswith("RESULT")).split()
    return {"throughput": int(requests) / (int(duration_us) / 1e6), "p50_ms": float(p50_us) / 1000,
            "p99_ms": float(p99_us) / 1000, "errors": int(errors)}


@contextmanager
def served(script: str, kind: str, nodes: int, paths: dict[str, Path]) -> Iterator[str]:
    """`script --serve kind` in a process of its own over TLS, until it answers (the webhook: with
    fresh telemetry); yields its URL and stops it after."""
    port = free_port()
    server = subprocess.Popen([sys.executable, script, "--serve", kind, "--nodes", str(nodes), "--port", str(port),
                               "--cert", str(paths["tls.crt"]), "--key", str(paths["tls.key"])])
    url = f"https://127.0.0.1:{port}"
    try:
        wait_until_serving(url, str(paths["ca.crt"]), telemetry=kind == "webhook")
        yield url
    finally:
        server.terminate()
        server.wait()


def tls_bundle(directory: Path) -> dict[str, Path]:
    """A CA and a serving certificate for 127.0.0.1, written to `directory`."""
    ca = issue_ca()
    return write_bundle(directory, ca, issue_serving(ca, ["localhost"], ip_addresses=(ipaddress.ip_address("127.0.0.1"),)))


def largest_patch(url: str, ca: str) -> int:
    with httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=ca), timeout=10) as client:
        sizes = []
        for uid in range(20):
            answer = client.post("/mutate", json=review(uid)).json()
            sizes.append(len(base64.b64decode(answer["response"].get("patch", ""))))
    return max(sizes)


def wait_until_serving(url: str, ca: str, *, telemetry: bool) -> None:
    """Until the server answers (and, for the webhook, holds fresh telemetry: full answers only)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(url + ("/readyz" if telemetry else "/"), timeout=1,
                               verify=ssl.create_default_context(cafile=ca))
            if not telemetry or answer.json()["telemetry"] == "fresh":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not come up")


def admission_loop(nodes: int):
    """A function running N decode + decide steps in steady state (each promise is settled by
    the next telemetry, so every admission gets full advice); it returns the last decision."""
    from webhook.admit import decide
    from webhook.refresh import assess
    from webhook.ledger import SteeringLedger
    from webhook.review import decode_review

    policy = default_policy()
    now = datetime.now(timezone.utc)
    index = assess(fleet_snapshot(nodes), policy, now).index
    body = json.dumps(review(1)).encode()
    ledger = SteeringLedger(policy.placement.settle_seconds)
    settled = now + timedelta(seconds=policy.placement.settle_seconds)

    def run(repeats: int):
        for _ in range(repeats):
            decision = decide(decode_review(body), index=index, telemetry_time=settled, snapshot_age_seconds=1.0,
                              ledger=ledger, policy=policy.placement, now=now)
        return decision

    run(1)  # ranks the snapshot once, as the first admission after a refresh does
    return run


def per_admission_costs(sizes: tuple[int, ...], blocks: int = 9, repeats: int = 500) -> dict[int, tuple[float, int]]:
    """Median per-admission time per fleet size, in alternating blocks so that the machine's
    drifts hit every size alike; and how many nodes the last admission preferred."""
    loops = {size: admission_loop(size) for size in sizes}
    times: dict[int, list[float]] = {size: [] for size in sizes}
    last = {}
    for _ in range(blocks):
        for size, run in loops.items():
            started = time.perf_counter()
            last[size] = run(repeats)
            times[size].append((time.perf_counter() - started) / repeats)
    result = {}
    for size in sizes:
        first_part = last[size].detail.split(";")[0]
        terms = first_part.count("(") if first_part.startswith("preferred") else 0
        result[size] = (sorted(times[size])[blocks // 2], terms)
    return result


def load_arguments(description: str, kinds: tuple[str, ...], *, nodes: int, nodes_help: str = argparse.SUPPRESS
                   ) -> argparse.Namespace:
    """The arguments of a load bench: its own, and those it starts itself with (`--serve KIND`).
    Exits when wrk, the load generator, is missing (and the bench is not serving)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=int, default=10, help="load duration per server")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=nodes, help=nodes_help)
    parser.add_argument("--serve", choices=kinds, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.serve and shutil.which("wrk") is None:
        sys.exit("wrk is needed as the load generator: apt-get install wrk")
    return args


def main() -> None:
    args = load_arguments(__doc__.splitlines()[0], ("null", "webhook"), nodes=10)
    if args.serve:
        serve(args.serve, args.nodes, args.port, args.cert, args.key)
        return
    results: dict[str, dict[str, float]] = {}
    patches: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = tls_bundle(Path(tmp))
        for kind, nodes in (("null", 10), ("webhook", 10), ("webhook", 5000)):
            with served(__file__, kind, nodes, paths) as url:
                if kind == "webhook":
                    patches[nodes] = largest_patch(url, str(paths["ca.crt"]))
                results[f"{kind} ({nodes} nodes)"] = load_with_wrk(url + "/mutate", args.seconds,
                                                                   args.concurrency, Path(tmp))

    print(f"wrk, {args.seconds}s at concurrency {args.concurrency}, over TLS (uvicorn, one process each):")
    for name, r in results.items():
        print(f"  {name:22s} p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
              f"throughput {r['throughput']:6.0f}/s  errors {r['errors']:.0f}")
    null_p99 = results["null (10 nodes)"]["p99_ms"]
    for nodes in (10, 5000):
        real = results[f"webhook ({nodes} nodes)"]
        print(f"  {nodes} nodes: p99 ratio webhook/null {real['p99_ms'] / null_p99:.2f} (target <= 2.0), "
              f"p99 {real['p99_ms']:.2f} ms (target <= 10), throughput {real['throughput']:.0f}/s (target >= 1000)")
    print(f"  largest patch: {max(patches.values())} bytes at {patches} nodes (target <= 4096)")
    costs = per_admission_costs((10, 5000))
    (small, small_terms), (large, large_terms) = costs[10], costs[5000]
    print("per-admission decision cost (decode + decide, in process, steady state, median of 9 alternating blocks): "
          f"10 nodes {small * 1e6:.0f} us "
          f"({small_terms} node terms), 5000 nodes {large * 1e6:.0f} us ({large_terms} node terms), "
          f"ratio {large / small:.2f} (target <= 1.2)")


if __name__ == "__main__":
    main()
