"""`gpu-balancer demo`: the problem and what the product does about it, on one machine (does I/O:
servers, Prometheus, files).

One simulated fleet and one seed throughout, in the serving world (every replica a
continuous-batching LLM server fitted to published measurements). An hour of stock scheduling,
and one node reports an XID. fake-dcgm serves the fleet; a real Prometheus scrapes it, with 15
minutes of backfilled history so that the heat is sustained. A burst of replicas goes through the
real webhook over TLS and the scheduler model places each pod with and without the advice; the
descheduler's dry-run names the pod it would move; both fleets run on until the new replicas
serve; the policies are then compared over three seeds and the report written.
"""

from __future__ import annotations

import copy
import ipaddress
import math
import ssl
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean, pstdev

import httpx
from prometheus_client.parser import text_string_to_metric_families

from certs.files import write_bundle
from certs.issue import issue_ca, issue_serving
from descheduler.cluster import cluster_from_objects
from descheduler.run import report_as_table, run_once
from gpu_balancer.backfill import backfilled_tsdb
from gpu_balancer.local_prometheus import LocalPrometheus, PrometheusNotInstalled, ScrapeTarget, free_port
from gpu_balancer.status_view import heat_as_table
from scoring import dcgm
from scoring.cluster.claims import EMPTY_BOOK
from scoring.cluster.view import ClusterView
from scoring.heat import FleetHeat, Tier, fleet_heat
from scoring.ingest.prometheus import SnapshotReader, TelemetryError, connect
from scoring.ingest.series import series_from_families, snapshot_from_readings
from scoring.ingest.telemetry import GpuSample
from scoring.policy import BalancerPolicy, default_policy
from sim.dcgm_text import render_exposition
from sim.engine import (bind, build_world, cluster_objects, delete_pod, measure, service_pod,
                        step_workloads)
from sim.fake_dcgm import make_server, serve_in_background
from sim.llm.state import RequestTally
from sim.policies import Stock, make_policy, observed_samples, watched_view
from sim.report import as_table, signed
from sim.run import compare
from sim.scenario import FleetShape, InferenceShape, Scenario, named
from sim.scheduler import choose, evaluate
from sim.seeds import aggregate
from sim.world_state import SimPod, World
from webhook.app import create_app
from webhook.cache import SnapshotCache, assessing
from webhook.review import patched, pod_review
from webhook.serve import tls_server

XID_UNHEALTHY = 79  # "GPU has fallen off the bus": dcgm-exporter reports it, the heat model marks the node
HISTORY_SECONDS = 15 * 60
COMPARED_SEEDS = 3
SERVING_AFTER_START_SECONDS = 300


def demo_scenario(nodes: int, gpus: int) -> Scenario:
    """`llm-fleet` on the demo's fleet size for an hour: small enough to compare every policy over
    three seeds within the demo's time."""
    return replace(named("llm-fleet"), name="demo-llm-fleet", hours=1.0, fleet=FleetShape(nodes=nodes, gpus_per_node=gpus),
                   inference=InferenceShape(services=max(4, nodes)))


def advance(world: World, seed: int, ticks: int) -> World:
    """Ticks of traffic, autoscaling and rollouts, new pods placed by the stock scheduler."""
    stock = make_policy("stock", seed)
    first = world.tick + 1 if world.history else 0
    for tick in range(first, first + ticks):
        world.tick = tick
        step_workloads(world)
        for pod in world.pending():
            if (node := stock.place(world, pod)) is not None:
                bind(world, pod, node)
        measure(world)
    return world


def with_one_xid(samples: list[GpuSample]) -> tuple[list[GpuSample], str]:
    """The samples with an XID on one GPU of the coolest node (where stock would send pods)."""
    util: dict[str, list[float]] = {}
    for s in samples:
        util.setdefault(s.node, []).append(s.util_percent or 0.0)
    sick = min(util, key=lambda n: (fmean(util[n]), n))
    return [replace(s, last_xid=XID_UNHEALTHY) if s.node == sick and s.gpu == "0" else s for s in samples], sick


@dataclass
class Telemetry:
    read: object
    query: object | None
    """None without Prometheus: nothing to run the descheduler's windowed queries against."""
    policy: BalancerPolicy
    """The policy, pointed at the local Prometheus when there is one."""


