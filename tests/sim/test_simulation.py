"""The simulator end to end: determinism, the real webhook in the loop, the CLI and its report."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sim.engine import bind, build_world, measure, service_pod, step_workloads
from sim.policies import POLICIES, make_policy, policies_for
from sim.run import compare, run_policy, weighted_quantile
from sim.scenario import BUILT_IN, FleetShape, InferenceShape, load_scenario, named

SMALL = replace(named("skewed-inference"), hours=0.5, fleet=FleetShape(nodes=8),
                inference=InferenceShape(services=8, mean_demand_fraction=0.35))


def test_the_same_seed_gives_the_same_run():
    assert run_policy(SMALL, "stock", 5).metrics == run_policy(SMALL, "stock", 5).metrics


def test_every_policy_reports_every_metric():
    results = compare(SMALL, 3)
    assert list(results) == list(POLICIES)
    for result in results.values():
        assert {"ttft_p99_ms", "tpot_p99_ms", "slo_attainment", "node_util_cov", "evictions",
                "pending_pods"} <= set(result.metrics)
        assert result.metrics["ttft_p99_ms"] > 0 and 0 < result.metrics["slo_attainment"] <= 1


def test_gpu_balancer_pods_go_through_the_production_webhook():
    world = build_world(SMALL, 2)
    policy = make_policy("gpu-balancer", 2)
    advised = 0
    for tick in range(30):
        world.tick = tick
        step_workloads(world)
        for pod in world.pending():
            node = policy.place(world, pod)
            advised += "gpu-balancer.io/advice" in pod.obj["metadata"].get("annotations", {})
            if node:
                bind(world, pod, node)
        measure(world)
    assert advised > 0
    later = [p for p in world.pods.values() if p.created_tick > 5]
    assert any("preferred" in p.obj["metadata"]["annotations"].get("gpu-balancer.io/advice", "") for p in later)


def _two_node_world(placement: list[str]):
    """Four replicas of one busy service (load 0.9 each) on two 4-GPU nodes, as `placement` says."""
    scenario = replace(SMALL, fleet=FleetShape(nodes=2, gpus_per_node=4), inference=InferenceShape(services=1))
    world = build_world(scenario, 1)
    service = next(iter(world.services.values()))
    service.demand, service.phase = 3.6, 0.0
    world.scenario = replace(scenario, inference=replace(scenario.inference, diurnal_amplitude=0.0))
    for node in placement:
        bind(world, service_pod(world, service), node)
    return world


def test_bindings_onto_nodes_the_advice_avoids_are_counted_for_any_policy():
    from sim.avoidance import AvoidanceTally

    world = _two_node_world(["gpu-node-000"] * 4)  # one node 90 % busy, the other idle
    tally = AvoidanceTally()
    assert tally.metrics() == {}, "no binding, no share"
    for tick in range(12):  # past the exporter's lag, so the eye has a scrape to judge by
        world.tick = tick
        measure(world)
    tally.bound(world, "gpu-node-000")
    tally.bound(world, "gpu-node-001")
    tally.bound(world, "gpu-node-001")
    assert tally.metrics() == {"placed_on_avoided": 1 / 3}


def test_weighted_quantile_weights_requests():
    assert weighted_quantile([(10, 1), (1000, 1)], 0.5) == 10
    assert weighted_quantile([(10, 1), (1000, 99)], 0.5) == 1000


def test_built_in_scenarios_exist_and_scenario_files_are_validated():
    assert set(BUILT_IN) == {"skewed-inference", "burst", "training-mix", "node-failure", "mixed-pools", "llm-fleet", "llm-training-mix",
                             "llm-shared-gpus", "latency-sensitivity", "llm-degraded-gpus", "llm-cpu-neighbours",
                             "llm-cold-start", "llm-pcie-neighbours", "llm-tp-disagg"}
    scenario = load_scenario("name: mine\nhours: 1\nfleet: {nodes: 12, gpusPerNode: 4}\ninference: {services: 6}\n")
    assert (scenario.fleet.nodes, scenario.fleet.gpus_per_node, scenario.inference.services) == (12, 4, 6)
    from scoring.policy import PolicyError

    with pytest.raises(PolicyError, match="fleet.nodes"):
        load_scenario("fleet: {nodes: 0}")
    with pytest.raises(PolicyError, match="fleet.gpuz"):
        load_scenario("fleet: {gpuz: 1}")
    for bad, field in (("telemetryLagSeconds: -5", "telemetryLagSeconds"),
                       ("fleet: {nodes: 4}\nevents: {failedNodes: 9}", "events.failedNodes"),
                       ("inference: {meanDemandFraction: -0.2}", "inference.meanDemandFraction"),
                       ("training: {durationHours: []}", "training.durationHours"),
                       ("training: {workers: [0, 2]}", "training.workers")):
        with pytest.raises(PolicyError, match=field):
            load_scenario(bad)


@pytest.mark.parametrize(("document", "message"), [
    ("fleet: {nodes: 0}", "fleet.nodes: out of range (allowed: 1 to 2000)"),
    ("inference: {targetUtil: 0}", "inference.targetUtil: out of range (allowed: more than 0 to 1)"),
    ("inference: {diurnalAmplitude: 1}", "inference.diurnalAmplitude: out of range (allowed: 0 to 1 (exclusive))"),
    ("webhookReplicas: 0", "webhookReplicas: out of range (allowed: at least 1)"),
    ("fleet: {pools: [{name: a, nodes: 3000}]}", "fleet.pools[0].nodes: out of range (allowed: 1 to 2000)"),
    ("- a\n- b\n", "scenario must be a YAML mapping of fields, got a list"),
    ("", "scenario is empty"),
    ("# only a comment\n", "scenario is empty"),
])
def test_a_bad_scenario_says_what_is_allowed(document, message):
    from scoring.policy import PolicyError

    with pytest.raises(PolicyError) as error:
        load_scenario(document)
    assert message in str(error.value)
    assert "policy" not in str(error.value)


def test_simulate_help_names_every_built_in_scenario():
    done = subprocess.run([sys.executable, "-m", "gpu_balancer", "simulate", "--help"], capture_output=True, text=True)
    text = " ".join(done.stdout.split()).replace("- ", "-")  # argparse wraps at hyphens
    assert all(name in text for name in BUILT_IN), done.stdout


POOLS = """
name: pools
hours: 0.5
webhookReplicas: 2
bindDelaySeconds: 30
fleet:
  pools:
    - {name: big, nodes: 6, gpusPerNode: 8, labels: {pool: big}}
    - {name: tainted, nodes: 3, gpusPerNode: 4, labels: {pool: tainted},
       taints: [{key: reserved, value: "yes", effect: NoSchedule}]}
    - {name: mig, nodes: 2, gpusPerNode: 8, labels: {pool: mig}, migProfile: 1g.10gb, instancesPerGpu: 7}
