"""Which DCGM gauge should stand for a GPU's busy share where no serving series exist: gpu-balancer
(DCGM only) run over the serving world's LLM scenarios with each candidate gauge, as mean and
range over seeds. Runs the simulator (CPU only, no other I/O than stdout).

The candidates and their full scales are fixed here, before any run, from what the replica model
and the published reports say each gauge does under an LLM's load (`bench/replica_signals.py`):
GR_ENGINE_ACTIVE (today's default; a duty cycle, ~90 % at one request), PIPE_TENSOR_ACTIVE at a
full scale of 0.4 (what an H100 serving Llama-3.1-8B reads with its batch full), SM_OCCUPANCY at
1.0 (grows with the batch in the model, though dcgm-exporter #301 reports it flat in practice).

    .venv/bin/python bench/busy_gauge.py --seeds 1-8 --scales 0.5,1 --jobs 2
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scoring import dcgm  # noqa: E402
from scoring.policy import default_policy  # noqa: E402
from sim.policies import make_policy  # noqa: E402
from sim.run import run_policy  # noqa: E402
from sim.scenario import named  # noqa: E402
from sim.seeds import parse_seeds  # noqa: E402

GAUGES = {"gr-engine-active": (dcgm.GR_ENGINE_ACTIVE, 1.0), "pipe-tensor-active": (dcgm.PIPE_TENSOR_ACTIVE, 0.4),
          "sm-occupancy": (dcgm.SM_OCCUPANCY, 1.0)}
SCENARIOS = ("llm-fleet", "llm-training-mix", "llm-shared-gpus")


def one_run(job: tuple[str, float, int, str]) -> tuple[str, float, int, str, dict[str, float]]:
    name, scale, seed, gauge = job
    scenario = named(name)
    scenario = replace(scenario, contention=replace(scenario.contention, scale=scale))
    if gauge == "spread":
        return name, scale, seed, gauge, run_policy(scenario, "spread", seed).metrics
    metric, full_scale = GAUGES[gauge]
    base = default_policy()
    policy = replace(base, telemetry=replace(base.telemetry, busy_gauge=metric, busy_gauge_full_scale=full_scale))
    result = run_policy(scenario, "gpu-balancer", seed, policy=make_policy("gpu-balancer", seed, policy))
    return name, scale, seed, gauge, result.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--seeds", default="1-8")
    parser.add_argument("--scales", default="0.5,1")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    arms = (*GAUGES, "spread")
    jobs = [(name, float(scale), seed, arm) for name in args.scenarios.split(",")
            for scale in args.scales.split(",") for seed in parse_seeds(args.seeds) for arm in arms]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, jobs))
    for name in args.scenarios.split(","):
        for scale in sorted({float(s) for s in args.scales.split(",")}):
            print(f"\n{name}, contention scale {scale:g}: mean [min–max] over seeds {args.seeds}")
            print(f"{'gpu-balancer reading':30s}{'TTFT p99 ms':>20s}{'SLO attained %':>24s}{'evictions':>12s}")
            for arm in arms:
                rows = [m for n, s, _, a, m in results if (n, s, a) == (name, scale, arm)]
                ttft, slo = [m["ttft_p99_ms"] for m in rows], [100 * m["slo_attainment"] for m in rows]
                label = arm if arm == "spread" else f"{arm} (full {GAUGES[arm][1]:g})"
                print(f"{label:30s}" + f"{fmean(ttft):.0f} [{min(ttft):.0f}–{max(ttft):.0f}]".rjust(20)
                      + f"{fmean(slo):.1f} [{min(slo):.1f}–{max(slo):.1f}]".rjust(24)
                      + f"{fmean(m['evictions'] for m in rows):.1f}".rjust(12))


if __name__ == "__main__":
    main()
