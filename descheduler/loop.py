"""The descheduler's loop mode (a Deployment instead of the CronJob): a run every `every` seconds;
a run that cannot read telemetry is counted on /metrics and logged, and the loop goes on. The run
itself is injected; the loop does no I/O but its log line and its sleep."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from descheduler.metrics import DeschedulerMetrics
from scoring.ingest.prometheus import TelemetryError


def run_every(every: float, run: Callable[[DeschedulerMetrics], object], metrics: DeschedulerMetrics, *,
              runs: int | None = None, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> None:
    """Call `run(metrics)` every `every` seconds (from one start to the next), `runs` times or for ever."""
    done = 0
    while runs is None or done < runs:
        started = clock()
        try:
            run(metrics)
        except TelemetryError as error:
            metrics.observe_failure("telemetry-error")
            print(f"gpu-balancer deschedule: {error}", file=sys.stderr, flush=True)
        done += 1
        sleep(max(0.0, every - (clock() - started)))
