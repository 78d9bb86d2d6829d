"""The placement policies compared by the simulator. gpu-balancer's runs the production webhook
decision and descheduler plan on telemetry the simulator lags like a real exporter (pure, no I/O)."""

from __future__ import annotations

import json
import math
import random
from statistics import fmean
from collections import Counter, deque
from datetime import datetime, timedelta, timezone

from descheduler.cluster import cluster_from_objects
from descheduler.ledger import EvictionRecord, LedgerState
from descheduler import step
from scoring.claims import ClaimBook, book_from_objects, class_of, pod_claims
from scoring.cluster_state import LISTED, ClusterState
from scoring.feasibility import constraints_of, why_infeasible
from scoring.errors import TelemetryError
from scoring.heat import fleet_heat
from scoring.policy import BalancerPolicy, default_policy
from scoring.queries import topology_keys
from scoring.readiness import startup_costs
from scoring import dcgm
from scoring.serving import (ServingReplica, SustainedServing, latency_label, pressure_of, target_for,
                             with_peers, with_serving, workload_of_pod)
from scoring.series import Series, aggregate_samples, build_snapshot, ksm_label_name
from scoring.telemetry import ClusterSnapshot, GpuSample, PodRef, WindowStats
from scoring.workloads import gpu_request
from scoring.view import BOOKING_ANNOTATION, Binding, ClusterView
from sim.engine import cluster_objects, recreate
from sim.world_state import SimPod, World, gpu_count
from sim.llm.telemetry import MIB
from sim.llm.state import GpuReport, ServingState
from sim.llm.world import gpu_of_node
from sim.node_state import pod_key
from sim.framework import MAX_SCORE, NodeVerdict
from sim.scheduler import choose, evaluate
from webhook.admit import decide
from webhook.cache import telemetry_of
from webhook.ledger import SteeringLedger
from webhook.review import decode_review, patched, pod_review

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
POLICIES = ("stock", "stock-gpu-scored", "lownodeutilization", "gpu-balancer", "oracle")
SERVING_POLICY = "gpu-balancer-serving"
"""gpu-balancer reading the replicas' serving series too; run where the scenario's replicas export them."""


SERVING_WORLD_POLICIES = ("stock", "spread", "lownodeutilization-actual", "load-aware", "gpu-balancer",
                          SERVING_POLICY, "coolest-node")
"""The serving world's comparison: the peers as their users run them (issue 31's names). The
oracle runs there as `coolest-node`: it places on true current load, booked at once, but on the
latency objective it lost to stock on 9 of 16 scenario-seeds at contention 1 (BENCHMARKS), so it is
no oracle."""


def policies_for(scenario) -> tuple[str, ...]:
    """The policies a scenario compares: the serving-aware one only where replicas export serving
    series (elsewhere it is gpu-balancer itself, to the last number)."""
    if scenario.llm:
        return SERVING_WORLD_POLICIES
    if scenario.inference.serving_metrics:
        return (*POLICIES[:4], SERVING_POLICY, POLICIES[4])
    return POLICIES


def telemetry_lag(world: World) -> int:
    """Ticks between a reading and what a policy sees of it (collect interval plus scrape)."""
    return math.ceil(world.scenario.telemetry_lag_seconds / world.scenario.tick_seconds)


def sim_time(world: World) -> datetime:
    return EPOCH + timedelta(seconds=world.now_seconds)


def observed_samples(world: World, lag: int = 0, busy: dcgm.BusyMeasure = dcgm.BusyMeasure()) -> list[GpuSample]:
    """Per-GPU readings as an exporter reported them `lag` ticks ago (pods mapped to their GPUs),
    each GPU's busy share read from the gauge `busy` names."""
    if world.scenario.llm:
        return _served_samples(world, lag, busy)
    observed = world.gpu_util[-1 - lag]
    samples = []
    for name in observed:
        for index in range(world.units[name]):
            util, key = observed[name].get(index, (0.0, None))
            used = 500 + 600 * util if key else 500.0
            samples.append(GpuSample(node=name, gpu=str(index), uuid=f"GPU-{name}-{index}",
                                     model="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
                                     util_percent=util, fb_used_mib=used, fb_free_mib=81_000 - used,
                                     temperature_c=35 + 0.45 * util, power_w=70 + 6 * util,
                                     pod=PodRef(*key.split("/", 1)) if key else None))
    return samples


