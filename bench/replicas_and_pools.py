"""How much of gpu-balancer's gain survives node pools and several webhook replicas (simulator, pure).

For each configuration, over seeds: the relative change against stock of node-utilisation CoV and
of TTFT p99, plus advice_feasible and advice_followed; then each configuration's mean gain as
a share of the reference (skewed-inference, one replica) and as a share of the oracle's gain in
the same scenario (what full knowledge of true load achieves there: pools pinned by selectors
leave less to balance than one open pool). Usage:
    python bench/replicas_and_pools.py --seeds 1-8 [--hours H]
"""

from __future__ import annotations

import argparse
from statistics import fmean

from sim.run import compare
from sim.scenario import named, replace
from sim.seeds import parse_seeds

CONFIGS = (("skewed-inference", 1), ("skewed-inference", 2), ("mixed-pools", 1), ("mixed-pools", 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-8")
    parser.add_argument("--hours", type=float, default=None, help="shorten every scenario (default: its own)")
    parser.add_argument("--bind-delay", type=float, default=30.0,
                        help="seconds before a binding reaches the other replicas (default: one tick)")
    args = parser.parse_args()
    gains: dict[tuple[str, int], dict[str, list[float]]] = {}
    for scenario_name, replicas in CONFIGS:
        scenario = replace(named(scenario_name), webhook_replicas=replicas,
                           bind_delay_seconds=args.bind_delay if replicas > 1 else 0.0)
        if args.hours:
            scenario = replace(scenario, hours=args.hours)
        rows = gains.setdefault((scenario_name, replicas), {"cov": [], "p99": [], "feasible": [], "followed": [],
                                                            "oracle_cov": [], "oracle_p99": []})
        for seed in parse_seeds(args.seeds):
            result = compare(scenario, seed, ("stock", "gpu-balancer", "oracle"))
            stock, ours, oracle = (result[n].metrics for n in ("stock", "gpu-balancer", "oracle"))
            for key, metric in (("cov", "node_util_cov"), ("p99", "ttft_p99_ms")):
                rows[key].append(100 * (ours[metric] / stock[metric] - 1))
                rows["oracle_" + key].append(100 * (oracle[metric] / stock[metric] - 1))
            rows["feasible"].append(100 * ours.get("advice_feasible", 1.0))
            rows["followed"].append(100 * ours.get("advice_followed", 0.0))
    reference = gains[CONFIGS[0]]
    print(f"seeds {args.seeds}; change against stock, mean (min..max); kept = mean gain / reference mean gain")
    for (scenario_name, replicas), rows in gains.items():
        cells = []
        for metric in ("cov", "p99"):
            values = rows[metric]
            kept = fmean(values) / fmean(reference[metric]) if fmean(reference[metric]) else float("nan")
            of_oracle = fmean(values) / fmean(rows["oracle_" + metric]) if fmean(rows["oracle_" + metric]) else float("nan")
            cells.append(f"{metric} {fmean(values):+.1f}% ({min(values):+.1f}..{max(values):+.1f}) kept {kept:.0%}, "
                         f"{of_oracle:.0%} of oracle's {fmean(rows['oracle_' + metric]):+.1f}%")
        cells.append(f"advice_feasible {min(rows['feasible']):.1f}% min")
        cells.append(f"advice_followed {fmean(rows['followed']):.1f}%")
        print(f"{scenario_name:16} replicas={replicas}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
