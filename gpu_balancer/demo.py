"""`gpu-balancer demo`: the whole path on one machine (does I/O: servers, Prometheus, files).

A simulated skewed cluster is served by fake-dcgm and scraped by a real Prometheus (when one is
installed); the real webhook runs over TLS with freshly generated certificates and receives real
AdmissionReviews for a burst of pods, which the scheduler model binds; a descheduler dry-run
follows; then the five-policy comparison and its report.
"""

from __future__ import annotations

import copy
import ipaddress
import ssl
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean, pstdev

import httpx
from prometheus_client.parser import text_string_to_metric_families

from certs.files import write_bundle
from certs.issue import issue_ca, issue_serving
from descheduler.cluster import cluster_from_objects
from descheduler.run import report_as_table, run_once
from gpu_balancer.local_prometheus import LocalPrometheus, PrometheusNotInstalled, ScrapeTarget, free_port
from gpu_balancer.status_view import heat_as_table
from scoring import dcgm
from scoring.heat import fleet_heat
from scoring.policy import default_policy
from scoring.prometheus import SnapshotReader, TelemetryError, connect
from scoring.series import series_from_families, snapshot_from_readings
from sim.dcgm_text import render_exposition
from sim.engine import SimPod, World, bind, build_world, cluster_objects, measure, service_pod, step_workloads
from sim.fake_dcgm import make_server, serve_in_background
from sim.policies import make_policy, observed_samples
from sim.report import as_table, write_report
from sim.run import compare, weighted_quantile
from sim.scenario import FleetShape, InferenceShape, named
from sim.scheduler import choose, evaluate
from webhook.app import create_app
from webhook.cache import SnapshotCache, assessing
from webhook.review import patched, pod_review
from webhook.serve import tls_server


def _summary(world: World) -> dict[str, float]:
    sample = measure(world)
    utils = list(sample.node_util.values())
    return {"node_util_cov": pstdev(utils) / fmean(utils) if fmean(utils) else 0.0, "max_node_util": max(utils),
            "hot_nodes": float(sum(u >= 80 for u in utils)), "p99_latency_ms": weighted_quantile(sample.latencies, 0.99)}


