"""Where the serving signal's gain comes from: the latency-sensitivity scenario over seeds with DCGM
only, with the serving series (as shipped), and with them in the advice but not the descheduler.
Prints figures; does no I/O beyond stdout.

    .venv/bin/python bench/serving_ablation.py [--seeds 1-8] [--hours 6]
"""

from __future__ import annotations

import argparse
import random
from dataclasses import replace
from multiprocessing import Pool
from statistics import fmean

from scoring.policy import default_policy
from sim.policies import GpuBalancer
from sim.run import run_policy
from sim.scenario import named
from sim.seeds import parse_seeds


class AdviceOnly(GpuBalancer):
    """The serving signal in the heat model and the advice, not in the descheduler."""

    moves_on_serving = False


def dcgm_only(rng: random.Random) -> GpuBalancer:
    """gpu-balancer with `serving.enabled` off: the heat model judges on DCGM alone."""
    policy = default_policy()
    return GpuBalancer(rng, replace(policy, serving=replace(policy.serving, enabled=False)))


VARIANTS = {"DCGM only": dcgm_only, "gpu-balancer": GpuBalancer, "advice only": AdviceOnly}


def one(job: tuple[str, int, float]) -> tuple[str, int, dict[str, float]]:
    variant, seed, hours = job
    scenario = replace(named("latency-sensitivity"), hours=hours)
    policy = VARIANTS[variant](random.Random(seed * 7 + 3))  # the rng `make_policy` gives
    return variant, seed, run_policy(scenario, variant, seed, policy=policy).metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-8")
    parser.add_argument("--hours", type=float, default=6.0)
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    with Pool(2) as pool:
        results = {(v, s): m for v, s, m in pool.map(one, [(v, s, args.hours) for v in VARIANTS for s in seeds])}
    base = "DCGM only"
    for metric in ("ttft_p99_sensitive_ms", "ttft_p99_ms", "evictions"):
        print(metric)
        for variant in VARIANTS:
            values = [results[variant, s][metric] for s in seeds]
            line = f"  {variant:22s} mean {fmean(values):8.0f}  range {min(values):.0f}..{max(values):.0f}"
            if variant != base and metric != "evictions":
                changes = [results[variant, s][metric] / results[base, s][metric] - 1 for s in seeds]
                line += f"  against DCGM only {100 * fmean(changes):+.1f} % ({100 * min(changes):+.1f}..{100 * max(changes):+.1f})"
            print(line)


if __name__ == "__main__":
    main()