_PROFILED = {dcgm.GR_ENGINE_ACTIVE: "sm_active", dcgm.SM_ACTIVE: "sm_active", dcgm.SM_OCCUPANCY: "sm_occupancy",
             dcgm.PIPE_TENSOR_ACTIVE: "pipe_tensor_active", dcgm.DRAM_ACTIVE: "dram_active"}
"""Which of a `GpuReport`'s profiling fields each busy gauge reads."""


def _reads_kernel_share(busy: dcgm.BusyMeasure) -> bool:
    """Whether `busy` reads what the world's GPU_UTIL reading is: GPU_UTIL itself, or
    GR_ENGINE_ACTIVE at full scale (the same kernel share in this model)."""
    return busy.gauge is None or (busy.gauge == dcgm.GR_ENGINE_ACTIVE and busy.full_scale == 1)


def _busy_share(util: float, report: GpuReport, busy: dcgm.BusyMeasure) -> float:
    """A GPU's busy share as `busy` reads it: the exporter's GPU_UTIL reading unless another
    profiling gauge, or another full scale, is asked for."""
    if _reads_kernel_share(busy):
        return util
    return min(100.0, 100.0 * getattr(report, _PROFILED[busy.gauge]) / busy.full_scale)


def _served_samples(world: World, lag: int, busy: dcgm.BusyMeasure) -> list[GpuSample]:
    """The serving world's exporter readings: GPU_UTIL from the engine's kernel share (or the
    profiling gauge `busy` names), FB_USED from the server's preallocation, power from its
    activity; a missed scrape has no sample."""
    observed, readings = world.gpu_util[-1 - lag], world.gpu_readings[-1 - lag]
    samples = []
    for name, gpus in observed.items():
        gpu = gpu_of_node(world, name)
        model, memory_mib = gpu.aliases[0], gpu.memory_bytes / MIB
        for index, reported in gpus.items():
            if reported is None:
                continue
            util, key = reported
            report = readings[name][index]
            samples.append(GpuSample(node=name, gpu=str(index), uuid=f"GPU-{name}-{index}", model=model,
                                     pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
                                     util_percent=_busy_share(util, report, busy), fb_used_mib=report.fb_used_mib,
                                     fb_free_mib=memory_mib - report.fb_used_mib,
                                     temperature_c=report.temperature_c, power_w=report.power_w,
                                     clock_reasons=report.clock_reasons,
                                     pod=PodRef(*key.split("/", 1)) if key else None))
    return samples


def _requested_units(node) -> float:
    return sum(q for r, q in node.requested.items() if r.startswith("nvidia.com/") or class_of(r))


def claim_book(world: World, policy: BalancerPolicy) -> ClaimBook:
    """The world's claim templates as the webhook reads them, with its own policy's GPU classes."""
    return book_from_objects(world.templates.values(), policy.placement)


def watched_view(world: World, policy: BalancerPolicy, now: datetime) -> ClusterView:
    """The view the webhook's watch would hold: the world's objects listed into the same cluster
    state (`scoring.cluster_state`) production reduces them in."""
    by_kind: dict[str, list[dict]] = {kind: [] for kind in LISTED.values()}
    for obj in cluster_objects(world):
        if (kind := LISTED.get(obj.get("kind", ""))) is not None:
            by_kind[kind].append(obj)
    state = ClusterState(policy.placement)
    for kind, objects in by_kind.items():
        state.replace(kind, objects, now)
    return state.view(now)


