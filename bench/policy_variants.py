"""gpu-balancer alone under policy variants on one serving-world scenario, over seeds: TTFT p99
mean, range and per seed, SLO attainment, evictions and requests met on a degraded GPU. The peers
do not read the product's policy, so their figures are the scenario's own runs'. Runs the simulator
(CPU only; no I/O beyond stdout and the policy files named).

    .venv/bin/python bench/policy_variants.py --scenario llm-degraded-gpus --seeds 1-8 --jobs 2
    .venv/bin/python bench/policy_variants.py --variant mine=policy.yaml   # and the built-in ones
    .venv/bin/python bench/policy_variants.py --only "as shipped,no degraded memory"
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scoring.policy import parse_policy  # noqa: E402
from sim.policies import make_policy  # noqa: E402
from sim.run import run_policy  # noqa: E402
from sim.scenario import named  # noqa: E402
from sim.seeds import parse_seeds  # noqa: E402

VARIANTS = {
    "as shipped": "",
    "no degraded signal": "heat:\n  signals: [{name: temperature}, {name: throttling}, {name: health}, "
                          "{name: host_cpu}, {name: pcie}]\n",
    "no pcie signal": "heat:\n  signals: [{name: temperature}, {name: throttling}, {name: health}, "
                      "{name: host_cpu}, {name: degraded}]\n",
    "no degraded memory": "heat:\n  signals: [{name: temperature}, {name: throttling}, {name: health}, "
                          "{name: host_cpu}, {name: degraded, args: {memorySeconds: 0}}, {name: pcie}]\n",
    "degraded strategy off": "descheduler:\n  strategies: [{name: health}, {name: utilisation}, "
                             "{name: throttling}, {name: serving}]\n",
}
"""Built-in variants (issue 47, items 2 and 3), each a policy document over the defaults."""


def one(job: tuple[str, str, str, int, float | None]) -> tuple[str, int, dict[str, float]]:
    variant, document, scenario_name, seed, hours = job
    scenario = named(scenario_name)
    if hours is not None:
        scenario = replace(scenario, hours=hours)
    policy = make_policy("gpu-balancer", seed, parse_policy(document))
    return variant, seed, run_policy(scenario, "gpu-balancer", seed, policy=policy).metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="llm-degraded-gpus")
    parser.add_argument("--seeds", default="1-8", help="A-B or N")
    parser.add_argument("--hours", type=float, default=None, help="shorten every run (tests)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FILE",
                        help="a policy file of your own, run beside the built-in variants")
    parser.add_argument("--only", default="", metavar="NAME,NAME",
                        help="run only these built-in variants (default: all of them)")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()] or list(VARIANTS)
    if unknown := [name for name in chosen if name not in VARIANTS]:
        parser.error(f"--only: not a built-in variant: {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    variants = {name: VARIANTS[name] for name in chosen}
    for given in args.variant:
        name, _, path = given.partition("=")
        if not name or not path:
            parser.error(f"--variant {given!r}: expected NAME=FILE")
        try:
            variants[name] = Path(path).read_text()
            parse_policy(variants[name])
        except (OSError, ValueError) as error:
            parser.error(f"--variant {name}: {error}")
    seeds = parse_seeds(args.seeds)
    jobs = [(v, doc, args.scenario, s, args.hours) for v, doc in variants.items() for s in seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = {(v, s): m for v, s, m in pool.map(one, jobs)}
    print(f"{args.scenario}, gpu-balancer alone, seeds {args.seeds}: TTFT p99 ms mean [min–max]")
    for variant in variants:
        got = [results[variant, s] for s in seeds]
        ttft = [m["ttft_p99_ms"] for m in got]
        per_seed = ", ".join(f"{t:,.0f}" for t in ttft)
        print(f"  {variant:24s} {fmean(ttft):>10,.0f} [{min(ttft):,.0f}–{max(ttft):,.0f}]  "
              f"SLO {100 * fmean(m['slo_attainment'] for m in got):.2f} %  "
              f"evictions {fmean(m['evictions'] for m in got):.1f}  "
              f"on a degraded GPU {fmean(m.get('requests_on_degraded_gpu_percent', 0.0) for m in got):.2f} %  "
              f"per seed: {per_seed}")
        if unlimited := [m["ttft_p99_unlimited_ms"] for m in got if "ttft_p99_unlimited_ms" in m]:
            print(f"  {'':24s} services without CPU limits: TTFT p99 {fmean(unlimited):,.0f} "
                  f"[{min(unlimited):,.0f}–{max(unlimited):,.0f}], per seed: {', '.join(f'{u:,.0f}' for u in unlimited)}")


if __name__ == "__main__":
    main()
