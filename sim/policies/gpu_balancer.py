"""This product in the simulator: the production webhook decision and descheduler plan on telemetry
the simulator lags like a real exporter. Pure, no I/O."""

from __future__ import annotations

import json
import math
import random
from statistics import fmean
from collections import deque
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from descheduler.cluster import cluster_from_objects
from descheduler.ledger import EvictionRecord, LedgerState
from descheduler.proposals import PlannedEviction
from descheduler import step
from descheduler.strategies.base import SERVING, THROTTLING, UTILISATION, serve_window
from scoring import dcgm
from scoring.advice.readiness import startup_costs
from scoring.cluster.claims import ClaimBook, book_from_objects, pod_claims
from scoring.cluster.cluster_state import LISTED, ClusterState
from scoring.cluster.feasibility import constraints_of, why_infeasible
from scoring.cluster.view import BOOKING_ANNOTATION, Binding, ClusterView
from scoring.cluster.workloads import gpu_request
from scoring.errors import TelemetryError
from scoring.heat import fleet_heat
from scoring.ingest.queries import topology_keys
from scoring.ingest.series import Series, aggregate_samples, build_snapshot, ksm_label_name
from scoring.ingest.serving import (ServingReplica, SustainedServing, latency_label, pressure_of, target_for,
                                    with_peers, with_serving, workload_of_pod)
from scoring.ingest.signals import host_cpu, tpot
from scoring.ingest.signals.registry import configured, remembering
from scoring.ingest.telemetry import ClusterSnapshot, GpuSample, WindowStats
from scoring.policy import BalancerPolicy, default_policy
from sim import prestage
from sim.engine import cluster_objects, recreate
from sim.world_state import SimPod, World
from sim.llm.state import GpuReport, ServingState
from sim.node_state import pod_key
from webhook.admit import decide
from webhook.refresh import hand_over, telemetry_of
from webhook.ledger import SteeringLedger
from webhook.review import decode_review, patched, pod_review
from sim.policies.exporters import busy_share, observed_samples, reads_kernel_share, sim_time, telemetry_lag
from sim.policies.stock import Stock


def claim_book(world: World, policy: BalancerPolicy) -> ClaimBook:
    """The world's claim templates as the webhook reads them, with its own policy's GPU classes."""
    return book_from_objects(world.templates.values(), policy.placement)


def watched_view(world: World, policy: BalancerPolicy, now: datetime) -> ClusterView:
    """The view the webhook's watch would hold: the world's objects listed into the same cluster
    state (`scoring.cluster.cluster_state`) production reduces them in."""
    by_kind: dict[str, list[dict]] = {kind: [] for kind in LISTED.values()}
    for obj in cluster_objects(world):
        if (kind := LISTED.get(obj.get("kind", ""))) is not None:
            by_kind[kind].append(obj)
    state = ClusterState(policy.placement)
    for kind, objects in by_kind.items():
        state.replace(kind, objects, now)
    return state.view(now)


def host_rows(world: World, lag: int) -> dict[str, list[Series]]:
    """What the host-CPU signal's queries would answer from node_exporter's and cAdvisor's series,
    where the world has CPU neighbours (`sim.llm.host`); none elsewhere, as a cluster that does not
    scrape them."""
    if len(world.llm.host_readings) <= lag:
        return {}
    readings = world.llm.host_readings[-1 - lag]
    return {host_cpu.WAITING: [Series({"node": n}, r.waiting_share) for n, r in readings.items()],
            host_cpu.THROTTLED: [Series({"node": n}, r.throttled_share) for n, r in readings.items()]}


