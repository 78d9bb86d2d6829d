"""The serving world's headline figures: every policy over seeds and contention scales, as mean
and range, with each policy's share of the stock → even-load gap and gpu-balancer against the
best peer and against `spread` alone. Runs the simulator (CPU only, no other I/O than stdout
and an optional JSON file).

    .venv/bin/python bench/serving_world.py --seeds 1-8 --scales 0,0.5,1,2 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.run import compare  # noqa: E402
from sim.scenario import named  # noqa: E402
from sim.seeds import parse_seeds  # noqa: E402

SHOWN = ("ttft_p99_ms", "tpot_p99_ms", "slo_attainment", "node_util_cov", "evictions", "retried_requests_percent")
PEERS = ("stock", "spread", "lownodeutilization-actual", "load-aware")
OURS = ("gpu-balancer",)


def one_run(job: tuple[str, float, int, float | None, bool]
            ) -> tuple[str, float, int, dict[str, dict[str, float]], float]:
    name, scale, seed, hours, instant_pulls = job
    scenario = named(name)
    scenario = replace(scenario, contention=replace(scenario.contention, scale=scale))
    if instant_pulls:  # what start-up costs: the same runs with images on every node at once
        scenario = replace(scenario, serving=replace(scenario.serving, image_pull_bytes_per_second=1e15))
    if hours is not None:
        scenario = replace(scenario, hours=hours)
    started = time.perf_counter()
    results = compare(scenario, seed)
    return name, scale, seed, {p: r.metrics for p, r in results.items()}, time.perf_counter() - started


def cell(values: list[float], form: str) -> str:
    return f"{form.format(fmean(values))} [{form.format(min(values))}–{form.format(max(values))}]"


def summarise(name: str, scale: float, by_seed: dict[int, dict[str, dict[str, float]]]) -> list[str]:
    seeds = sorted(by_seed)
    policies = list(by_seed[seeds[0]])
    lines = [f"\n{name}, contention scale {scale:g}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}): mean [min–max]"]
    lines.append(f"{'policy':27s}{'TTFT p99 ms':>22s}{'TPOT p99 ms':>20s}{'SLO attained %':>24s}"
                 f"{'util CoV':>20s}{'evictions':>14s}{'gap closed':>12s}")
    for policy in policies:
        get = lambda metric: [by_seed[s][policy][metric] for s in seeds]  # noqa: E731
        gaps = []
        for s in seeds:
            stock, even = by_seed[s]["stock"]["ttft_p99_ms"], by_seed[s]["stock"]["ttft_p99_at_even_contention_ms"]
            if stock - even > 1e-9:
                gaps.append((stock - by_seed[s][policy]["ttft_p99_ms"]) / (stock - even))
        lines.append(f"{policy:27s}{cell(get('ttft_p99_ms'), '{:.0f}'):>22s}{cell(get('tpot_p99_ms'), '{:.1f}'):>20s}"
                     f"{cell([100 * v for v in get('slo_attainment')], '{:.2f}'):>24s}"
                     f"{cell(get('node_util_cov'), '{:.3f}'):>20s}{fmean(get('evictions')):>14.1f}"
                     f"{(f'{fmean(gaps):.0%}' if gaps else 'no gap'):>12s}")
    for ours in OURS:
        if ours not in policies:
            continue
        worst_best, worst_spread = [], []
        for s in seeds:
            mine = by_seed[s][ours]["ttft_p99_ms"]
            best = min(by_seed[s][p]["ttft_p99_ms"] for p in PEERS if p in by_seed[s])
            worst_best.append(mine / best - 1)
            worst_spread.append(mine / by_seed[s]["spread"]["ttft_p99_ms"] - 1)
        lines.append(f"{ours}: TTFT p99 against the best peer per seed {fmean(worst_best):+.1%} mean, "
                     f"worst seed {max(worst_best):+.1%}; against spread {fmean(worst_spread):+.1%} mean, "
                     f"worst {max(worst_spread):+.1%}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="llm-fleet,llm-training-mix,llm-shared-gpus")
    parser.add_argument("--seeds", default="1-8")
    parser.add_argument("--scales", default="0,0.5,1,2")
    parser.add_argument("--hours", type=float, help="shorten every scenario to this many hours (a smoke run)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--instant-pulls", action="store_true", help="image pulls take no time")
    parser.add_argument("--json", help="write every run's metrics here")
    args = parser.parse_args()
    jobs = [(name, float(scale), seed, args.hours, args.instant_pulls) for name in args.scenarios.split(",")
            for scale in args.scales.split(",") for seed in parse_seeds(args.seeds)]
    results: dict[tuple[str, float], dict[int, dict]] = {}
    seconds = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for name, scale, seed, metrics, took in pool.map(one_run, jobs):
            results.setdefault((name, scale), {})[seed] = metrics
            seconds.append(took / len(metrics))
    for (name, scale), by_seed in results.items():
        print("\n".join(summarise(name, scale, by_seed)))
    print(f"\n{len(jobs)} runs; {fmean(seconds):.1f} s per policy per run on average ({args.jobs} processes)")
    if args.json:
        Path(args.json).write_text(json.dumps({f"{n}@{s:g}": by for (n, s), by in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
