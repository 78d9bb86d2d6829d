"""The fleet conditions' figures (issue 46): each condition scenario with its condition on and off,
every policy and `true-state` over seeds, as mean and range, with each policy's share of the
stock → true-state gap, whether the reference is ever beaten, and how far the policies that
never evict spread with the condition off. Runs the simulator (CPU only; no other I/O than stdout),
or reads `simulate --seeds A-B --output json` files it already wrote.

    .venv/bin/python bench/conditions.py --seeds 1-8 --jobs 2
    .venv/bin/python bench/conditions.py --from on.json --from off.json
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serving_world import PEERS, cell  # noqa: E402
from sim.run import compare  # noqa: E402
from sim.scenario import named, overridden  # noqa: E402
from sim.seeds import parse_seeds  # noqa: E402

CONDITIONS = {"llm-degraded-gpus": ("degradedGpus", "failures"), "llm-cpu-neighbours": ("cpuNeighbours",),
              "llm-cold-start": ("coldStart",), "llm-pcie-neighbours": ("pcieNeighbours",),
              "llm-tp-disagg": ("topology",)}
"""Each condition scenario built so far, and its conditions' keys under `conditions:`."""
NEVER_EVICT = ("stock", "spread", "load-aware", "coolest-node", "cache-affinity", "true-state")
"""The policies that place and never evict: with a condition off they should agree."""
CONDITION_PEERS = PEERS + ("cache-affinity",)
"""The peers as their users run them, the one that uses the model cache included where it runs."""
REFERENCE = "true-state"

BySeed = dict[int, dict[str, dict[str, float]]]


def one_run(job: tuple[str, bool, int, float | None]) -> tuple[str, bool, int, dict[str, dict[str, float]]]:
    name, on, seed, hours = job
    scenario = named(name)
    for key in () if on else CONDITIONS[name]:
        scenario = overridden(scenario, f"conditions.{key}.enabled", "false")
    if hours is not None:
        scenario = replace(scenario, hours=hours)
    return name, on, seed, {p: r.metrics for p, r in compare(scenario, seed).items()}


def from_file(path: Path) -> tuple[str, BySeed]:
    """A `simulate --output json` file as (its scenario, seed → policy → metrics)."""
    document = json.loads(path.read_text())
    by_seed: BySeed = {}
    for policy, metrics in document["results"].items():
        for metric, stats in metrics.items():
            # One seed's file holds the figures themselves; several seeds', their spread and each.
            per_seed = stats["per_seed"] if isinstance(stats, dict) else {document["seed"]: stats}
            for seed, value in per_seed.items():
                by_seed.setdefault(int(seed), {}).setdefault(policy, {})[metric] = value
    return document["scenario"], by_seed