@contextmanager
def serve_telemetry(stack: ExitStack, body: str, policy: BalancerPolicy, expected: int) -> Iterator[Telemetry]:
    exporter = make_server(body, port=0)
    serve_in_background(exporter)
    stack.callback(exporter.shutdown)
    try:
        storage = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-balancer-demo-tsdb-")))
        now = time.time()
        history = backfilled_tsdb(body, storage, start=now - HISTORY_SECONDS, end=now - 20)
        prometheus = stack.enter_context(LocalPrometheus([ScrapeTarget(f"127.0.0.1:{exporter.server_port}")],
                                                         storage=storage if history else None))
        prometheus.wait_for(dcgm.FB_USED, at_least=expected)
        policy = replace(policy, prometheus=replace(policy.prometheus, url=prometheus.url))
        query = connect(policy.prometheus)
        print(f"   fake-dcgm serves it on http://127.0.0.1:{exporter.server_port}/metrics;\n   a real Prometheus "
              f"scrapes it at {prometheus.url}" + (", with 15 minutes of backfilled history" if history else ""))
        yield Telemetry(SnapshotReader(query, policy), query, policy)
    except PrometheusNotInstalled:
        readings = series_from_families(text_string_to_metric_families(body))
        print("   Prometheus is not installed here: telemetry is read straight from fake-dcgm's text "
              "(no history, so the descheduler step is skipped)")
        yield Telemetry(lambda: snapshot_from_readings(readings, taken_at=datetime.now(timezone.utc),
                                                       newest_sample_at=datetime.now(timezone.utc)), None, policy)


def fleet_summary(world: World) -> dict[str, float]:
    """GPU utilisation across nodes now, and the requests' latency since the tally was last reset."""
    utils = list(measure(world).node_util.values())
    tally = world.llm.tally
    return {"cov": pstdev(utils) / fmean(utils) if fmean(utils) else 0.0, "max": max(utils),
            "hot": float(sum(u >= 80 for u in utils)), "ttft_p99": tally.ttft.quantile(0.99),
            "ttft_p50": tally.ttft.quantile(0.5),
            "slo": tally.within_slo / tally.requests if tally.requests else 1.0}


def move(world: World, client: httpx.Client, pod_name: str, rng) -> str:
    """What the eviction would lead to: the controller's replacement pod, advised by the webhook."""
    victim = next((p for p in world.pods.values() if p.obj["metadata"]["name"] == pod_name), None)
    if victim is None or victim.service is None:
        return f"({pod_name} is not a service replica here: not moved)"
    delete_pod(world, victim)
    replacement = service_pod(world, world.services[victim.service])
    answer = client.post("/mutate", json=pod_review(replacement.obj)).json()
    replacement.obj = patched(replacement.obj, answer) if "patch" in answer["response"] else replacement.obj
    node = choose(evaluate(replacement.obj, list(world.nodes.values())), rng)
    if node is not None:
        bind(world, replacement, node)
    return (f"if evicted, its ReplicaSet recreates it as {replacement.obj['metadata']['name']}, which the\n   webhook "
            f"advises and the scheduler model places on {node or 'no node'}")


def _where(fleet: FleetHeat, node: str | None) -> str:
    if node is None:
        return "Pending (no node fits)"
    heat = next((n for n in fleet.nodes if n.name == node), None)
    return node if heat is None else f"{node} ({heat.gpu_util:.0f} %, {heat.tier})"