inference:
  services: 12
  poolShares: [{pool: big, share: 0.5}, {pool: tainted, share: 0.25}, {pool: mig, share: 0.25}]
"""


def test_pools_pin_services_and_every_advised_node_is_one_the_pod_can_use():
    from sim.run import run_policy

    scenario = load_scenario(POOLS)
    assert [p.resource for p in scenario.fleet.pools][2] == "nvidia.com/mig-1g.10gb"
    result = run_policy(scenario, "gpu-balancer", 3)
    assert result.metrics["advice_feasible"] == 1.0
    assert 0.0 < result.metrics["advice_followed"] <= 1.0
    assert result.metrics["pending_pods"] < 1.0, "the pinned services fit their pools"
    from scoring.policy import PolicyError

    with pytest.raises(PolicyError, match="poolShares\\[0\\].pool"):
        load_scenario(POOLS.replace("{pool: big, share: 0.5}", "{pool: nope, share: 0.5}"))
    with pytest.raises(PolicyError, match="add up to more than 1"):
        load_scenario(POOLS.replace("share: 0.5", "share: 0.9"))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "gpu_balancer", *args], capture_output=True, text=True, timeout=300)


def test_simulate_prints_json_and_writes_a_report(tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("name: tiny\nhours: 0.25\nfleet: {nodes: 6}\ninference: {services: 6, meanDemandFraction: 0.3}\n")
    result = cli("simulate", "--scenario-file", str(scenario), "--seed", "4", "--output", "json",
                 "--report", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["scenario"] == "tiny" and report["seed"] == 4
    assert set(report["results"]) == set(POLICIES)
    assert {p.name for p in (tmp_path / "report").iterdir()} == {"summary.md", "node-utilisation.png",
                                                                 "latency-tail.png", "headline.png", "report.html"}
    assert "gpu-balancer" in (tmp_path / "report" / "summary.md").read_text()


def test_simulate_refuses_an_unknown_scenario():
    result = cli("simulate", "--scenario", "nope")
    assert result.returncode == 2 and "unknown scenario" in result.stderr


def test_a_run_does_not_depend_on_the_process_hash_seed():
    # String hashing is randomised per process; before the snapshot builder summed units in row
    # order, hash seeds 7 and 10 gave mixed-pools other figures than seed 0 (near-equal nodes
    # swapped ranks). The simulator must be a function of its own seed alone.
    import json
    import os
    import subprocess
    import sys

    code = ("import json; from dataclasses import replace; from sim.scenario import named; "
            "from sim.run import run_policy; print(json.dumps(run_policy(replace(named('mixed-pools'), hours=1.0), "
            "'gpu-balancer', 2).metrics, sort_keys=True))")
    runs = {hash_seed: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      env={**os.environ, "PYTHONHASHSEED": hash_seed}).stdout
            for hash_seed in ("0", "7", "10")}
    assert len(set(runs.values())) == 1, runs
    assert json.loads(runs["0"])["node_util_cov"] > 0


def test_on_the_held_out_mixed_fleet_a_packed_training_job_does_not_saturate_serving_replicas():
    # Issue 34: seed 4 of this fleet had gpu-balancer's p99 at 13.6 s against stock's 2.6 s, because
    # a job was packed into the clique with the most room, beside replicas at their replica cap.
    # The job now goes where its room is coolest. (On the serving world: TTFT p99 2,747 ms against
    # stock's 2,984, every job in one clique against none.)
    from pathlib import Path

    scenario = load_scenario((Path(__file__).parents[2] / "bench" / "scenarios" / "mixed-training-heldout.yaml").read_text())
    stock = run_policy(scenario, "stock", 4).metrics
    balanced = run_policy(scenario, "gpu-balancer", 4).metrics
    assert balanced["ttft_p99_ms"] <= stock["ttft_p99_ms"], (balanced, stock)
    assert balanced["node_util_cov"] < stock["node_util_cov"]
    assert balanced["training_jobs_in_one_clique"] > stock["training_jobs_in_one_clique"]


def test_simulate_lists_every_scenario_and_policy_with_a_line_on_each():
    from sim.policies import POLICY_ABOUT, POLICY_CLASSES

    assert set(POLICY_ABOUT) == set(POLICY_CLASSES)
    done = cli("simulate", "--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name in (*BUILT_IN, *POLICY_CLASSES):
        (line,) = [line for line in lines if line.split()[:1] == [name]]
        assert len(line.split(maxsplit=1)) == 2, f"{name} has no description"


def test_simulate_set_overrides_a_field_by_its_path_and_names_a_bad_one():
    from sim.scenario import named, overridden

    scenario = overridden(overridden(named("llm-fleet"), "contention.scale", "0"), "serving.model", "Mistral-7B")
    assert scenario.contention.scale == 0.0 and scenario.serving.model == "Mistral-7B"
    assert overridden(named("burst"), "fleet.nodes", "4").fleet.nodes == 4
    done = cli("simulate", "--scenario", "llm-fleet", "--set", "hours=0.05", "--set", "contention.scale=0",
               "--output", "json")
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["results"]) == set(policies_for(named("llm-fleet")))
    for setting, says in (("contention.scal=1", "contention.scal: unknown field (known: "),
                          ("contention.scale=99", "contention.scale: out of range (allowed: 0 to 10)"),
                          ("hours=soon", "hours: expected a number"),
                          ("serving.model=GPT-9", "serving.model: unknown model 'GPT-9'"),
                          ("hours", "give KEY=VALUE")):
        refused = cli("simulate", "--scenario", "llm-fleet", "--set", setting)
        assert refused.returncode == 2 and says in refused.stderr, (setting, refused.stderr)
        assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_the_readmes_scenario_file_example_loads_as_written():
    """Its every field, the conditions' rates in YAML 1.1's float form (a bare `5.2e9` is a string)."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    at = text.index("conditions:                   # fleet conditions")
    example = text[text.rfind("```yaml", 0, at) + len("```yaml"):text.index("```", at)]
    scenario = load_scenario(example)
    assert scenario.conditions.cold_start.image_bytes == 5.2e9
    assert scenario.conditions.pcie_neighbours.uplink_bytes_per_second == 63e9
    assert scenario.conditions.topology.kv_seconds_per_token_across == 52.6e-6