def preferred_nodes(pod: dict) -> tuple[str, ...]:
    """The node names of the pod's preferred node-affinity terms (the advice's)."""
    terms = pod.get("spec", {}).get("affinity", {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    return tuple(f["values"][0] for t in terms for f in t.get("preference", {}).get("matchFields", [])
                 if f.get("key") == "metadata.name" and f.get("values"))


class Stock:
    """The default profile: GPUs filtered on, never scored."""

    name = "stock"
    score_gpus = False

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def place(self, world: World, pod: SimPod) -> str | None:
        return choose(evaluate(pod.obj, list(world.nodes.values()), score_gpus=self.score_gpus,
                               context=world.context), self.rng)

    def bound(self, world: World, pod: SimPod, node: str) -> None:
        """Told of every binding, as a watch of pods would show it."""

    def deschedule(self, world: World) -> None:
        pass

    def advice_metrics(self) -> dict[str, float]:
        return {}


class StockGpuScored(Stock):
    """NodeResourcesFit also scoring `nvidia.com/gpu` (LeastAllocated): the cheap alternative."""

    name = "stock-gpu-scored"
    score_gpus = True


class LowNodeUtilization(Stock):
    """Stock placement plus an allocation-based descheduler in the manner of kubernetes-sigs/descheduler's
    LowNodeUtilization on `nvidia.com/gpu`: it sees requests, not measured load."""

    name = "lownodeutilization"
    high, low, per_run = 0.9, 0.5, 4

    def deschedule(self, world: World) -> None:
        share = {n: _requested_units(node) / world.units[n] for n, node in world.nodes.items() if n not in world.down}
        evict_from_overutilised(world, share, self.low, self.high, self.per_run, self.rng)


def evict_from_overutilised(world: World, share: dict[str, float], low: float, high: float, per_run: int,
                            rng: random.Random) -> None:
    """LowNodeUtilization's move: while some node is under `low`, evict a random inference pod
    from each node over `high`, most utilised first, `per_run` in all."""
    if not any(v < low for v in share.values()):
        return
    evicted = 0
    for name in sorted(share, key=lambda n: -share[n]):
        if share[name] <= high or evicted >= per_run:
            break
        victims = [p for p in world.pods.values() if p.node == name and p.service is not None]
        if victims:
            recreate(world, rng.choice(victims))
            world.evictions += 1
            evicted += 1


class Spread(Stock):
    """The stock scheduler with what a platform team writes on every inference Deployment: a
    hostname `topologySpreadConstraints`, maxSkew 1, ScheduleAnyway, over the app's pods."""

    name = "spread"

    def place(self, world: World, pod: SimPod) -> str | None:
        spec = pod.obj["spec"]
        if pod.service is not None and "topologySpreadConstraints" not in spec:
            spec["topologySpreadConstraints"] = [{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": pod.service}}}]
        return super().place(world, pod)


class LowNodeUtilizationActual(Stock):
    """kubernetes-sigs/descheduler's LowNodeUtilization reading actual utilisation from Prometheus
    (`metricsUtilization.prometheus`): a node under `low` % of its GPUs' reported utilisation is
    underutilised, over `high` % overutilised; while both kinds exist, it evicts from the most
    utilised nodes, `per_run` pods a run. Its thresholds, 20 % and 70 % of GPU utilisation: assumption."""

    name = "lownodeutilization-actual"
    low, high, per_run = 20.0, 70.0, 4

    def deschedule(self, world: World) -> None:
        lag = telemetry_lag(world)
        if len(world.history) <= lag:
            return
        observed = {n: u for n, u in world.history[-1 - lag].items() if n not in world.down}
        evict_from_overutilised(world, observed, self.low, self.high, self.per_run, self.rng)


class LoadAware(Stock):
    """scheduler-plugins' Trimaran TargetLoadPacking as a platform team would point it at GPUs: its
    Score on each node's mean reported GPU utilisation over the metrics window, plus the incoming
    pod's predicted use and that of pods bound too recently to show in the metrics, in place of
    the NodeResourcesFit and BalancedAllocation scores (its README's profile disables both).

    A pod's predicted use is its GPUs at 100 %: the GPU form of the plugin's CPU limit, and what
    GPU_UTIL reads while a replica serves anything."""

    name = "load-aware"
    target = 40.0
    """targetUtilization: the plugin's default (scheduler-plugins pkg/trimaran/targetloadpacking README)."""
    reporting_seconds = 60.0
    """A pod bound this recently is predicted, not measured (the plugin's metricsAgentReportingIntervalSeconds)."""
    window_seconds = 300.0
    """The load-watcher's averaging window: assumption (5 minutes, a common Prometheus rate window)."""
    replaced = ("NodeResourcesFit", "BalancedAllocation")

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.recent: deque[tuple[float, str, float]] = deque()  # (bound at, node, predicted %)

    def place(self, world: World, pod: SimPod) -> str | None:
        verdicts = evaluate(pod.obj, list(world.nodes.values()), context=world.context)
        utilisation = self._measured(world)
        since = world.now_seconds - self.reporting_seconds - telemetry_lag(world) * world.scenario.tick_seconds
        while self.recent and self.recent[0][0] < since:
            self.recent.popleft()
        missing = Counter()
        for _, node, predicted in self.recent:
            missing[node] += predicted
        rescored, weights = [], world.context.profile.weights
        for v in verdicts:
            if not v.feasible:
                rescored.append(v)
                continue
            predicted = utilisation.get(v.name, 0.0) + self._predicted(world, pod, v.name) + missing[v.name]
            kept = v.total - sum(weights.get(p, 0) * v.scores.get(p, 0.0) for p in self.replaced)
            rescored.append(NodeVerdict(v.name, True, None, v.scores, kept + target_load_packing(predicted, self.target)))
        return choose(rescored, self.rng)

    def bound(self, world: World, pod: SimPod, node: str) -> None:
        self.recent.append((world.now_seconds, node, self._predicted(world, pod, node)))

    def _measured(self, world: World) -> dict[str, float]:
        """Each node's mean reported GPU utilisation over the window, as the metrics show it now."""
        lag = telemetry_lag(world)
        steps = max(1, round(self.window_seconds / world.scenario.tick_seconds))
        window = world.history[max(0, len(world.history) - lag - steps):max(0, len(world.history) - lag)]
        totals: Counter = Counter()
        for tick in window:
            totals.update(tick)
        return {n: totals[n] / len(window) for n in totals}

    @staticmethod
    def _predicted(world: World, pod: SimPod, node: str) -> float:
        return 100.0 * gpu_count(pod) / max(1, world.units[node])


def target_load_packing(predicted_percent: float, target_percent: float) -> int:
    """TargetLoadPacking's node score: rising from `target` at idle to 100 at the target (packing),
    falling to 0 at 100 % (spreading among hot nodes), 0 beyond."""
    if predicted_percent > target_percent:
        if predicted_percent > 100:
            return 0
        return _go_round(target_percent * (100 - predicted_percent) / (100 - target_percent))
    return _go_round((MAX_SCORE - target_percent) * predicted_percent / target_percent + target_percent)


def _go_round(x: float) -> int:
    """Go's math.Round for the non-negative scores here: halves away from zero (Python rounds to even)."""
    return math.floor(x + 0.5)


class Oracle(Stock):
    """Full knowledge of true current load: each pod goes to the feasible node that stays coolest."""

    name = "oracle"

    def place(self, world: World, pod: SimPod) -> str | None:
        verdicts = [v for v in evaluate(pod.obj, list(world.nodes.values()), context=world.context) if v.feasible]
        if not verdicts:
            return None
        load: Counter = Counter()
        for other in world.pods.values():
            if other.node is not None:
                load[other.node] += min(1.0, other.load) * gpu_count(other)
        if pod.training_job:  # pack a job into the clique its first worker chose, when there is room
            placed = [p.node for p in world.pods.values() if p.training_job == pod.training_job and p.node]
            cliques = {world.nodes[n].labels["nvidia.com/gpu.clique"] for n in placed}
            same = [v for v in verdicts if world.nodes[v.name].labels["nvidia.com/gpu.clique"] in cliques]
            verdicts = same or verdicts
        expected = pod.load or self._share(world, pod)
        chosen = min(verdicts, key=lambda v: ((load[v.name] + expected * gpu_count(pod)) / world.units[v.name],
                                              _requested_units(world.nodes[v.name]), v.name)).name
        pod.load = expected  # booked at once, so the next pod of a burst sees it
        return chosen

    @staticmethod
    def _share(world: World, pod: SimPod) -> float:
        if pod.service is None:
            return 0.95
        running = world.running(pod.service)
        return sum(p.load for p in running) / (len(running) + 1) if running else 0.5


class CoolestNode(Oracle):
    """`Oracle` by its honest name: each pod on the feasible node with the least true load."""

    name = "coolest-node"


class GpuBalancer(Stock):
    """Stock scheduling of pods mutated by the real webhook decision, plus the real descheduler plan.

    Admissions alternate over `webhookReplicas` replicas, each with its own ledger; they share
    only what the API server shows: the cluster view and bindings, `bindDelaySeconds` late."""

    name = "gpu-balancer"
    reads_serving = False
    moves_on_serving = True
    """With `reads_serving`: the descheduler also moves replicas off slow-serving nodes."""

    def __init__(self, rng: random.Random, policy: BalancerPolicy | None = None) -> None:
        super().__init__(rng)
        self.policy = policy or default_policy()
        self.ledgers: list[SteeringLedger] = []
        self.evictions = LedgerState()
        self._telemetry_tick = -1
        self._telemetry = None
        self._admissions = 0
        self._bindings: deque[tuple[int, Binding]] = deque()
        self._advised = self._feasible = self._followed = 0
        self._preferred: dict[str, tuple[str, ...]] = {}
        self._book: ClaimBook | None = None

    def _claims(self, world: World) -> ClaimBook:
        if self._book is None:
            self._book = claim_book(world, self.policy)
        return self._book

    def _ledgers(self, world: World) -> list[SteeringLedger]:
        if not self.ledgers:
            settle = self.policy.placement.settle_seconds
            self.ledgers = [SteeringLedger(settle, replica=f"r{i}-") for i in range(world.scenario.webhook_replicas)]
        return self.ledgers

    def telemetry(self, world: World):
        """Snapshot, heat and ranking from what an exporter scraped `lag` seconds ago."""
        self._deliver_bindings(world)
        if self._telemetry_tick == world.tick and self._telemetry is not None:
            return self._telemetry
        if (heat := self.heat(world)) is None:
            return None
        snapshot, fleet = heat
        telemetry = telemetry_of(snapshot, fleet)
        view = watched_view(world, self.policy, sim_time(world))
        for ledger in self._ledgers(world):
            ledger.prepare(telemetry.index, view)
        self._telemetry, self._telemetry_tick = (snapshot, fleet, telemetry, view), world.tick
        return self._telemetry

    def heat(self, world: World):
        """The snapshot and the fleet's heat from what an exporter scraped `lag` seconds ago; None
        before the first scrape."""
        lag = telemetry_lag(world)
        if len(world.gpu_util) <= lag:
            return None
        samples = observed_samples(world, lag, self.policy.telemetry.busy)
        now = sim_time(world)
        taken = now - timedelta(seconds=lag * world.scenario.tick_seconds)
        keys = topology_keys(self.policy)
        # kube-state-metrics' kube_node_labels, as a cluster exporting the topology labels shows them.
        node_labels = [Series({"node": n.name, **{ksm_label_name(k): n.labels[k] for k in keys if k in n.labels}}, 1.0)
                       for n in world.nodes.values()]
        snapshot = build_snapshot(aggregate_samples(samples), taken_at=now, newest_sample_at=taken,
                                  node_labels=node_labels, topology_keys=keys)
        if self.reads_serving and len(world.serving) > lag:
            snapshot = with_serving(snapshot, self.serving_replicas(world.serving[-1 - lag]))
        return snapshot, fleet_heat(snapshot, self.policy.heat, now=now,
                                    staleness_limit_seconds=self.policy.telemetry.staleness_limit_seconds)

    def serving_replicas(self, observed: dict[str, tuple[str, float, float]]) -> dict[str, tuple[ServingReplica, ...]]:
        """What the serving queries would return for these replicas: vLLM's queue and TTFT p95."""
        serving = self.policy.serving
        vllm = next(server for server in serving.servers if server.name == "vllm")
        label = latency_label(vllm, serving.quantile)
        per_node: dict[str, list[ServingReplica]] = {}
        for key, state in observed.items():
            namespace, name = key.split("/", 1)
            target = target_for(serving, server="vllm", namespace=namespace, workload="")
            per_node.setdefault(state.node, []).append(ServingReplica(
                namespace, name, "vllm", state.waiting, state.ttft_p95_s, label, target, workload_of_pod(name),
                kv_usage=state.kv_usage, running=state.running))
        return with_peers(per_node)

    def _serving_window(self, history: list[dict[str, ServingState]], steps: int,
                        snapshot) -> dict[tuple[str, str], SustainedServing]:
        """Per replica in the snapshot, the low quantile of its pressure over the window."""
        out = {}
        for node in snapshot.nodes:
            for replica in node.serving:
                key = f"{replica.namespace}/{replica.pod}"
                stats = _window_stats([pressure_of(state.ttft_p95_s, state.waiting, replica.target)
                                       for state in (tick[key] for tick in history if key in tick)],
                                      steps, self.policy.descheduler.low_quantile)
                if stats:
                    out[replica.namespace, replica.pod] = SustainedServing(stats.low, stats.coverage)
        return out

    def place(self, world: World, pod: SimPod) -> str | None:
        telemetry = self.telemetry(world)
        now = sim_time(world)
        key = pod_key(pod.obj)
        if "gpu-balancer.io/advice" not in pod.obj["metadata"].get("annotations", {}):
            fresh = telemetry[2] if telemetry else None
            ledgers = self._ledgers(world)
            ledger = ledgers[self._admissions % len(ledgers)]
            self._admissions += 1
            constraints = constraints_of(pod.obj, self.policy.placement,
                                         pod_claims(pod.obj, self._claims(world), self.policy.placement))
            decision = decide(decode_review(json.dumps(pod_review(pod.obj)).encode()),
                              index=fresh.index if fresh else None,
                              telemetry_time=fresh.sampled_at if fresh else None,
                              snapshot_age_seconds=fresh.age_seconds(now) if fresh else None,
                              ledger=ledger, policy=self.policy.placement, now=now, claims=self._claims(world),
                              startup=startup_costs(self.policy))
            pod.obj = patched(pod.obj, decision.review)
            preferred = preferred_nodes(pod.obj)
            if preferred and telemetry is not None:
                view = telemetry[3]
                self._advised += 1
                self._feasible += all(n in view.nodes and why_infeasible(constraints, view.nodes[n]) is None
                                      for n in preferred)
                self._preferred[key] = preferred
        node = super().place(world, pod)
        if node is not None and key in self._preferred:
            self._followed += node in self._preferred.pop(key)
        return node

    def bound(self, world: World, pod: SimPod, node: str) -> None:
        delay = math.ceil(world.scenario.bind_delay_seconds / world.scenario.tick_seconds)
        booking = pod.obj["metadata"].get("annotations", {}).get(BOOKING_ANNOTATION, "")
        request = gpu_request(pod.obj, self.policy.placement, pod_claims(pod.obj, self._claims(world), self.policy.placement))
        units = request.units if request else ()
        self._bindings.append((world.tick + delay, Binding(pod_key(pod.obj), node, units, sim_time(world), booking)))
        self._deliver_bindings(world)

    def _deliver_bindings(self, world: World) -> None:
        while self._bindings and self._bindings[0][0] <= world.tick:
            _, binding = self._bindings.popleft()
            for ledger in self._ledgers(world):
                ledger.bind(binding)

    def advice_metrics(self) -> dict[str, float]:
        if not self._advised:
            return {}
        return {"advice_feasible": self._feasible / self._advised, "advice_followed": self._followed / self._advised}

    def deschedule(self, world: World) -> None:
        """The production descheduler's step (`descheduler.step`) over the world's exporters."""
        if self.telemetry(world) is None:
            return
        source = SimulatedTelemetry(self, world)
        try:
            found = step.assess(source, self.policy, lambda: sim_time(world))
        except TelemetryError:
            return  # stale or empty, as a real run would find it: no evictions
        cluster = cluster_from_objects(cluster_objects(world), self.policy.placement)
        plan = step.plan(source, found, cluster=cluster, ledger=self.evictions, policy=self.policy)
        records = []
        for eviction in plan.evictions:
            pod = world.pods.get(f"{eviction.namespace}/{eviction.pod}")
            if pod is not None:
                recreate(world, pod)
                world.evictions += 1
                records.append(EvictionRecord(eviction.workload, eviction.namespace, eviction.pod, eviction.node,
                                              found.at))
        self.evictions = self.evictions.with_evictions(records, found.at, self.policy.descheduler)

    def _busy_history(self, world: World, start: int, end: int) -> list[dict[str, float]]:
        """Ticks `start` to `end`: each node's mean busy share, as the window's query reads it
        under the policy's busy gauge (the world's own history where that is GPU_UTIL's reading)."""
        busy = self.policy.telemetry.busy
        if not world.scenario.llm or _reads_kernel_share(busy):
            return world.history[start:end]
        return [{name: fmean(shares) if (shares := [_busy_share(seen[0], readings[name][i], busy)
                                                   for i, seen in gpus.items() if seen is not None]) else 0.0
                 for name, gpus in observed.items()}
                for observed, readings in zip(world.gpu_util[start:end], world.gpu_readings[start:end])]


class SimulatedTelemetry:
    """What the descheduler reads, from the simulated world's exporters as a policy sees them
    (`telemetry_lag` late): `descheduler.step.DeschedulerTelemetry`."""

    where = "the simulated exporters"

    def __init__(self, balancer: GpuBalancer, world: World) -> None:
        self._balancer, self._world = balancer, world
        d = balancer.policy.descheduler
        self._steps = max(1, int(d.window_seconds / world.scenario.tick_seconds))
        self._lag = telemetry_lag(world)
        self._quantile = d.low_quantile

    def _ticks(self, length: int) -> tuple[int, int]:
        """The window's ticks (start, end) of a per-tick series that long, as seen `lag` late."""
        return max(0, length - self._lag - self._steps), length - self._lag

    def _span(self, series: list) -> list:
        start, end = self._ticks(len(series))
        return series[start:end]

    def snapshot(self) -> ClusterSnapshot:
        return self._balancer.telemetry(self._world)[0]

    def window(self) -> dict[str, WindowStats]:
        world = self._world
        history = self._balancer._busy_history(world, *self._ticks(len(world.history)))
        found = {name: _window_stats([h[name] for h in history if name in h], self._steps, self._quantile)
                 for name in world.nodes}
        return {name: stats for name, stats in found.items() if stats}

    def serving_window(self, snapshot: ClusterSnapshot) -> dict[tuple[str, str], SustainedServing]:
        if not (self._balancer.reads_serving and self._balancer.moves_on_serving):
            return {}
        return self._balancer._serving_window(self._span(self._world.serving), self._steps, snapshot)

    def throttle_window(self) -> dict[str, WindowStats]:
        if not self._world.gpu_readings:
            return {}
        readings = self._span(self._world.gpu_readings)
        found = {name: _window_stats(_throttled_counts(readings, name), self._steps, self._quantile)
                 for name in self._world.nodes}
        return {name: stats for name, stats in found.items() if stats}


class GpuBalancerServing(GpuBalancer):
    """gpu-balancer whose heat model and descheduler also read the replicas' serving series."""

    name = SERVING_POLICY
    reads_serving = True


def _window_stats(values: list[float], steps: int, quantile: float) -> WindowStats | None:
    """A window's mean, low quantile (nearest rank, as the descheduler's windowed queries take
    it) and coverage; None without a sample."""
    if not values:
        return None
    ordered = sorted(values)
    return WindowStats(sum(ordered) / len(ordered), ordered[min(len(ordered) - 1, int(quantile * len(ordered)))],
                       len(ordered) / steps)


def _throttled_counts(readings: list[dict[str, dict[int, GpuReport]]], node: str) -> list[float]:
    """Per tick, how many of the node's GPUs a power cap or heat held down; a tick with none has
    no sample, as `count by` returns no series then."""
    counts = (sum(dcgm.has_reason(r.clock_reasons, dcgm.HELD_DOWN_REASONS) for r in tick.get(node, {}).values()) for tick in readings)
    return [float(c) for c in counts if c]


def make_policy(name: str, seed: int, balancer: BalancerPolicy | None = None):
    """The named policy for a seed; gpu-balancer's two under `balancer` where given (a variant)."""
    rng = random.Random(seed * 7 + 3)
    if balancer is not None and name in ("gpu-balancer", SERVING_POLICY):
        return (GpuBalancer if name == "gpu-balancer" else GpuBalancerServing)(rng, balancer)
    return POLICY_CLASSES[name](rng)


POLICY_CLASSES = {"stock": Stock, "stock-gpu-scored": StockGpuScored, "lownodeutilization": LowNodeUtilization,
                  "spread": Spread, LowNodeUtilizationActual.name: LowNodeUtilizationActual, LoadAware.name: LoadAware,
                  "gpu-balancer": GpuBalancer, SERVING_POLICY: GpuBalancerServing, "oracle": Oracle,
                  CoolestNode.name: CoolestNode}
"""Every policy by its name: the one registry the runs and `simulate --list` read."""
POLICY_ABOUT = {
    "stock": "kube-scheduler's default profile: GPUs filtered on, never scored",
    "stock-gpu-scored": "stock, with NodeResourcesFit also scoring nvidia.com/gpu (LeastAllocated)",
    "lownodeutilization": "stock plus the descheduler's LowNodeUtilization on allocation",
    "spread": "stock plus a hostname topology spread on every inference Deployment",
    "lownodeutilization-actual": "stock plus LowNodeUtilization on the GPU utilisation Prometheus reports",
    "load-aware": "scheduler-plugins' Trimaran TargetLoadPacking on mean GPU utilisation",
    "gpu-balancer": "this product: the real webhook's advice and the real descheduler's plan",
    SERVING_POLICY: "gpu-balancer also reading the replicas' serving series",
    "oracle": "queue-law world's reference: each pod on the feasible node that stays coolest",
    "coolest-node": "serving world's reference: each pod on the node with the least true load",
}
"""One line on each policy, for `simulate --list`."""