def run_demo(*, nodes: int, gpus: int, seed: int, colour: bool, burst: int = 12,
             report_dir: str = "reports/demo") -> int:
    started = time.monotonic()
    scenario = demo_scenario(nodes, gpus)
    policy = default_policy()
    print(f"gpu-balancer demo: {nodes} nodes x {gpus} GPUs, seed {seed}, all on this machine (no cluster).\n")
    print("1. The problem. After an hour under the stock scheduler, which sees GPUs only as a count,\n   some "
          "nodes are hot and others half idle.")
    world = advance(build_world(scenario, seed), seed, 120)  # an hour of 30-second ticks
    samples, sick = with_one_xid(observed_samples(world))
    print(f"   On {sick}, the least busy node, one GPU reports XID {XID_UNHEALTHY} (it fell off the bus).")
    body = render_exposition(samples, profiling=True)
    with ExitStack() as stack:
        telemetry = stack.enter_context(serve_telemetry(stack, body, policy, nodes * gpus))
        policy = telemetry.policy
        fleet = fleet_heat(telemetry.read(), policy.heat, now=datetime.now(timezone.utc),
                           staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
        print("   `gpu-balancer status` shows:\n")
        print("   " + heat_as_table(fleet, colour=colour).replace("\n", "\n   "))
        client = stack.enter_context(_webhook(stack, policy, telemetry, _WorldWatch(world, policy)))
        before, stock = _burst(world, fleet, client, seed, burst)
        _dry_run(world, policy, telemetry, client, stock)
    _once_they_serve(before, world, seed)
    _over_time(scenario, list(range(seed, seed + COMPARED_SEEDS)), report_dir)
    print(f"demo finished in {time.monotonic() - started:.0f} s")
    return 0


def _burst(world: World, fleet: FleetHeat, client: httpx.Client, seed: int, burst: int) -> tuple[World, Stock]:
    """Step 2: the busiest service scales out; each new pod goes through the webhook, and lands
    where the scheduler model puts it with and without the patch. Returns the world as the stock
    scheduler alone would have it, and that scheduler."""
    service = max(world.services.values(), key=lambda s: s.demand)
    running = len(world.running(service.name))
    growth = (running + burst) / max(1, running)
    service.demand *= growth  # traffic that needs every new replica, so the autoscaler keeps them
    print(f"\n2. A burst: traffic to {service.name}, the busiest service, grows {growth:.1f}x and it scales from "
          f"{running} to {running + burst} replicas,\n   each new pod sent to the real "
          "webhook over TLS.\n   Where the scheduler model puts each pod, unchanged (stock) and with the "
          "webhook's patch:\n")
    before = copy.deepcopy(world)
    stock = make_policy("stock", seed)
    rows, patched_count = [], 0
    for pod in (service_pod(world, service) for _ in range(burst)):
        key = f"{pod.obj['metadata']['namespace']}/{pod.obj['metadata']['name']}"
        twin = before.pods.setdefault(key, SimPod(copy.deepcopy(pod.obj), pod.service, created_tick=world.tick))
        stock_node = stock.place(before, twin)
        if stock_node is not None:
            bind(before, twin, stock_node)
        answer = client.post("/mutate", json=pod_review(pod.obj)).json()
        if "patch" in answer["response"]:
            pod.obj = patched(pod.obj, answer)
            patched_count += 1
        advised_node = choose(evaluate(pod.obj, list(world.nodes.values())), stock.rng)
        if advised_node is not None:
            bind(world, pod, advised_node)
        rows.append((pod.obj["metadata"]["name"], _where(fleet, stock_node), _where(fleet, advised_node)))
    width = max(len(r[1]) for r in rows) + 2
    print(f"   {'POD':30s} {'STOCK SCHEDULER':{width}s} WITH GPU-BALANCER'S ADVICE")
    for name, a, b in rows:
        print(f"   {name:30s} {a:{width}s} {b}")
    bad = {n.name for n in fleet.nodes if n.tier in (Tier.HOT, Tier.UNHEALTHY)}
    sent = lambda column: sum(1 for r in rows if r[column].split(" ")[0] in bad)  # noqa: E731
    print(f"\n   {patched_count}/{burst} admissions were patched. Pods sent to hot or unhealthy nodes: "
          f"stock {sent(1)}, with the advice {sent(2)}.")
    return before, stock


def _dry_run(world: World, policy: BalancerPolicy, telemetry: Telemetry, client: httpx.Client, stock: Stock) -> None:
    """Step 3: the descheduler's dry-run against the same Prometheus, and where its moves land."""
    print("\n3. The descheduler's dry-run: a node counts as a source only when its heat lasted the\n   "
          "10-minute window.")
    if telemetry.query is None:
        print("   skipped: it needs Prometheus for its windowed queries")
        return
    try:
        report = run_once(policy, query=telemetry.query,
                          cluster=cluster_from_objects(cluster_objects(world), policy.placement),
                          now=lambda: datetime.now(timezone.utc), dry_run=True)
        print("   " + report_as_table(report).replace("\n", "\n   "))
        for moved in (o.eviction for o in report.outcomes if o.result == "dry-run"):
            print("   " + move(world, client, moved.pod, stock.rng))
    except TelemetryError as error:
        print(f"   {error}")


def _once_they_serve(before: World, world: World, seed: int) -> None:
    """Step 4: both fleets advanced until every new replica serves (image pull, weights, engine
    start), then five minutes more, side by side; latency is of the requests in that time."""
    starting = [p.ready_at for w in (before, world) for p in w.pods.values() if p.node and p.service]
    ticks = math.ceil((max(starting, default=0.0) - world.now_seconds) / world.scenario.tick_seconds)
    ticks += math.ceil(SERVING_AFTER_START_SECONDS / world.scenario.tick_seconds)
    minutes = ticks * world.scenario.tick_seconds / 60
    print(f"\n4. The fleet {minutes:.0f} minutes later, once every new replica serves (image pull, weights,\n   "
          "engine start) and five minutes more: the stock scheduler alone, against gpu-balancer's\n   advice plus "
          "the descheduler's move; latency of the requests in those minutes:\n")
    for fleet in (before, world):
        fleet.llm.tally = RequestTally()
    rows = {"stock alone": fleet_summary(advance(before, seed, ticks)),
            "with gpu-balancer": fleet_summary(advance(world, seed, ticks))}
    header = ("util CoV", "hottest %", "hot nodes", "TTFT p50 ms", "TTFT p99 ms", "SLO met %")
    print(f"   {'':20s}" + "".join(f" {h:>11s}" for h in header))
    for name, row in rows.items():
        cells = (f"{row['cov']:.3f}", f"{row['max']:.1f}", f"{row['hot']:.0f}", f"{row['ttft_p50']:.0f}",
                 f"{row['ttft_p99']:.0f}", f"{row['slo']:.2%}")
        print(f"   {name:20s}" + "".join(f" {c:>11s}" for c in cells))
    base, ours = rows.values()
    change = [f"{(ours[k] / base[k] - 1) * 100:+.0f} %" if base[k] else "-"
              for k in ("cov", "max", "hot", "ttft_p50", "ttft_p99")]
    change.append(f"{(ours['slo'] - base['slo']) * 100:+.2f} pt")
    print(f"   {'against stock':20s}" + "".join(f" {c:>11s}" for c in change))


def _over_time(scenario: Scenario, seeds: list[int], report_dir: str) -> None:
    """Step 5: every policy over the scenario's hour and three seeds, and the report written."""
    print(f"\n5. Over time: the policies on this fleet for {scenario.hours:g} simulated hour, seeds {seeds[0]}-{seeds[-1]}, "
          f"the same\n   arrivals for each; every replica a continuous-batching {scenario.serving.model} server on an "
          "H100\n   (README, \"The fleet on this replica\"):\n")
    by_seed = {s: compare(scenario, s) for s in seeds}
    summary = aggregate(by_seed)
    print(as_table(scenario.name, seeds, summary))
    print("\n" + verdict(summary))
    from sim.report_files import write_report  # matplotlib: the `sim` extra, checked at start

    written = write_report(Path(report_dir), scenario, by_seed)
    page = next(p for p in written if p.suffix == ".html")
    print(f"\nreport: open {page} in a browser (pictures inlined);\nalso {', '.join(p.name for p in written if p != page)}")


PEERS = ("stock", "spread", "lownodeutilization-actual", "load-aware")
"""The policies a user could install instead of gpu-balancer (coolest-node is a reference)."""
LOSS_WORDS = "gpu-balancer trails the best peer here"
"""The README's words where it loses ("Where gpu-balancer loses"), so the two cannot drift."""


def verdict(summary: dict[str, dict[str, dict]], metric: str = "ttft_p99_ms") -> str:
    """gpu-balancer's mean TTFT p99 against stock and the best peer, in words, win or lose."""
    ours = summary["gpu-balancer"][metric]["mean"]
    peers = {p: summary[p][metric]["mean"] for p in PEERS if p in summary}
    best = min(peers, key=lambda p: (peers[p], p))
    against = lambda other: (ours / peers[other] - 1) * 100  # noqa: E731
    text = f"   TTFT p99, mean of the seeds: gpu-balancer {signed(against('stock'), 1)} % against stock"
    if best != "stock":
        text += f",\n   {signed(against(best), 1)} % against the best peer ({best})"
    if against(best) > 0:
        return text + f":\n   {LOSS_WORDS} (README, \"Where gpu-balancer loses\", says why)."
    return text + "."


class _WorldWatch:
    """What the webhook's watch of the cluster would hold, read from the simulated world: its nodes
    (with the images their kubelets list) and bound pods, as `ClusterWatch` offers them."""

    def __init__(self, world: World, policy: BalancerPolicy) -> None:
        self._world, self._policy = world, policy
        self.live_claims = EMPTY_BOOK
        self.relists: Counter = Counter()
        """Relists by kind after an expired watch: none, nothing is watched."""

    def freeze(self) -> ClusterView:
        return watched_view(self._world, self._policy, datetime.now(timezone.utc))

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


@contextmanager
def _webhook(stack: ExitStack, policy: BalancerPolicy, telemetry: Telemetry, cluster: _WorldWatch
             ) -> Iterator[httpx.Client]:
    tls_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-balancer-demo-")))
    ca = issue_ca()
    paths = write_bundle(tls_dir, ca, issue_serving(ca, ["localhost"], ip_addresses=(ipaddress.ip_address("127.0.0.1"),)))
    cache = SnapshotCache(assessing(telemetry.read, policy), policy)
    port = free_port()
    server, _ = tls_server(create_app(policy, cache, cluster=cluster), tls_cert=str(paths["tls.crt"]), tls_key=str(paths["tls.key"]),
                           host="127.0.0.1", port=port, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    client = httpx.Client(base_url=f"https://127.0.0.1:{port}", timeout=10,
                          verify=ssl.create_default_context(cafile=str(paths["ca.crt"])))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if client.get("/readyz").json()["telemetry"] == "fresh":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        print(f"\n   The webhook serves TLS on https://127.0.0.1:{port} (a freshly generated CA), telemetry fresh.")
        yield client
    finally:
        client.close()  # first, so that the server's graceful shutdown has no open connection to wait for
        server.should_exit = True
        thread.join(10)
