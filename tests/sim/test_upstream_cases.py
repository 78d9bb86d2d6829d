"""The scheduler model against cases from kube-scheduler's own plugin tests, through `explain`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone

import pytest

from scoring.policy import default_policy
from sim.explain import context_from_list, explain, nodes_from_list
from tests.sim.upstream_cases import CASES

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def verdicts(result: dict) -> dict[str, dict]:
    return {n["name"]: n for n in result["nodes"]}


def observed(case: dict, result: dict) -> dict:
    nodes = verdicts(result)
    if case["score"]:
        return {name: nodes[name]["scores"].get(case["score"]) if nodes[name]["feasible"] else "infeasible"
                for name in case["want"]}
    return {name: nodes[name]["failed_filter"] for name in case["want"]}


def run(case: dict) -> dict:
    document = {"kind": "List", "items": case["items"]}
    return explain(case["pod"], nodes_from_list(document), snapshot=None, policy=default_policy(), now=NOW,
                   context=context_from_list(document))


@pytest.mark.parametrize("case", CASES, ids=[f"{c['source'].split()[0]}: {c['name'][:60]}" for c in CASES])
def test_agrees_with_upstream(case):
    assert observed(case, run(case)) == case["want"], f"{case['source']} / {case['name']}"


def test_the_table_covers_every_plugin_the_model_has():
    plugins = Counter(c["score"] or next(v for v in c["want"].values() if v) if any(c["want"].values()) or c["score"]
                      else "filters pass" for c in CASES)
    for plugin in ("PodTopologySpread", "InterPodAffinity", "TaintToleration", "NodeAffinity", "NodeResourcesFit",
                   "BalancedAllocation", "ImageLocality", "NodePorts", "NodeUnschedulable"):
        assert plugins[plugin] >= 1, plugin
    assert len(CASES) >= 45


def test_the_cli_gives_the_same_verdicts(tmp_path):
    """A few cases through `gpu-balancer explain --output json`, the command a user runs."""
    for case in (CASES[2], next(c for c in CASES if c["score"] == "InterPodAffinity"),
                 next(c for c in CASES if c["source"].startswith("nodeports"))):
        cluster, pod = tmp_path / "cluster.json", tmp_path / "pod.json"
        cluster.write_text(json.dumps({"kind": "List", "items": case["items"]}))
        pod.write_text(json.dumps(case["pod"]))
        out = subprocess.run([sys.executable, "-m", "gpu_balancer", "explain", "--cluster-file", str(cluster),
                              "--pod", str(pod), "--output", "json"], capture_output=True, text=True, check=True)
        assert observed(case, json.loads(out.stdout)) == case["want"], case["name"]
