"""The latency-sensitivity scenario: twins of equal utilisation, serving series in-process and through fake-serving."""

from __future__ import annotations

import math
import time
from dataclasses import replace

from scoring.ingest.prometheus import connect, run_queries
from scoring.ingest.serving import replicas_from_rows, serving_queries
from scoring.policy import default_policy
from sim.engine import bind, build_world, measure, step_workloads
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec
from sim.policies import POLICIES, SERVING_POLICY, make_policy, policies_for
from sim.run import run_policy
from sim.scenario import FleetShape, named
from sim.serving_text import VLLM_BUCKETS, render_serving, served_from_world

SMALL = replace(named("latency-sensitivity"), hours=1.0, fleet=FleetShape(nodes=8),
                inference=replace(named("latency-sensitivity").inference, services=8))


def run_ticks(scenario, ticks: int, policy_name: str = "gpu-balancer", seed: int = 3):
    world, policy = build_world(scenario, seed), make_policy(policy_name, seed)
    for tick in range(ticks):
        world.tick = tick
        step_workloads(world)
        for pod in sorted(world.pending(), key=lambda p: (p.created_tick, p.obj["metadata"]["name"])):
            if (node := policy.place(world, pod)) is not None:
                bind(world, pod, node)
                policy.bound(world, pod, node)
        measure(world)
    return world, policy


def test_each_sensitive_service_serves_code_completion_beside_a_conversational_twin_of_equal_demand():
    world = build_world(SMALL, 1)
    services = sorted(world.services.values(), key=lambda s: s.name)
    sensitive = [s for s in services if s.sensitive]
    assert len(sensitive) == 4
    inference = SMALL.inference
    for service in sensitive:
        twin = world.services[f"svc-{int(service.name[4:]) + 1:02d}"]
        assert not twin.sensitive and twin.demand == service.demand and twin.host_load == inference.twin_host_load > 0
        assert (service.mix.prompt_median, service.mix.output_median) == (inference.sensitive_prompt_tokens,
                                                                          inference.sensitive_output_tokens)
        assert twin.mix.prompt_median == SMALL.serving.prompt_tokens != service.mix.prompt_median


def test_every_scenario_compares_the_same_line_up_and_only_a_sensitive_one_reports_its_own_tail():
    assert policies_for(SMALL) == policies_for(named("skewed-inference")) == POLICIES
    assert SERVING_POLICY not in POLICIES, "one gpu-balancer: the serving-aware name is an alias"
    metrics = run_policy(SMALL, "gpu-balancer", 2).metrics
    assert metrics["ttft_p99_sensitive_ms"] > 0
    assert run_policy(replace(SMALL, hours=0.3), SERVING_POLICY, 2).metrics == run_policy(
        replace(SMALL, hours=0.3), "gpu-balancer", 2).metrics
    assert "ttft_p99_sensitive_ms" not in run_policy(replace(named("burst"), hours=0.2), "stock", 1).metrics


def test_the_serving_aware_policy_sees_every_exporting_replica_in_its_snapshot():
    world, policy = run_ticks(SMALL, 12)
    snapshot, fleet, _, _ = policy.telemetry(world)
    lag = math.ceil(SMALL.telemetry_lag_seconds / SMALL.tick_seconds)
    observed = world.serving[-1 - lag]
    assert {f"{r.namespace}/{r.pod}" for n in snapshot.nodes for r in n.serving} == set(observed)
    assert all("serving" in n.signals for n in fleet.nodes if snapshot.by_name[n.name].serving)


def test_gpu_balancer_reads_the_serving_series_only_where_they_are_scraped_and_its_policy_reads_them():
    unscraped = replace(SMALL, inference=replace(SMALL.inference, serving_metrics=False))
    world, policy = run_ticks(unscraped, 12)
    assert not any(n.serving for n in policy.telemetry(world)[0].nodes)
    off = default_policy()
    off = replace(off, serving=replace(off.serving, enabled=False))
    world = build_world(SMALL, 3)
    assert make_policy("gpu-balancer", 3).reads_serving(world)
    assert not make_policy("gpu-balancer", 3, off).reads_serving(world)


def test_the_simulated_replicas_read_through_prometheus_as_the_in_process_path_sees_them(fake_dcgm, prometheus):
    world, policy = run_ticks(SMALL, 12)
    observed = world.serving[-1]
    served = served_from_world(observed)
    started = time.monotonic()
    server = make_server(lambda: render_serving(served, time.monotonic() - started + 600), port=0)
    serve_in_background(server)
    try:
        prom = prometheus(fake_dcgm(FleetSpec(nodes=2, gpus_per_node=2, profile="idle")),
                          f"127.0.0.1:{server.server_port}")
        prom.wait_for("rate(vllm:time_to_first_token_seconds_count[30s]) > 0", at_least=len(served))
        policy_ = default_policy()
        read = replace(policy_.serving, window_seconds=30.0)
        answers = run_queries(connect(replace(policy_.prometheus, url=prom.url)),
                              serving_queries(read, "", policy_.placement.workload_label))
        through = replicas_from_rows(answers, read, policy_.placement.workload_label)
        in_process = policy.serving_replicas(observed)
        assert set(through) == set(in_process)
        for node, replicas in in_process.items():
            seen = {r.pod: r for r in through[node]}
            for mine in replicas:
                theirs = seen[mine.pod]
                assert math.isclose(theirs.queue, mine.queue, rel_tol=1e-9)
                low = max((b for b in VLLM_BUCKETS if b <= mine.latency_seconds), default=0.0)
                high = min(b for b in VLLM_BUCKETS if b >= mine.latency_seconds)
                assert low <= theirs.latency_seconds <= high
                assert theirs.workload == mine.workload and theirs.target == mine.target
    finally:
        server.shutdown()
        server.server_close()


def test_the_report_shows_the_sensitive_services_ttft_p99_beside_the_headline_metrics(tmp_path):
    from sim import report_figures
    from sim.report_files import write_report
    from sim.run import compare

    short = replace(SMALL, hours=0.5)
    by_seed = {seed: compare(short, seed) for seed in (1, 2)}
    figure = report_figures.headline(short, [1, 2], by_seed)
    labels = [tick.get_text() for tick in figure.axes[0].get_xticklabels()]
    assert labels[-1] == "TTFT p99 sensitive (ms)" and len(labels) == len(report_figures.HEADLINE) + 1
    written = write_report(tmp_path, short, by_seed)
    assert any(path.name == "report.html" for path in written)
    assert "gpu-balancer" in (tmp_path / "report.html").read_text()
