"""A DRA fleet against the device-plugin fleet it replaces: each scenario over seeds with pods asking
for their GPUs by claim template (`inference.claims: dra`), and the same with gpu-balancer blind to
DRA (no GPU DeviceClasses: what the project did before it read claims). Prints figures; no I/O
beyond stdout.

    .venv/bin/python bench/dra_fleet.py [--seeds 1-8] [--scenarios skewed-inference,mixed-pools,training-mix]
"""

from __future__ import annotations

import argparse
import random
from dataclasses import replace
from multiprocessing import Pool
from statistics import fmean

from scoring.policy import BalancerPolicy
from sim.policies import GpuBalancer, Stock
from sim.run import run_policy
from sim.scenario import Scenario, named
from sim.seeds import parse_seeds

BLIND = BalancerPolicy()
BLIND = replace(BLIND, placement=replace(BLIND.placement, gpu_device_classes=()))
VARIANTS = ("stock, DRA fleet", "gpu-balancer, device-plugin fleet", "gpu-balancer, DRA fleet",
            "gpu-balancer blind to DRA, DRA fleet")
METRICS = ("node_util_cov", "ttft_p99_ms", "slo_attainment", "evictions", "training_jobs_in_one_clique")


def dra(scenario: Scenario) -> Scenario:
    return replace(scenario, inference=replace(scenario.inference, claims="dra"))


def one(job: tuple[str, str, int]) -> tuple[str, str, int, dict[str, float]]:
    name, variant, seed = job
    scenario = named(name)
    rng = random.Random(seed * 7 + 3)  # the rng `make_policy` gives
    if variant.startswith("stock"):
        policy, world = Stock(rng), dra(scenario)
    elif "device-plugin" in variant:
        policy, world = GpuBalancer(rng), scenario
    else:
        policy, world = GpuBalancer(rng, BLIND if "blind" in variant else None), dra(scenario)
    return name, variant, seed, run_policy(world, policy.name, seed, policy=policy).metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-8")
    parser.add_argument("--scenarios", default="skewed-inference,mixed-pools,training-mix")
    args = parser.parse_args()
    seeds, scenarios = parse_seeds(args.seeds), args.scenarios.split(",")
    with Pool(2) as pool:
        results = {(n, v, s): m for n, v, s, m in pool.map(one, [(n, v, s) for n in scenarios for v in VARIANTS
                                                                  for s in seeds])}
    for name in scenarios:
        print(f"{name}, seeds {args.seeds}: mean (range)")
        for metric in METRICS:
            if metric not in results[name, VARIANTS[0], seeds[0]]:
                continue
            print(f"  {metric}")
            for variant in VARIANTS:
                values = [results[name, variant, s][metric] for s in seeds]
                print(f"    {variant:38s} {fmean(values):10.4g}  ({min(values):.4g}..{max(values):.4g})")
        same = all(results[name, VARIANTS[1], s] == results[name, VARIANTS[2], s] for s in seeds)
        print(f"  DRA fleet and device-plugin fleet give identical metrics on every seed: {same}")


if __name__ == "__main__":
    main()
