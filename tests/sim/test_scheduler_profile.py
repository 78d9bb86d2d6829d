"""A user's own scheduler profile: a KubeSchedulerConfiguration read into the plugins the model
runs and their weights, refused by name where the model cannot honour it, and run by `explain`
and `simulate`."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from sim.cluster_context import ClusterContext
from sim.scheduler import evaluate
from sim.scheduler_profile import DEFAULT_PROFILE, FILTERS, WEIGHTS, ProfileError, profile_from_config
from tests.sim.test_explain import POD, cluster
from tests.sim.test_scheduler import node, pod

HEAD = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def config(plugins: dict, **profile) -> str:
    return HEAD + yaml.safe_dump({"profiles": [{"schedulerName": "default-scheduler", "plugins": plugins, **profile}]})


def test_a_configuration_without_profiles_is_the_default_profile():
    assert profile_from_config(HEAD) == DEFAULT_PROFILE
    assert profile_from_config(config({})) == DEFAULT_PROFILE


def test_plugins_are_disabled_and_reweighted_as_the_configuration_says():
    profile = profile_from_config(config({
        "score": {"disabled": [{"name": "ImageLocality"}], "enabled": [{"name": "NodeResourcesFit", "weight": 5}]},
        "filter": {"disabled": [{"name": "TaintToleration"}]}}))
    assert "ImageLocality" not in profile.weights and profile.weights["NodeResourcesFit"] == 5
    assert profile.weights["TaintToleration"] == WEIGHTS["TaintToleration"], "the score point keeps it"
    assert "TaintToleration" not in profile.filters and len(profile.filters) == len(FILTERS) - 1
    assert profile.describe() == ("default-scheduler: TaintToleration filter off, ImageLocality off, "
                                  "NodeResourcesFit ×5")
    everything_off = profile_from_config(config({"multiPoint": {"disabled": [{"name": "*"}]},
                                                 "score": {"enabled": [{"name": "NodeAffinity"}]}}))
    assert everything_off.filters == () and everything_off.weights == {"NodeAffinity": 1}


def test_the_model_runs_the_profile_it_is_given():
    tainted = node("tainted", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    plain = node("plain")
    context = ClusterContext(profile=profile_from_config(config({"filter": {"disabled": [{"name": "TaintToleration"}]}})))
    default = {v.name: v for v in evaluate(pod(), [tainted, plain])}
    relaxed = {v.name: v for v in evaluate(pod(), [tainted, plain], context=context)}
    assert default["tainted"].failed_filter == "TaintToleration" and relaxed["tainted"].feasible
    only_fit = ClusterContext(profile=replace(DEFAULT_PROFILE, weights={"NodeResourcesFit": 2}))
    (verdict, _) = evaluate(pod(), [plain, node("other")], context=only_fit)
    assert set(verdict.scores) == {"NodeResourcesFit"} and verdict.total == 2 * verdict.scores["NodeResourcesFit"]


@pytest.mark.parametrize(("text", "says"), [
    ("kind: Deployment", "expected kind KubeSchedulerConfiguration"),
    ("[unclosed", "not valid YAML"),
    (config({"score": {"enabled": [{"name": "VolumeBinding"}]}}), "VolumeBinding is left out of the model"),
    (config({"score": {"enabled": [{"name": "MyPlugin", "weight": 2}]}}), "MyPlugin is not a plugin the model knows"),
    (config({"score": {"enabled": [{"name": "NodeAffinity", "weight": -1}]}}), "weight must be a non-negative"),
    (config({}, pluginConfig=[{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}]),
     "pluginConfig sets arguments for NodeResourcesFit"),
    (HEAD + "profiles: [{schedulerName: a}, {schedulerName: b}]", "no profile is named default-scheduler"),
])
def test_what_the_model_cannot_run_is_refused_by_name(text, says):
    with pytest.raises(ProfileError, match=says):
        profile_from_config(text)


def test_explain_and_simulate_take_a_scheduler_configuration(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps(cluster()))
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(POD))
    (tmp_path / "sched.yaml").write_text(config({"filter": {"disabled": [{"name": "TaintToleration"}]},
                                                 "score": {"disabled": [{"name": "ImageLocality"}]}}))
    explained = subprocess.run([sys.executable, "-m", "gpu_balancer", "explain", "--cluster-file",
                                str(tmp_path / "cluster.json"), "--pod", str(tmp_path / "pod.yaml"),
                                "--scheduler-config", str(tmp_path / "sched.yaml"), "--output", "json"],
                               capture_output=True, text=True, timeout=60)
    assert explained.returncode == 0, explained.stderr
    report = json.loads(explained.stdout)
    tainted = next(n for n in report["nodes"] if n["name"] == "gpu-t")
    assert tainted["feasible"] and "ImageLocality" not in tainted["scores"]
    assert report["profile"] == "default-scheduler: TaintToleration filter off, ImageLocality off"
    (tmp_path / "bad.yaml").write_text(config({"score": {"enabled": [{"name": "VolumeBinding"}]}}))
    refused = subprocess.run([sys.executable, "-m", "gpu_balancer", "simulate", "--scenario", "burst",
                              "--scheduler-config", str(tmp_path / "bad.yaml")], capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 2 and "VolumeBinding is left out of the model" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_scenario_file_does_not_take_a_profile_of_its_own():
    from scoring.policy import PolicyError
    from sim.scenario import load_scenario

    with pytest.raises(PolicyError, match="--scheduler-config"):
        load_scenario("name: mine\nscheduler: {filters: [NodeName]}")
