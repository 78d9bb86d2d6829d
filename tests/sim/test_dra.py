"""DRA in the simulator and `explain`: a fleet whose pods claim GPUs by template behaves as the
device-plugin fleet it replaces, the scheduler model filters on claimed devices, and a cluster
file's ResourceSlices, claims and templates are read."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone

import kubernetes_validate
import pytest

from descheduler.cluster import cluster_from_objects
from scoring.cluster.claims import class_resource
from scoring.policy import BalancerPolicy, PlacementPolicy, PolicyError, default_policy
from sim.engine import bind, build_world, cluster_objects, service_pod
from sim.explain import context_from_list, explain, nodes_from_list
from sim.policies import GpuBalancer, Stock, watched_view
from sim.run import run_policy
from sim.scenario import load_scenario, named
from sim.plugins.dynamic_resources import claimed_devices
from sim.scheduler import evaluate, view_of
from tests.dra_objects import claim, dra_pod, exactly, gpu_slice, template

GPU = class_resource("gpu.nvidia.com")
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def dra(scenario):
    return replace(scenario, inference=replace(scenario.inference, claims="dra"))


def test_claims_must_be_device_plugin_or_dra():
    assert load_scenario("inference:\n  claims: dra\n").inference.claims == "dra"
    with pytest.raises(PolicyError, match="inference.claims"):
        load_scenario("inference:\n  claims: magic\n")


def test_a_dra_world_claims_by_template_and_lists_valid_dra_objects():
    world = build_world(dra(named("mixed-pools")), seed=3)
    assert all(not any(r.startswith("nvidia.com/") for r in n.allocatable) for n in world.nodes.values())
    services = list(world.services.values())
    for service in services[:6]:
        pod = service_pod(world, service)
        assert pod.obj["spec"]["resourceClaims"] and not pod.obj["spec"]["containers"][0]["resources"]["limits"]
        verdicts = [v for v in evaluate(pod.obj, list(world.nodes.values()), context=world.context) if v.feasible]
        bind(world, pod, verdicts[0].name)
        assert world.nodes[verdicts[0].name].claimed[f"inference/{pod.obj['metadata']['name']}"]
    objects = cluster_objects(world)
    latest = kubernetes_validate.latest_version()
    for obj in objects:
        if obj["kind"] in ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"):
            kubernetes_validate.validate(obj, latest, strict=True)
    cluster = cluster_from_objects(objects, PlacementPolicy())
    for name, node in world.nodes.items():  # the descheduler's free devices are the model's
        for resource, units in node.allocatable.items():
            if resource.startswith("deviceclass/"):
                assert cluster.free()[name][resource] == units - node.requested[resource], (name, resource)


@pytest.mark.parametrize("scenario", ["mixed-pools", "training-mix"])
def test_a_dra_fleet_gives_the_device_plugin_fleets_results(scenario):
    """Same seed, same arrivals: every metric equal, so the project does on DRA what it does on
    the device plugin (the full comparison over seeds is bench/dra_fleet.py)."""
    base = replace(named(scenario), hours=1.0)
    for make in (lambda: Stock(random.Random(10)), lambda: GpuBalancer(random.Random(10))):
        plugin = run_policy(base, make().name, 3, policy=make()).metrics
        claimed = run_policy(dra(base), make().name, 3, policy=make()).metrics
        assert plugin == claimed


def test_blind_to_dra_the_balancer_does_what_stock_does():
    base = dra(replace(named("skewed-inference"), hours=1.0))
    blind = BalancerPolicy(placement=PlacementPolicy(gpu_device_classes=()))
    stock = run_policy(base, "stock", 2, policy=Stock(random.Random(1))).metrics
    unaware = run_policy(base, "gpu-balancer", 2, policy=GpuBalancer(random.Random(1), blind)).metrics
    aware = run_policy(base, "gpu-balancer", 2, policy=GpuBalancer(random.Random(1))).metrics
    assert unaware["node_util_cov"] == stock["node_util_cov"] and unaware["ttft_p99_ms"] == stock["ttft_p99_ms"]
    assert aware["node_util_cov"] < stock["node_util_cov"]


def dra_cluster():
    nodes = [{"kind": "Node", "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
              "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}} for n in ("gpu-a", "gpu-b", "gpu-c")]
    items = [*nodes, *(gpu_slice(n, 8) for n in ("gpu-a", "gpu-b", "gpu-c")), template("two-gpus", exactly(count=2)),
             claim("big-gpu", exactly(count=7), allocated=[("gpu-a", f"gpu-{i}") for i in range(7)])]
    return {"kind": "List", "items": items}


def test_explain_filters_on_claimed_devices_from_the_cluster_file():
    document = dra_cluster()
    context = context_from_list(document)
    pod = dra_pod("new", template_name="two-gpus")
    assert claimed_devices(pod, context) == {GPU: 2}
    result = explain(pod, nodes_from_list(document), snapshot=None, policy=default_policy(), now=NOW, context=context)
    by_name = {n["name"]: n for n in result["nodes"]}
    assert by_name["gpu-a"]["failed_filter"] == "DynamicResources: gpu.nvidia.com", "one of 8 devices is free"
    assert set(result["chosen"]) == {"gpu-b", "gpu-c"}
    missing = explain(dra_pod("x", template_name="nope"), nodes_from_list(document), snapshot=None,
                      policy=default_policy(), now=NOW, context=context)
    assert all(n["failed_filter"] == "DynamicResources: claim nope not found" for n in missing["nodes"])


def test_the_explain_command_reads_a_dra_cluster_file(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps(dra_cluster()))
    (tmp_path / "pod.json").write_text(json.dumps(dra_pod("new", template_name="two-gpus")))
    done = subprocess.run([sys.executable, "-m", "gpu_balancer", "explain", "--cluster-file",
                           str(tmp_path / "cluster.json"), "--pod", str(tmp_path / "pod.json"), "--output", "json"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)["chosen"]) == ["gpu-b", "gpu-c"]


def test_explain_says_how_the_pods_claims_were_read(tmp_path):
    document = dra_cluster()
    document["items"].append(template("all-gpus", exactly(mode="All")))
    context = context_from_list(document)
    nodes = nodes_from_list(document)
    counted = explain(dra_pod("a", template_name="two-gpus"), nodes, snapshot=None, policy=default_policy(), now=NOW,
                      context=context)
    assert counted["claims"] == ["GPU claims two-gpus: gpu.nvidia.com×2"]
    every = explain(dra_pod("b", template_name="all-gpus"), nodes, snapshot=None, policy=default_policy(), now=NOW,
                    context=context)
    assert any("allocationMode All" in line for line in every["claims"])
    missing = explain(dra_pod("c", template_name="nope"), nodes, snapshot=None, policy=default_policy(), now=NOW,
                      context=context)
    assert missing["claims"][-1] == "claim nope: not in the cluster file"
    assert "claims" not in explain(dra_pod("d", template_name="two-gpus") | {"spec": {"containers": []}}, nodes,
                                   snapshot=None, policy=default_policy(), now=NOW, context=context)
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    (tmp_path / "pod.json").write_text(json.dumps(dra_pod("b", template_name="all-gpus")))
    table = subprocess.run([sys.executable, "-m", "gpu_balancer", "explain", "--cluster-file",
                            str(tmp_path / "cluster.json"), "--pod", str(tmp_path / "pod.json")],
                           capture_output=True, text=True)
    assert table.returncode == 0 and "claims: claim all-gpus: request gpu: allocationMode All" in table.stdout, table


@pytest.mark.parametrize("claims", ["device-plugin", "dra"])
def test_the_simulated_webhook_sees_what_the_scheduler_model_holds(claims):
    """The simulator's webhook view is the world's objects reduced by production's cluster state
    (`sim.policies.watched_view`); it must agree with the scheduler model's own bookkeeping."""
    scenario = named("mixed-pools")
    world = build_world(replace(scenario, inference=replace(scenario.inference, claims=claims)), seed=3)
    for service in list(world.services.values())[:8]:
        pod = service_pod(world, service)
        verdicts = [v for v in evaluate(pod.obj, list(world.nodes.values()), context=world.context) if v.feasible]
        bind(world, pod, verdicts[0].name)
    policy = default_policy()
    watched = watched_view(world, policy, NOW)
    modelled = view_of(world.nodes.values(), NOW, world.context.claims)
    assert watched.bound == modelled.bound and len(watched.bound) == 8
    for name in world.nodes:
        assert watched.free(name) == modelled.free(name), name
    assert any(watched.free(name) != {r: n for r, n in watched.nodes[name].allocatable.items()} for name in world.nodes)
