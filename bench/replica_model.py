"""The LLM replica model beside the published measurements: the two it was fitted to and those it
was not. Prints a table; no I/O beyond stdout.

    .venv/bin/python bench/replica_model.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.llm.curve import closed_loop  # noqa: E402
from sim.llm.engine import DECODE_BANDWIDTH_EFFICIENCY, DECODE_MEASUREMENTS, HELD_OUT, STEP_OVERHEAD_S  # noqa: E402
from sim.llm.hardware import gpu_named, model_named  # noqa: E402


def main() -> None:
    print(f"fit: bandwidth efficiency {DECODE_BANDWIDTH_EFFICIENCY:.3f}, step overhead {STEP_OVERHEAD_S * 1000:.2f} ms")
    print(f"{'':9s} {'GPU':10s} {'model':13s} {'in/out':>8s} {'C':>3s}  {'figure':18s} {'measured':>9s} "
          f"{'predicted':>9s} {'error':>6s}")
    for role, measurements in (("fitted", DECODE_MEASUREMENTS), ("held out", HELD_OUT)):
        for m in measurements:
            p = closed_loop(gpu_named(m.gpu), model_named(m.model), concurrency=m.concurrency,
                            prompt_tokens=m.prompt_tokens, output_tokens=m.output_tokens)
            for figure, measured, predicted in (("TPOT ms", m.tpot_ms, p.tpot_p50_ms),
                                                ("output tok/s", m.output_tokens_per_s, p.output_tokens_per_s),
                                                ("TTFT p50 ms", m.ttft_p50_ms, p.ttft_p50_ms)):
                if measured is None:
                    continue
                shown = role if figure == "TPOT ms" else "held out"  # only decode TPOT was fitted
                print(f"{shown:9s} {m.gpu:10s} {m.model:13s} {f'{m.prompt_tokens}/{m.output_tokens}':>8s} "
                      f"{m.concurrency:3d}  {figure:18s} {measured:9.1f} {predicted:9.1f} "
                      f"{(predicted / measured - 1) * 100:+5.0f}%")


if __name__ == "__main__":
    main()