def tpot_rows(world: World, lag: int, samples: list[GpuSample], window_seconds: float) -> dict[str, list[Series]]:
    """What the TPOT signal's queries would answer (`scoring.ingest.signals.tpot`): each ready
    replica's TPOT, running batch and KV use, each the mean of its ticks over the window, as vLLM's
    series give them; and the GPUs each holds, as dcgm-exporter's pod mapping in `samples` names
    them. None before the first scrape."""
    end = len(world.serving) - lag
    if end <= 0:
        return {}
    span = world.serving[max(0, end - max(1, int(window_seconds / world.scenario.tick_seconds))):end]
    seen: dict[str, list] = {}
    for tick in span:
        for key, state in tick.items():
            if state.tpot_mean_s and state.running is not None:
                seen.setdefault(key, []).append(state)
    model = world.scenario.serving.model
    rows: dict[str, list[Series]] = {tpot.TPOT: [], tpot.LOAD: [], tpot.HELD: []}
    for key, states in seen.items():
        at = dict(zip(("namespace", "pod"), key.split("/", 1)))
        rows[tpot.TPOT].append(Series({**at, "model_name": model}, fmean(s.tpot_mean_s for s in states)))
        rows[tpot.LOAD].append(Series({**at, "figure": "running"}, fmean(s.running for s in states)))
        if kv := [s.kv_usage for s in states if s.kv_usage is not None]:
            rows[tpot.LOAD].append(Series({**at, "figure": "kv"}, fmean(kv)))
    for sample in samples:
        if sample.pod is not None and f"{sample.pod.namespace}/{sample.pod.name}" in seen:
            rows[tpot.HELD].append(Series({"node": sample.node, "gpu": sample.gpu, "modelName": sample.model,
                                           "namespace": sample.pod.namespace, "pod": sample.pod.name}, 1.0))
    return rows


