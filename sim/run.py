"""Run a scenario under each policy with the same seed and arrivals, and compute the metrics. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import fmean, pstdev

import numpy as np

from scoring.cluster.claims import class_resource
from sim.avoidance import AvoidanceTally
from sim.engine import bind, build_world, measure, step_workloads
from sim.world_state import gpu_count
from sim.policies import make_policy, policies_for
from sim.scenario import Scenario


@dataclass
class PolicyResult:
    metrics: dict[str, float]
    node_util: list[dict[str, float]] = field(repr=False)
    """Per tick, per node utilisation (for the heatmap)."""
    latencies: list[tuple[float, float]] = field(repr=False)
    """The run's TTFT histogram: (bin's upper edge ms, requests) per non-empty bin."""


def weighted_quantile(samples: list[tuple[float, float]], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    total = sum(w for _, w in ordered)
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= q * total:
            return value
    return ordered[-1][0]


def run_policy(scenario: Scenario, policy_name: str, seed: int,
               progress: Callable[[int], None] | None = None, *, policy=None) -> PolicyResult:
    """One policy's run; `policy` runs a policy object of your own (a variant) under that name."""
    world = build_world(scenario, seed)
    policy = policy or make_policy(policy_name, seed)
    ticks = int(scenario.hours * 3600 / scenario.tick_seconds)
    covs, pending = [], []
    running_pods = []
    packed_jobs: dict[str, bool] = {}
    roomy_jobs: set[str] = set()
    avoidance = AvoidanceTally()
    for tick in range(ticks):
        world.tick = tick
        step_workloads(world)
        policy.tick(world)
        for job in world.jobs:
            if job not in packed_jobs and job not in roomy_jobs and _clique_has_room(world, job):
                roomy_jobs.add(job)
        for pod in sorted(world.pending(), key=lambda p: (p.created_tick, p.obj["metadata"]["name"])):
            node = policy.place(world, pod)
            if node is not None:
                bind(world, pod, node)
                policy.bound(world, pod, node)
                avoidance.bound(world, node)
        if tick and tick % scenario.descheduler_every_ticks == 0:
            policy.deschedule(world)
        sample = measure(world)
        utils = list(sample.node_util.values())
        mean = fmean(utils) if utils else 0.0
        if mean > 0:
            covs.append(pstdev(utils) / mean)
        pending.append(sample.pending)
        running_pods.append(sum(1 for p in world.pods.values() if p.node is not None))
        for job in world.jobs:
            workers = [p for p in world.pods.values() if p.training_job == job]
            if job not in packed_jobs and workers and all(p.node for p in workers):
                cliques = {world.nodes[p.node].labels["nvidia.com/gpu.clique"] for p in workers}
                packed_jobs[job] = len(cliques) == 1
        if progress:
            progress(tick)
    hours = ticks * scenario.tick_seconds / 3600
    tally = world.llm.tally
    metrics = {
        "node_util_cov": fmean(covs) if covs else 0.0,
        "ttft_p99_ms": tally.ttft.quantile(0.99), "ttft_p50_ms": tally.ttft.quantile(0.5),
        "tpot_p99_ms": tally.tpot.quantile(0.99), "e2e_p99_ms": tally.e2e.quantile(0.99),
        "slo_attainment": tally.within_slo / tally.requests if tally.requests else 1.0,
        # The reference: TTFT p99 had each pool's contention been even, the same traffic and queues.
        "ttft_p99_at_even_contention_ms": tally.ttft_even.quantile(0.99),
        "retried_requests_percent": 100 * tally.retried / tally.requests if tally.requests else 0.0,
        "evictions": float(world.evictions),
        "pending_pods": fmean(pending) if pending else 0.0,
        "evictions_per_pod_hour_percent": 100 * world.evictions / hours / max(fmean(running_pods), 1.0),
    }
    if scenario.conditions.degraded_gpus.enabled:
        metrics["requests_on_degraded_gpu_percent"] = 100 * tally.on_degraded_gpu / tally.requests if tally.requests else 0.0
    if scenario.serving.tp8_share or scenario.serving.disaggregated_share:
        metrics["requests_across_domains_percent"] = 100 * tally.across_domains / tally.requests if tally.requests else 0.0
    if scenario.conditions.cpu_neighbours.enabled:
        metrics["ttft_p99_unlimited_ms"] = tally.ttft_unlimited.quantile(0.99)
    if world.llm.ready_waits:
        waits = np.asarray(world.llm.ready_waits)
        metrics["time_to_ready_p50_s"] = float(np.percentile(waits, 50))
        metrics["time_to_ready_p99_s"] = float(np.percentile(waits, 99))
    if world.llm.training_steps:
        metrics["training_step_ratio"] = fmean(world.llm.training_steps)
    if tally.ttft_sensitive.weights.any():
        metrics["ttft_p99_sensitive_ms"] = tally.ttft_sensitive.quantile(0.99)
    metrics.update(policy.advice_metrics())
    metrics.update(avoidance.metrics())
    judged = [job for job in packed_jobs if job in roomy_jobs]
    if judged:
        # Only jobs for which one clique had room for every worker when they arrived count.
        metrics["training_jobs_in_one_clique"] = sum(packed_jobs[j] for j in judged) / len(judged)
    return PolicyResult(metrics, world.history, tally.ttft.samples())


def _clique_has_room(world, job: str) -> bool:
    workers = [p for p in world.pods.values() if p.training_job == job]
    if not workers or any(p.node for p in workers):
        return False
    per_worker = gpu_count(workers[0])
    room: dict[str, int] = {}
    for node in world.nodes.values():
        if node.unschedulable:
            continue
        resource = class_resource("gpu.nvidia.com") if world.dra else "nvidia.com/gpu"
        free = node.allocatable.get(resource, 0) - node.requested[resource]
        clique = node.labels.get("nvidia.com/gpu.clique", "")
        room[clique] = room.get(clique, 0) + int(free // per_worker)
    return any(slots >= len(workers) for slots in room.values())


def compare(scenario: Scenario, seed: int, policies: tuple[str, ...] | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> dict[str, PolicyResult]:
    """Every policy (`policies_for(scenario)` unless given) on the same seed."""
    policies = policies or policies_for(scenario)
    ticks = int(scenario.hours * 3600 / scenario.tick_seconds)
    return {name: run_policy(scenario, name, seed, (lambda t, n=name: progress(n, t, ticks)) if progress else None)
            for name in policies}
