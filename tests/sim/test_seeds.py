"""`simulate --seeds`: the comparison over several seeds, mean and range per policy and metric."""

from __future__ import annotations

import json
import subprocess
import sys
from statistics import fmean

import pytest

from sim.run import compare
from sim.scenario import load_scenario
from sim.seeds import aggregate, change_against_stock, parse_seeds

TINY = "name: tiny\nhours: 0.25\nfleet: {nodes: 6}\ninference: {services: 6, meanDemandFraction: 0.3}\n"


def test_seed_ranges_parse_and_bad_ones_are_refused():
    assert parse_seeds("1-8") == list(range(1, 9)) and parse_seeds("3") == [1, 2, 3]
    for bad in ("8-1", "x", "1-", "-3", "1-500"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_the_summary_is_the_mean_and_range_of_the_single_seed_runs(tmp_path):
    scenario = load_scenario(TINY)
    by_seed = {seed: compare(scenario, seed, ("stock", "gpu-balancer")) for seed in (2, 3, 4)}
    summary = aggregate(by_seed)
    values = [by_seed[s]["gpu-balancer"].metrics["node_util_cov"] for s in (2, 3, 4)]
    cov = summary["gpu-balancer"]["node_util_cov"]
    assert cov["mean"] == pytest.approx(fmean(values)) and (cov["min"], cov["max"]) == (min(values), max(values))
    stock = fmean(by_seed[s]["stock"].metrics["node_util_cov"] for s in (2, 3, 4))
    assert change_against_stock(summary, "gpu-balancer", "node_util_cov") == pytest.approx(cov["mean"] / stock - 1)

    scenario_file = tmp_path / "tiny.yaml"
    scenario_file.write_text(TINY)
    result = subprocess.run([sys.executable, "-m", "gpu_balancer", "simulate", "--scenario-file", str(scenario_file),
                             "--seeds", "2-4", "--output", "json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["seeds"] == [2, 3, 4]
    per_seed = document["results"]["gpu-balancer"]["node_util_cov"]["per_seed"]
    assert per_seed == {str(s): round(v, 4) for s, v in zip((2, 3, 4), values)}, "the CLI runs the same simulation"