def preferred_nodes(pod: dict) -> tuple[str, ...]:
    """The node names of the pod's preferred node-affinity terms (the advice's)."""
    terms = pod.get("spec", {}).get("affinity", {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    return tuple(f["values"][0] for t in terms for f in t.get("preference", {}).get("matchFields", [])
                 if f.get("key") == "metadata.name" and f.get("values"))


SERVING_POLICY = "gpu-balancer-serving"
"""gpu-balancer reading the replicas' serving series too."""


class GpuBalancer(Stock):
    """Stock scheduling of pods mutated by the real webhook decision, plus the real descheduler plan.

    Admissions alternate over `webhookReplicas` replicas, each with its own ledger; they share
    only what the API server shows: the cluster view and bindings, `bindDelaySeconds` late."""

    name = "gpu-balancer"
    about = "this product as shipped: the real webhook's advice and the real descheduler's plan"
    moves_on_serving = True
    """Where it reads the serving series: the descheduler also moves replicas off slow-serving nodes."""

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
        self._memory: dict[str, deque[tuple[int, list[Series]]]] = {}
        self._staging: prestage.StagedPass | None = None

    def reads_serving(self, world: World) -> bool:
        """Whether its heat model reads the replicas' serving series: as the shipped product, where
        its policy reads them (`serving.enabled`, on by default) and the replicas export them."""
        return self.policy.serving.enabled and world.scenario.inference.serving_metrics

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
        hand_over(telemetry, view, self._ledgers(world))
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
        rows = self._remembered(world, lag, aggregate_samples(samples)) | host_rows(world, lag)
        if self.reads_serving(world) and (window := self._tpot_window()):
            rows |= tpot_rows(world, lag, samples, window)
        snapshot = build_snapshot(rows, taken_at=now,
                                  newest_sample_at=taken, node_labels=node_labels, topology_keys=keys)
        if self.reads_serving(world) and len(world.serving) > lag:
            snapshot = with_serving(snapshot, self.serving_replicas(world.serving[-1 - lag]))
        return snapshot, fleet_heat(snapshot, self.policy.heat, now=now,
                                    staleness_limit_seconds=self.policy.telemetry.staleness_limit_seconds)

    def _tpot_window(self) -> float:
        """The TPOT signal's window where the policy turns it on; 0 (no rows) where it does not."""
        on = [signal for signal in configured(self.policy.heat) if isinstance(signal, tpot.Tpot)]
        return on[0].args.window_seconds if on else 0.0

    def _remembered(self, world: World, lag: int, rows: dict[str, list[Series]]) -> dict[str, list[Series]]:
        """The rows, those a signal remembers (`scoring.ingest.signals.registry.remembering`) as each
        row's highest over its span, as Prometheus' `max_over_time` of the record answers: the
        rules record every tick, so the ticks since the last read are read from the exporters'
        history too."""
        for signal, name, seconds in remembering(self.policy.heat):
            span = int(seconds / world.scenario.tick_seconds)
            kept = self._memory.setdefault(name, deque())
            first = max(kept[-1][0] + 1 if kept else 0, world.tick - span + 1)
            for tick in range(first, world.tick):
                back = lag + world.tick - tick
                if len(world.gpu_util) > back:
                    found = signal.aggregate(observed_samples(world, back, self.policy.telemetry.busy))
                    kept.append((tick, found.get(name, [])))
            if kept and kept[-1][0] == world.tick:
                kept.pop()
            kept.append((world.tick, rows.get(name, [])))
            while kept[0][0] <= world.tick - span:
                kept.popleft()
            highest: dict[tuple, Series] = {}
            for _, found in kept:
                for row in found:
                    key = tuple(sorted(row.labels.items()))
                    if key not in highest or row.value > highest[key].value:
                        highest[key] = row
            rows[name] = list(highest.values())
        return rows

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
        if self.telemetry(world) is None or self._staging is not None:
            return  # no telemetry yet; or the last pass still waits for its pulls (`concurrencyPolicy: Forbid`)
        source = SimulatedTelemetry(self, world)
        try:
            found = step.assess(source, self.policy, lambda: sim_time(world))
        except TelemetryError:
            return  # stale or empty, as a real run would find it: no evictions
        cluster = cluster_from_objects(cluster_objects(world), self.policy.placement)
        plan = step.plan(source, found, cluster=cluster, ledger=self.evictions, policy=self.policy)
        self.carry_out(world, plan.evictions)

    def carry_out(self, world: World, evictions: tuple[PlannedEviction, ...]) -> None:
        """A pass's evictions: at once, or once the images they pre-stage have landed on their
        destinations or the deadline has passed (`sim.prestage`)."""
        self._staging = prestage.stage(world, evictions, self.policy.descheduler.prestage_deadline_seconds)
        if self._staging is None:
            self._evict(world, evictions)

    def tick(self, world: World) -> None:
        """A staged pass's images land as their pulls finish, and its evictions go once it is due."""
        if self._staging is None:
            return
        prestage.land_pulls(world, self._staging)
        if world.tick >= self._staging.due_tick:
            evictions, self._staging = self._staging.evictions, None
            self._evict(world, evictions)

    def _evict(self, world: World, evictions: tuple[PlannedEviction, ...]) -> None:
        """The evictions whose pods are still where the plan found them; the controller makes each
        a replacement."""
        records, at = [], sim_time(world)
        for eviction in evictions:
            pod = world.pods.get(f"{eviction.namespace}/{eviction.pod}")
            if pod is not None and pod.node == eviction.node:
                recreate(world, pod)
                world.evictions += 1
                records.append(EvictionRecord(eviction.workload, eviction.namespace, eviction.pod, eviction.node, at))
        self.evictions = self.evictions.with_evictions(records, at, self.policy.descheduler)

    def _busy_history(self, world: World, start: int, end: int) -> list[dict[str, float]]:
        """Ticks `start` to `end`: each node's mean busy share, as the window's query reads it
        under the policy's busy gauge (the world's own history where that is GPU_UTIL's reading)."""
        busy = self.policy.telemetry.busy
        if reads_kernel_share(busy):
            return world.history[start:end]
        return [{name: fmean(shares) if (shares := [busy_share(seen[0], readings[name][i], busy)
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

    def window(self, name: str, snapshot: ClusterSnapshot) -> Mapping[Any, Any]:
        return serve_window({UTILISATION: self._utilisation, SERVING: lambda: self._serving(snapshot),
                             THROTTLING: self._throttling}, name, "the simulated exporters")

    def _utilisation(self) -> dict[str, WindowStats]:
        world = self._world
        history = self._balancer._busy_history(world, *self._ticks(len(world.history)))
        found = {name: _window_stats([h[name] for h in history if name in h], self._steps, self._quantile)
                 for name in world.nodes}
        return {name: stats for name, stats in found.items() if stats}

    def _serving(self, snapshot: ClusterSnapshot) -> dict[tuple[str, str], SustainedServing]:
        if not (self._balancer.reads_serving(self._world) and self._balancer.moves_on_serving):
            return {}
        return self._balancer._serving_window(self._span(self._world.serving), self._steps, snapshot)

    def _throttling(self) -> dict[str, WindowStats]:
        if not self._world.gpu_readings:
            return {}
        readings = self._span(self._world.gpu_readings)
        found = {name: _window_stats(_throttled_counts(readings, name), self._steps, self._quantile)
                 for name in self._world.nodes}
        return {name: stats for name, stats in found.items() if stats}


class GpuBalancerServing(GpuBalancer):
    """The former serving-aware variant's name: gpu-balancer itself now reads the serving series
    wherever the replicas export them, as the shipped product does."""

    name = SERVING_POLICY
    about = "an alias: now gpu-balancer, which reads the serving series wherever replicas export them"


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
