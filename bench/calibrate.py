"""How well `gpu-balancer calibrate` finds a contention scale planted in the serving world: per
built-in scenario and planted scale, the estimate's mean and range over seeds and how often its
95 % interval holds the planted scale. Runs the simulator (CPU only, no I/O but stdout).

    .venv/bin/python bench/calibrate.py --seeds 1-4 --scales 0,0.5,1,2
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.estimate import calibrate  # noqa: E402
from sim.calibration_series import channels_of, frames_of, simulated_world  # noqa: E402
from sim.scenario import named  # noqa: E402
from sim.seeds import parse_seeds  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="llm-fleet,llm-training-mix")
    parser.add_argument("--seeds", default="1-4")
    parser.add_argument("--scales", default="0,0.5,1,2")
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    print(f"planted contention scale against calibrate's estimate (TPOT), seeds {args.seeds}: mean [min–max]")
    print(f"{'scenario':18s} {'planted':>7s} {'estimate':>22s} {'interval holds it':>18s} {'exposed samples':>16s}")
    for name in args.scenarios.split(","):
        for scale in map(float, args.scales.split(",")):
            scenario = named(name)
            scenario = replace(scenario, contention=replace(scenario.contention, scale=scale))
            found = [calibrate(frames_of(simulated_world(scenario, seed)), channels_of(scenario)).tpot
                     for seed in seeds]
            values = [e.scale for e in found]
            held = sum(1 for e in found if e.interval[0] <= scale <= e.interval[1])
            print(f"{name:18s} {scale:7.2f} {fmean(values):8.3f} [{min(values):.3f}–{max(values):.3f}] "
                  f"{held:>10d} of {len(found):<5d} {fmean(e.exposed for e in found):16.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
