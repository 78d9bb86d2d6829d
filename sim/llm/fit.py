"""Fits the replica's prefill and host constants to published concurrency sweeps. Pure.

For each published point the replica runs the sweep's closed-loop clients (`sim.llm.curve`) and
the error is the squared log ratio of prediction to measurement for every latency the source
printed: TTFT p50, the TTFT tail it printed (p95 or p99) and TPOT p50. A log ratio weighs a
factor of two the same at 14 ms as at 400 ms. The fit is a grid search: three constants, a few
hundred sweeps, each a fraction of a second.

Each setup's own delay on a first token with nothing else in flight (its network, client and
tokeniser: 4 ms on one host, 22 ms on another) is no property of the GPU or the engine, so it is
read off the sweep's lowest concurrency (measured TTFT p50 less the engine's) and added to every
TTFT of that sweep, held-out sweeps included. The fleet's replicas get the mean of the fitted
setups' delays (`FITTED.frontend_seconds`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from sim.llm.curve import CurvePoint, closed_loop
from sim.llm.engine import FITTED, Fitted, Knobs
from sim.llm.hardware import gpu_named, model_named
from sim.llm.published import PublishedCurve

GRID = {
    "prefill_flops_efficiency": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
    "host_seconds_per_sequence": (0.0, 25e-6, 50e-6, 100e-6, 200e-6, 400e-6),
    "frontend_seconds_per_stream": (0.0, 0.25e-3, 0.5e-3, 1e-3, 2e-3, 3e-3),
}
"""Efficiency: a third to four fifths of dense peak. Host cost per sequence: none to 0.4 ms (vLLM
V1's engine loop is tens of µs a sequence; a busy host more). Frontend per open stream: none to
3 ms (the published sweeps' TTFT p50 grows 0.6–3.7 ms per added client while TPOT barely moves)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    curve: str
    concurrency: int
    figure: str
    measured: float
    predicted: float

    @property
    def log_error(self) -> float:
        return math.log(self.predicted / self.measured)


def predict(curve: PublishedCurve, fitted: Fitted = FITTED) -> list[CurvePoint]:
    """The replica under each of the sweep's concurrencies, as the source ran it."""
    knobs = Knobs(gpu_memory_utilization=curve.gpu_memory_utilization)
    out = []
    for point in curve.points:
        per_client = max(2, (point.requests or 20 * point.concurrency) // point.concurrency)
        out.append(closed_loop(gpu_named(curve.gpu), model_named(curve.model), concurrency=point.concurrency,
                               prompt_tokens=curve.prompt_tokens, output_tokens=curve.output_tokens,
                               requests_per_client=per_client, knobs=knobs, fitted=fitted))
    return out


def setup_delay_ms(curve: PublishedCurve, predicted: list[CurvePoint]) -> float:
    """The setup's own first-token delay: its lowest concurrency's TTFT p50 less the engine's."""
    first = next(i for i, p in enumerate(curve.points) if p.ttft_p50_ms is not None)
    return max(0.0, curve.points[first].ttft_p50_ms - predicted[first].ttft_p50_ms)


def compare(curve: PublishedCurve, fitted: Fitted = FITTED) -> tuple[float, list[Comparison]]:
    """The setup's delay (ms), and every published figure of the curve beside the model's."""
    predicted = predict(curve, replace(fitted, frontend_seconds=0.0))
    delay = setup_delay_ms(curve, predicted)
    tail_name = f"TTFT p{round(curve.tail_quantile * 100)}"
    rows = []
    for point, got in zip(curve.points, predicted):
        tail = got.ttft_p99_ms if curve.tail_quantile >= 0.99 else got.ttft_p95_ms
        for figure, measured, model in (("TTFT p50", point.ttft_p50_ms, got.ttft_p50_ms + delay),
                                        (tail_name, point.ttft_tail_ms, tail + delay),
                                        ("TPOT p50", point.tpot_p50_ms, got.tpot_p50_ms),
                                        ("output tok/s", point.output_tokens_per_s, got.output_tokens_per_s)):
            if measured is not None:
                rows.append(Comparison(curve.name, point.concurrency, figure, measured, model))
    return delay, rows


def error(curves: tuple[PublishedCurve, ...], fitted: Fitted) -> float:
    """Mean squared log error over the latency figures (throughput follows from TPOT)."""
    errors = [c.log_error ** 2 for curve in curves for c in compare(curve, fitted)[1] if c.figure != "output tok/s"]
    return sum(errors) / len(errors)


def fit(curves: tuple[PublishedCurve, ...], grid: dict[str, tuple[float, ...]] = GRID) -> Fitted:
    """The grid point with the least error, with the mean of the setups' delays as the frontend's."""
    names = list(grid)
    best = min((Fitted(**dict(zip(names, values))) for values in itertools.product(*grid.values())),
               key=lambda fitted: error(curves, fitted))
    delays = [compare(curve, best)[0] for curve in curves]
    return replace(best, frontend_seconds=round(sum(delays) / len(delays) / 1000, 4))
