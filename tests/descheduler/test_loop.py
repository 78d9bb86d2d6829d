"""The descheduler's loop mode: runs on its period, and a run that cannot read telemetry is
counted and the loop goes on."""

from __future__ import annotations

from descheduler.loop import run_every
from descheduler.metrics import DeschedulerMetrics
from scoring.ingest.prometheus import TelemetryError


def test_a_failed_run_is_counted_and_the_next_runs_on_its_period(capsys):
    calls, slept = [], []
    now = iter([0.0, 2.0, 10.0, 11.5, 20.0, 20.5])  # each run's start and end

    def run(metrics: DeschedulerMetrics) -> None:
        calls.append(metrics)
        if len(calls) == 2:
            raise TelemetryError("Prometheus at http://prom:9090 did not answer")

    metrics = DeschedulerMetrics()
    run_every(10.0, run, metrics, runs=3, sleep=slept.append, clock=lambda: next(now))
    assert len(calls) == 3 and all(m is metrics for m in calls)
    assert slept == [8.0, 8.5, 9.5]
    assert "did not answer" in capsys.readouterr().err
    assert metrics.registry.get_sample_value("gpu_balancer_descheduler_runs_total",
                                             {"result": "telemetry-error"}) == 1.0
