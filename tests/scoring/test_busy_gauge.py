"""The busy gauge: a policy may read a GPU's busy share from a profiling ratio that grows with the
work (the tensor pipe's activity) instead of a duty cycle, scaled to the reading that means fully
busy. Read through a real Prometheus, raw and through the recording rules, from the serving
world's exporter text; a unit that lacks the gauge is still measured."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from statistics import fmean

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scoring import dcgm
from scoring.dcgm import BusyMeasure
from scoring.ingest.series import gpu_samples, series_from_families
from scoring.policy import PolicyError, default_policy, parse_policy
from sim.fake_dcgm import make_server, serve_in_background
from sim.llm.exposition import dcgm_text, ticks
from tests.conftest import FIXTURES, read_through
from tests.sim.test_serving_world import SMALL, placed

FULL_SCALE = 0.4
TENSOR = replace(default_policy(), telemetry=replace(default_policy().telemetry, busy_gauge=dcgm.PIPE_TENSOR_ACTIVE,
                                                     busy_gauge_full_scale=FULL_SCALE))


def per_node(text: str, metric: str, factor: float) -> dict[str, float]:
    """Each node's mean of one gauge over its GPUs, scaled to 0–100, read from the text itself."""
    values = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric:
                values[sample.labels["Hostname"]].append(min(100.0, sample.value * factor))
    return {node: fmean(found) for node, found in values.items()}


@pytest.mark.parametrize("path", ["raw", "recorded"])
def test_the_tensor_pipe_read_as_busy_share_scaled_to_its_full_scale(prometheus, path):
    world = placed(SMALL, ticks_run=3)
    text = dcgm_text(world, ticks(world) - 1)
    server = make_server(text, port=0)
    serve_in_background(server)
    try:
        prom = prometheus(f"127.0.0.1:{server.server_port}", recorded=path == "recorded", policy=TENSOR)
        prom.wait_for(dcgm.PIPE_TENSOR_ACTIVE, at_least=text.count(f"\n{dcgm.PIPE_TENSOR_ACTIVE}{{"))
        snapshot = read_through(prom, TENSOR, path)
    finally:
        server.shutdown()
    tensor = per_node(text, dcgm.PIPE_TENSOR_ACTIVE, 100 / FULL_SCALE)
    assert {n.name: round(n.util_mean, 6) for n in snapshot.nodes} == pytest.approx(tensor, abs=1e-3)
    engine = per_node(text, dcgm.GR_ENGINE_ACTIVE, 100)
    # The duty cycle reads otherwise, so the first assertion could not pass by reading it: the knob
    # changes what heat sees. (With the replica fitted to published sweeps, this small fleet's
    # tensor pipe at a 0.4 full scale lands within 3 points of the duty cycle; it differed by more
    # before the fit.)
    assert any(abs(engine[node] - tensor[node]) > 1 for node in tensor)


def test_a_mig_instance_without_the_gauge_is_measured_by_the_next_it_reports():
    # Real H100 MIG instances that export GR_ENGINE_ACTIVE alone (dcgm-exporter issue #512).
    text = (FIXTURES / "real_exporters" / "dcgm-exporter-issue-512-h100-mig-1g10gb-prof-only.txt").read_text()
    readings = series_from_families(text_string_to_metric_families(text))
    engine = [s.util_percent for s in gpu_samples(readings)]
    tensor = [s.util_percent for s in gpu_samples(readings, busy=BusyMeasure(dcgm.PIPE_TENSOR_ACTIVE, FULL_SCALE))]
    assert engine and tensor == engine and all(u is not None for u in tensor)


@pytest.mark.parametrize(("document", "field"), [
    ("telemetry: {busyGauge: DCGM_FI_DEV_GPU_UTIL}", "telemetry.busyGauge"),
    ("telemetry: {busyGauge: tensor}", "telemetry.busyGauge"),
    ("telemetry: {busyGaugeFullScale: 0}", "telemetry.busyGaugeFullScale"),
    ("telemetry: {busyGaugeFullScale: 40}", "telemetry.busyGaugeFullScale"),
])
def test_a_gauge_it_cannot_read_or_a_scale_that_is_no_ratio_is_refused_by_name(document, field):
    with pytest.raises(PolicyError, match=field.replace(".", r"\.")):
        parse_policy(document)


def test_the_default_reads_what_it_read_before_the_knob():
    assert default_policy().telemetry.busy == BusyMeasure(dcgm.GR_ENGINE_ACTIVE, 1.0)
    parsed = parse_policy(f"telemetry: {{busyGauge: {dcgm.PIPE_TENSOR_ACTIVE}, busyGaugeFullScale: 0.4}}")
    assert parsed.telemetry.busy == BusyMeasure(dcgm.PIPE_TENSOR_ACTIVE, 0.4)
    off = parse_policy(f"telemetry: {{useProfilingMetrics: false, busyGauge: {dcgm.PIPE_TENSOR_ACTIVE}}}")
    assert off.telemetry.busy.gauge is None
