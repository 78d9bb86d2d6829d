"""What each exporter signal of one LLM replica says as its load grows: the evidence for which
busy measure to read (`sim/llm/telemetry.py`). Prints the mean of 1 s samples per concurrency;
no I/O beyond stdout.

    .venv/bin/python bench/replica_signals.py [--gpu H100-80GB] [--model Llama-3.1-8B]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.llm.curve import run_clients  # noqa: E402
from sim.llm.hardware import gpu_named, model_named  # noqa: E402
from sim.llm.telemetry import Sampler  # noqa: E402

FIELDS = ("gpu_util", "dram_active", "pipe_tensor_active", "sm_occupancy", "kv_cache_usage_perc",
          "num_requests_running", "num_requests_waiting", "fb_used_mib")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H100-80GB")
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--output-tokens", type=int, default=256)
    args = parser.parse_args()
    gpu, model = gpu_named(args.gpu), model_named(args.model)
    print(f"{model.name} on {gpu.name}, {args.prompt_tokens} in / {args.output_tokens} out, closed-loop clients; "
          "mean of 1 s samples:")
    print(f"{'clients':>7s} " + " ".join(f"{name:>20s}" for name in FIELDS) + f" {'TPOT p50 ms':>12s}")
    for concurrency in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        sampler = Sampler(1.0)
        _, measured = run_clients(gpu, model, concurrency=concurrency, prompt_tokens=args.prompt_tokens,
                                  output_tokens=args.output_tokens, requests_per_client=6, observe=sampler.observe)
        tpot = sorted(r.tpot for r in measured)[len(measured) // 2] * 1000
        means = [fmean(getattr(r, name) for r in sampler.readings) for name in FIELDS]
        print(f"{concurrency:7d} " + " ".join(f"{value:20.3f}" for value in means) + f" {tpot:12.2f}")


if __name__ == "__main__":
    main()