def summarise(title: str, by_seed: BySeed) -> list[str]:
    seeds = sorted(by_seed)
    policies = list(by_seed[seeds[0]])

    def values(policy: str, metric: str) -> list[float]:
        return [by_seed[s][policy].get(metric, 0.0) for s in seeds]

    lines = [f"\n{title}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}): mean [min–max]",
             f"{'policy':27s}{'TTFT p99 ms':>24s}{'TTFT p50':>10s}{'TPOT p99':>10s}{'SLO %':>8s}"
             f"{'degraded %':>11s}{'unlimited p99':>14s}{'across %':>9s}{'ready p50 s':>12s}{'evictions':>10s}{'gap closed':>11s}"]
    stock = fmean(values("stock", "ttft_p99_ms"))
    best = fmean(values(REFERENCE, "ttft_p99_ms")) if REFERENCE in policies else None
    for policy in policies:
        p99 = fmean(values(policy, "ttft_p99_ms"))
        gap = f"{(stock - p99) / (stock - best):.0%}" if best is not None and stock - best > 1e-9 else "no gap"
        lines.append(f"{policy:27s}{cell(values(policy, 'ttft_p99_ms'), '{:.0f}'):>24s}"
                     f"{fmean(values(policy, 'ttft_p50_ms')):10.0f}{fmean(values(policy, 'tpot_p99_ms')):10.1f}"
                     f"{100 * fmean(values(policy, 'slo_attainment')):8.2f}"
                     f"{fmean(values(policy, 'requests_on_degraded_gpu_percent')):11.2f}"
                     f"{fmean(values(policy, 'ttft_p99_unlimited_ms')):14.0f}"
                     f"{fmean(values(policy, 'requests_across_domains_percent')):9.1f}"
                     f"{fmean(values(policy, 'time_to_ready_p50_s')):12.0f}"
                     f"{fmean(values(policy, 'evictions')):10.1f}{gap:>11s}")
    if best is not None:
        beaten = [(s, p) for s in seeds for p in policies
                  if by_seed[s][p]["ttft_p99_ms"] < by_seed[s][REFERENCE]["ttft_p99_ms"] - 1e-9]
        lines.append(f"{REFERENCE} beaten on TTFT p99 in {len(beaten)} of {len(seeds) * (len(policies) - 1)} "
                     f"policy-seeds{': ' + ', '.join(f'{p} seed {s}' for s, p in beaten[:8]) if beaten else ''}")
    peers = [p for p in CONDITION_PEERS if p in policies]
    if "gpu-balancer" in policies and peers:
        best_peer = min(peers, key=lambda p: fmean(values(p, "ttft_p99_ms")))
        ours, theirs = fmean(values("gpu-balancer", "ttft_p99_ms")), fmean(values(best_peer, "ttft_p99_ms"))
        lines.append(f"gpu-balancer against the best peer ({best_peer}): TTFT p99 {ours / theirs - 1:+.1%} by mean; "
                     f"SLO attainment {100 * fmean(values('gpu-balancer', 'slo_attainment')):.2f} % against "
                     f"{100 * fmean(values(best_peer, 'slo_attainment')):.2f} %")
    placing = [p for p in NEVER_EVICT if p in policies and p != REFERENCE]
    if placing:
        means = [fmean(values(p, "ttft_p99_ms")) for p in placing]
        lines.append(f"policies that never evict ({', '.join(placing)}): TTFT p99 means within "
                     f"{max(means) / min(means) - 1:.1%} of each other")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(CONDITIONS))
    parser.add_argument("--seeds", default="1-8", help="A-B or N")
    parser.add_argument("--hours", type=float, default=None, help="shorten every run (tests)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--from", dest="files", action="append", default=[], type=Path,
                        help="summarise a simulate --seeds --output json file instead of running (repeatable)")
    args = parser.parse_args()
    if args.files:
        # Files of one scenario (seeds run apart) are summarised together.
        merged: dict[str, tuple[list[str], BySeed]] = {}
        for path in args.files:
            scenario, by_seed = from_file(path)
            names, seeds = merged.setdefault(scenario, ([], {}))
            names.append(path.name)
            seeds.update(by_seed)
        for scenario, (names, by_seed) in merged.items():
            print("\n".join(summarise(f"{scenario} ({', '.join(names)})", by_seed)))
        return 0
    names = args.scenarios.split(",")
    unknown = [n for n in names if n not in CONDITIONS]
    if unknown:
        print(f"conditions.py: not a condition scenario: {', '.join(unknown)} (known: {', '.join(CONDITIONS)})",
              file=sys.stderr)
        return 2
    jobs = [(name, on, seed, args.hours) for name in names for on in (True, False) for seed in parse_seeds(args.seeds)]
    found: dict[tuple[str, bool], BySeed] = {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for name, on, seed, metrics in pool.map(one_run, jobs):
            found.setdefault((name, on), {})[seed] = metrics
    for (name, on), by_seed in found.items():
        print("\n".join(summarise(f"{name}, {CONDITIONS[name]} {'on' if on else 'off'}", by_seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
