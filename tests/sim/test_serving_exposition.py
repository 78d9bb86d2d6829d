"""The serving world as its exporters serve it: clocks held down past the node's power budget,
dcgm-exporter and vLLM text in the real exporters' shapes, read through a real Prometheus."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpu_balancer.local_prometheus import free_port
from scoring import dcgm
from scoring.ingest.prometheus import connect, read_snapshot
from scoring.policy import default_policy
from sim.fake_dcgm import make_server, serve_in_background
from sim.llm.exposition import dcgm_text, serving_text, ticks
from sim.llm.world import GPU_IDLE, SW_POWER_CAP
from tests.sim.test_serving_world import SMALL, placed

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_exporters"


def families(text: str) -> dict[str, list]:
    """Samples by family name (a paste without `# TYPE` lines parses as one family a line)."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, []).extend(family.samples)
    return out


def real_families(name: str) -> dict:
    return families((REAL / name).read_text())


def test_past_the_power_budget_clocks_fall_with_the_power_cap_reason_and_at_scale_zero_they_do_not():
    # A budget of a fifth of the GPUs' TDP: replicas in decode draw more (assumption-free: any
    # serving node crosses it), so the cap must show.
    tight = replace(SMALL, contention=replace(SMALL.contention, gpu_power_budget_share=0.2))
    seen = {}
    for scale in (0.0, 1.0):
        world = placed(replace(tight, contention=replace(tight.contention, scale=scale)), ticks_run=2)
        reports = [r for node in world.gpu_readings[-1].values() for r in node.values()]
        busy = [r for r in reports if r.sm_active > 0]
        assert busy and all(r.clock_reasons == GPU_IDLE for r in reports if r.sm_active == 0)
        seen[scale] = busy
    assert all(r.clock_reasons == 0 and r.sm_clock_mhz == 1980 for r in seen[0.0])
    assert all(r.clock_reasons == SW_POWER_CAP and r.sm_clock_mhz < 1980 for r in seen[1.0])


def test_at_the_default_budget_a_serving_fleet_is_never_power_capped():
    world = placed(SMALL, ticks_run=3)
    assert not any(r.clock_reasons & SW_POWER_CAP for t in world.gpu_readings for n in t.values() for r in n.values())


def test_the_dcgm_text_has_the_real_exporters_labels_and_a_duty_cycle_far_above_the_tensor_work():
    world = placed(SMALL, ticks_run=3)
    ours = families(dcgm_text(world, ticks(world) - 1))
    real = real_families("aicr-h100-gpu-node-1-exposition-sampled.txt")
    t4 = real_families("cncf-ai-conformance-ericsson-t4-gpu-util-91-prof.txt")
    real_labels = {k for f in real.values() for s in f for k in s.labels}  # the file is sampled
    for name in set(real) & set(ours):
        assert {k for s in ours[name] for k in s.labels} <= real_labels, name
    # What the T4 at GPU_UTIL 91 exports, we export too.
    assert set(t4) & {dcgm.SM_CLOCK, dcgm.PIPE_TENSOR_ACTIVE, dcgm.DRAM_ACTIVE, dcgm.GR_ENGINE_ACTIVE} <= set(ours)
    assert {dcgm.SM_OCCUPANCY, dcgm.SM_ACTIVE, dcgm.CLOCK_THROTTLE_REASONS, dcgm.POWER_MGMT_LIMIT} <= set(ours)

    def by_gpu(name: str) -> dict:
        return {(s.labels["Hostname"], s.labels["gpu"]): s for s in ours[name]}

    util, tensor, fb = by_gpu(dcgm.GPU_UTIL), by_gpu(dcgm.PIPE_TENSOR_ACTIVE), by_gpu(dcgm.FB_USED)
    serving = [key for key, s in util.items() if "pod" in s.labels and s.value > 0]
    assert serving
    for key in serving:
        # As the real T4 (GPU_UTIL 91, tensor pipes 0.006): the duty cycle says busy, the work says otherwise.
        assert util[key].value >= 80 and tensor[key].value < 0.5 * util[key].value / 100
        assert fb[key].value == 73728  # vLLM's 90 % of 80 GiB, whatever the load
    reasons = by_gpu(dcgm.CLOCK_THROTTLE_REASONS)
    idle = [key for key, s in util.items() if "pod" not in s.labels]
    idle_a30 = real_families("dcgm-exporter-issue-317-a30-mig-clock-throttle-reasons.txt")[dcgm.CLOCK_THROTTLE_REASONS]
    assert {s.value for s in idle_a30} == {GPU_IDLE}  # the bit, as a real idle GPU reports it
    assert idle and all(reasons[key].value == GPU_IDLE for key in idle)


def test_the_vllm_text_has_the_real_servers_families_and_labels():
    world = placed(SMALL, ticks_run=3)
    ours = families(serving_text(world, ticks(world) - 1))
    real = real_families("vllm-docs-design-metrics-gpu-unstated-llama31-8b-v1-running8.txt")
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds"} <= set(ours)
    for name in set(real) & set(ours):
        assert {k for s in real[name] for k in s.labels} - {"le"} <= {
            k for s in ours[name] for k in s.labels}, name
    running = {s.labels["pod"]: s.value for s in ours["vllm:num_requests_running"]}
    assert set(running) == {key.split("/", 1)[1] for key in world.serving[-1]}


def test_a_real_prometheus_reads_the_exported_tick_as_the_product_reads_any_cluster(prometheus):
    world = placed(SMALL, ticks_run=3)
    text = dcgm_text(world, ticks(world) - 1)
    server = make_server(text, port=0)
    serve_in_background(server)
    try:
        prom = prometheus(f"127.0.0.1:{server.server_port}")
        exported = families(text)[dcgm.GR_ENGINE_ACTIVE]
        prom.wait_for(dcgm.GR_ENGINE_ACTIVE, at_least=len(exported))
        policy = default_policy()
        snapshot = read_snapshot(connect(replace(policy.prometheus, url=prom.url)), policy)
    finally:
        server.shutdown()
    # With the profiling fields exported the product reads the graphics engine's share, not GPU_UTIL.
    expected: dict[str, float] = {}
    for s in exported:
        expected[s.labels["Hostname"]] = expected.get(s.labels["Hostname"], 0.0) + 100 * s.value
    assert {n.name: n.util_sum for n in snapshot.nodes} == pytest.approx(expected, abs=1e-3)


def test_fake_dcgm_replays_a_serving_world_scenario_over_http():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "gpu_balancer", "fake-dcgm", "--scenario", "llm-fleet",
                                "--speed", "600", "--port", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert "fake-dcgm: llm-fleet seed 1, replayed at 600x" in process.stdout.readline()
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        process.terminate()
        process.wait(timeout=10)
    served = families(text)
    assert len({s.labels["Hostname"] for s in served[dcgm.SM_CLOCK]}) == 32
    assert all(s.value in (345, 1980) for s in served[dcgm.SM_CLOCK])
