"""The LLM replica model beside published concurrency sweeps: the two it was fitted to and the two
it was not. Prints a table; `--fit` reruns the grid search first (~30 s). No I/O beyond stdout.

    .venv/bin/python bench/replica_model.py [--fit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.llm.engine import DECODE_BANDWIDTH_EFFICIENCY, FITTED, STEP_OVERHEAD_S, Fitted  # noqa: E402
from sim.llm.fit import compare, error, fit  # noqa: E402
from sim.llm.published import FITTED_CURVES, HELD_OUT_CURVES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="rerun the grid search and show its result")
    fitted = fit(FITTED_CURVES) if parser.parse_args().fit else FITTED
    print(f"decode fit: bandwidth efficiency {DECODE_BANDWIDTH_EFFICIENCY:.3f}, step overhead "
          f"{STEP_OVERHEAD_S * 1000:.2f} ms")
    print(f"sweep fit: prefill efficiency {fitted.prefill_flops_efficiency}, host "
          f"{fitted.host_seconds_per_sequence * 1e6:.0f} µs a sequence, frontend {fitted.frontend_seconds_per_stream * 1e3:.2f}"
          f" ms an open stream, {fitted.frontend_seconds * 1e3:.1f} ms alone")
    print(f"mean squared log error: fitted {error(FITTED_CURVES, fitted):.3f}, held out {error(HELD_OUT_CURVES, fitted):.3f}")
    unfitted = Fitted(prefill_flops_efficiency=0.5, host_seconds_per_sequence=0.0, frontend_seconds_per_stream=0.0)
    print(f"  before this fit (efficiency 0.5 assumed, no host or frontend cost): fitted "
          f"{error(FITTED_CURVES, unfitted):.3f}, held out {error(HELD_OUT_CURVES, unfitted):.3f}")
    print(f"{'':9s} {'sweep':20s} {'C':>4s}  {'figure':13s} {'measured':>9s} {'predicted':>9s} {'error':>6s}")
    for role, curves in (("fitted", FITTED_CURVES), ("held out", HELD_OUT_CURVES)):
        for curve in curves:
            delay, rows = compare(curve, fitted)
            print(f"{role:9s} {curve.name:20s} setup delay {delay:.1f} ms (its lowest concurrency's TTFT p50 "
                  f"less the engine's); {curve.source}")
            for row in rows:
                print(f"{role:9s} {row.curve:20s} {row.concurrency:4d}  {row.figure:13s} {row.measured:9.1f} "
                      f"{row.predicted:9.1f} {(row.predicted / row.measured - 1) * 100:+5.0f}%")


if __name__ == "__main__":
    main()