def run_demo(*, nodes: int, gpus: int, seed: int, colour: bool, burst: int = 24,
             report_dir: str = "reports/demo") -> int:
    scenario = replace(named("skewed-inference"), fleet=FleetShape(nodes=nodes, gpus_per_node=gpus),
                       inference=InferenceShape(services=max(4, nodes), mean_demand_fraction=0.3))
    world = build_world(scenario, seed)
    stock = make_policy("stock", seed)
    for tick in range(120):  # an hour under the stock scheduler: replicas pile up where their images are
        world.tick = tick
        step_workloads(world)
        for pod in world.pending():
            if (node := stock.place(world, pod)) is not None:
                bind(world, pod, node)
        measure(world)
    body = render_exposition(observed_samples(world), profiling=True)
    policy = default_policy()
    with ExitStack() as stack:
        exporter = make_server(body, port=0)
        serve_in_background(exporter)
        stack.callback(exporter.shutdown)
        print(f"1. fake-dcgm serves the simulated cluster ({nodes} nodes x {gpus} GPUs, after an hour of stock "
              f"scheduling) on http://127.0.0.1:{exporter.server_port}/metrics")
        try:
            prometheus = stack.enter_context(LocalPrometheus([ScrapeTarget(f"127.0.0.1:{exporter.server_port}")]))
            prometheus.wait_for(dcgm.FB_USED, at_least=nodes * gpus)
            policy = replace(policy, prometheus=replace(policy.prometheus, url=prometheus.url))
            query = connect(policy.prometheus)
            read = SnapshotReader(query, policy)
            print(f"2. a real Prometheus scrapes it at {prometheus.url}")
        except PrometheusNotInstalled:
            query = None
            readings = series_from_families(text_string_to_metric_families(body))
            read = lambda: snapshot_from_readings(readings, taken_at=datetime.now(timezone.utc),  # noqa: E731
                                                  newest_sample_at=datetime.now(timezone.utc))
            print("2. Prometheus is not installed here: the snapshot is read straight from fake-dcgm's text")
        snapshot = read()
        fleet = fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc),
                           staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
        print()
        print(heat_as_table(fleet, colour=colour))

        tls_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-balancer-demo-")))
        ca = issue_ca()
        paths = write_bundle(tls_dir, ca, issue_serving(ca, ["localhost"], ip_addresses=(ipaddress.ip_address("127.0.0.1"),)))
        cache = SnapshotCache(assessing(read, policy), policy)
        port = free_port()
        server, _ = tls_server(create_app(policy, cache), tls_cert=str(paths["tls.crt"]), tls_key=str(paths["tls.key"]),
                               host="127.0.0.1", port=port, log_level="warning")
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        stack.callback(thread.join, 10)
        stack.callback(setattr, server, "should_exit", True)
        client = stack.enter_context(httpx.Client(base_url=f"https://127.0.0.1:{port}", timeout=10,
                                                  verify=ssl.create_default_context(cafile=str(paths["ca.crt"]))))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if client.get("/readyz").json()["telemetry"] == "fresh":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        print(f"\n3. the webhook serves TLS on https://127.0.0.1:{port} with a freshly generated CA; "
              f"a burst of {burst} new replicas arrives")

        service = max(world.services.values(), key=lambda s: s.demand)
        before = copy.deepcopy(world)
        new_pods = [service_pod(world, service) for _ in range(burst)]
        for pod in new_pods:
            twin = before.pods.setdefault(f"{pod.obj['metadata']['namespace']}/{pod.obj['metadata']['name']}",
                                          SimPod(copy.deepcopy(pod.obj), pod.service, created_tick=world.tick))
            if (node := stock.place(before, twin)) is not None:
                bind(before, twin, node)
        advised = 0
        for pod in new_pods:
            answer = client.post("/mutate", json=pod_review(pod.obj)).json()
            if "patch" in answer["response"]:
                pod.obj = patched(pod.obj, answer)
                advised += 1
            if (node := choose(evaluate(pod.obj, list(world.nodes.values())), stock.rng)) is not None:
                bind(world, pod, node)
        example = new_pods[0].obj["metadata"].get("annotations", {}).get("gpu-balancer.io/advice", "-")
        print(f"   {advised}/{burst} AdmissionReviews answered with a patch over TLS; first advice: {example}")
        rows = {"stock scheduler alone": _summary(before), "with gpu-balancer's advice": _summary(world)}
        print(f"\n   {'':30s} {'util CoV':>9s} {'max util %':>11s} {'hot nodes':>10s} {'p99 ms':>8s}")
        for name, row in rows.items():
            print(f"   {name:30s} {row['node_util_cov']:9.3f} {row['max_node_util']:11.1f} {row['hot_nodes']:10.0f} "
                  f"{row['p99_latency_ms']:8.0f}")

        print("\n4. descheduler dry-run (the real plan; Prometheus holds only seconds of history, so the "
              "10-minute window cannot show sustained heat yet):")
        if query is not None:
            try:
                report = run_once(policy, query=query, cluster=cluster_from_objects(cluster_objects(world),
                                                                                    policy.placement),
                                  now=lambda: datetime.now(timezone.utc), dry_run=True)
                print("   " + report_as_table(report).replace("\n", "\n   "))
            except TelemetryError as error:
                print(f"   {error}")
        else:
            print("   skipped: it needs Prometheus for its windowed queries")

    print("\n5. the five policies on the skewed-inference scenario (seed 11), same arrivals:")
    results = compare(named("skewed-inference"), 11)
    print(as_table("skewed-inference", 11, results))
    written = write_report(Path(report_dir), "skewed-inference", 11, results)
    print(f"\nreport: {', '.join(str(p) for p in written)}")
    return 0
