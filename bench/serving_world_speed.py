"""How long the serving world takes: a 96-node × 8-GPU fleet for two hours, one seed, each policy
timed alone, and the replica profile's tabulation timed apart (it is built once per process).
CPU only; prints figures, no other I/O.

    .venv/bin/python bench/serving_world_speed.py [--scenario llm-fleet] [--policies stock,gpu-balancer]
        [--seed 1] [--nodes 96] [--hours 2]

`--scenario llm-degraded-gpus` (or another condition scenario) times that scenario's world, its
conditions on, at the same size.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.llm.hardware import gpu_named, model_named  # noqa: E402
from sim.llm.profile import RequestMix, profile  # noqa: E402
from sim.policies import policies_for  # noqa: E402
from sim.run import run_policy  # noqa: E402
from sim.scenario import FleetShape, named  # noqa: E402

TARGET_SECONDS = 120.0
"""Issues 31 and 46: at most 2 minutes per seed per policy for this fleet."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="llm-fleet", help="a built-in scenario (its fleet resized)")
    parser.add_argument("--policies", default="", help="default: the scenario's line-up")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=96, help="the target is set for 96")
    parser.add_argument("--hours", type=float, default=2.0, help="the target is set for 2")
    args = parser.parse_args()
    base = named(args.scenario)
    # Three times the default fleet, and three times its services, at the same load.
    scenario = replace(base, name=f"{args.scenario}-{args.nodes}", hours=args.hours, fleet=FleetShape(nodes=args.nodes),
                       inference=replace(base.inference, services=max(1, args.nodes * 120 // 96)))
    sv = scenario.serving
    started = time.perf_counter()
    profile(gpu_named("H100-80GB"), model_named(sv.model), RequestMix(sv.prompt_tokens, sv.output_tokens,
                                                                      sv.length_sigma))
    print(f"profile (H100-80GB, {sv.model}): {time.perf_counter() - started:.1f} s, once per process")
    print(f"{'policy':28s}{'seconds':>9s}{'of target':>11s}")
    for name in (args.policies.split(",") if args.policies else policies_for(scenario)):
        started = time.perf_counter()
        run_policy(scenario, name, args.seed)
        took = time.perf_counter() - started
        print(f"{name:28s}{took:9.1f}{took / TARGET_SECONDS:11.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
