"""The LLM replica model: published figures in, a continuous-batching server's latencies out, held
against measurements it was not fitted to."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim.llm.curve import closed_loop, quantile
from dataclasses import replace

from sim.llm.engine import FITTED, Fitted, Knobs, Replica, Request, fit_decode, vllm_batch_defaults
from sim.llm.fit import GRID, compare, error
from sim.llm.hardware import GPUS, MODELS, gpu_named, mig_slice, model_named
from sim.llm.published import DECODE_MEASUREMENTS, FITTED_CURVES, HELD_OUT_CURVES, MUSHFIQ_RTX4090


def point(measurement):
    return closed_loop(gpu_named(measurement.gpu), model_named(measurement.model),
                       concurrency=measurement.concurrency, prompt_tokens=measurement.prompt_tokens,
                       output_tokens=measurement.output_tokens)


@pytest.mark.parametrize("measurement", DECODE_MEASUREMENTS, ids=lambda m: m.gpu)
def test_the_fitted_engine_gives_back_the_two_measurements_it_was_fitted_to(measurement):
    assert point(measurement).tpot_p50_ms == pytest.approx(measurement.tpot_ms, rel=0.02)


def test_the_fit_is_physical():
    efficiency, overhead = fit_decode()
    assert 0.5 < efficiency < 1.0 and 0 < overhead < 0.005, (efficiency, overhead)


def test_a_gpu_and_model_the_fit_never_saw_are_predicted_within_fifteen_per_cent():
    # RTX 4090 and Mistral-7B: neither is in either fit; throughput under 4, 8 and 16 clients.
    rows = [row for row in compare(MUSHFIQ_RTX4090)[1] if row.figure == "output tok/s"]
    assert len(rows) == 3 and all(abs(row.predicted / row.measured - 1) < 0.15 for row in rows), rows


def neighbours(fitted: Fitted):
    """The fitted point with one constant moved one step along its grid, each way."""
    for name, values in GRID.items():
        at = values.index(getattr(fitted, name))
        for step in (-1, 1):
            if 0 <= at + step < len(values):
                yield replace(fitted, **{name: values[at + step]})


def test_the_recorded_constants_are_the_grid_minimum_against_their_neighbours():
    best = error(FITTED_CURVES, FITTED)
    assert all(best <= error(FITTED_CURVES, other) for other in neighbours(FITTED))


def test_the_fit_predicts_the_held_out_sweeps_better_than_the_constants_it_replaced():
    unfitted = Fitted(prefill_flops_efficiency=0.5, host_seconds_per_sequence=0.0, frontend_seconds_per_stream=0.0)
    assert error(HELD_OUT_CURVES, FITTED) < 0.6 * error(HELD_OUT_CURVES, unfitted)


@pytest.mark.parametrize("curve", FITTED_CURVES + HELD_OUT_CURVES, ids=lambda c: c.name)
def test_ttft_feels_load_as_the_published_sweeps_do(curve):
    # Measured TTFT p50 grows 1.8 to 6.2 times from each sweep's fewest clients to its most; the
    # model's must grow too, by at least half as much (the engine alone grew it by 1.0–1.1x).
    rows = [row for row in compare(curve)[1] if row.figure == "TTFT p50"]
    measured, predicted = rows[-1].measured / rows[0].measured, rows[-1].predicted / rows[0].predicted
    assert predicted >= 1 + (measured - 1) / 2, (measured, predicted)


def test_vllm_batch_defaults_follow_the_gpu():
    assert vllm_batch_defaults(gpu_named("H100-80GB")) == (1024, 8192)
    assert vllm_batch_defaults(gpu_named("A100-80GB")) == (256, 2048), "A100s keep the small budget"
    assert vllm_batch_defaults(gpu_named("L4")) == (256, 2048)
    assert vllm_batch_defaults(mig_slice(gpu_named("H100-80GB"), "1g.10gb")) == (256, 2048)
    assert Replica(gpu_named("L4"), model_named("Qwen2.5-1.5B")).max_num_batched_tokens == 2048


def test_batching_buys_throughput_until_the_step_turns_compute_bound():
    gpu, model = gpu_named("H100-80GB"), model_named("Llama-3.1-8B")
    curve = [closed_loop(gpu, model, concurrency=c, prompt_tokens=512, output_tokens=128) for c in (1, 4, 16, 64)]
    tpot = [p.tpot_p50_ms for p in curve]
    throughput = [p.output_tokens_per_s for p in curve]
    assert tpot == sorted(tpot) and throughput == sorted(throughput)
    assert throughput[1] > 3 * throughput[0], "batch 4 costs little more than batch 1: decode reads the weights once"
    assert throughput[3] < 64 * throughput[0], "and far from linearly at 64"


def test_a_decode_step_at_batch_one_is_the_weights_over_bandwidth():
    from sim.llm import engine

    replica = Replica(gpu_named("A100-80GB"), model_named("Qwen2.5-7B"))
    request = Request(16, 4, 0.0, prefilled=16, generated=1)
    expected = model_named("Qwen2.5-7B").weight_bytes / (2039e9 * engine.DECODE_BANDWIDTH_EFFICIENCY)
    assert replica.step_seconds([request], []) == pytest.approx(expected + engine.STEP_OVERHEAD_S, rel=0.01)


def test_the_batch_is_bounded_by_kv_cache_and_max_num_seqs_with_a_queue_beyond():
    replica = Replica(gpu_named("L4"), model_named("Llama-3.1-8B"), Knobs(max_num_seqs=8, max_num_batched_tokens=10**6))
    size = replica.kv_capacity_tokens // 3  # three fit in the KV cache (the step's token budget set aside)
    for _ in range(5):
        replica.submit(Request(size - 100, 100, 0.0))
    replica.step()
    assert len(replica.running) == 3 and len(replica.waiting) == 2 and replica.kv_usage > 0.99
    small = Replica(gpu_named("H100-80GB"), model_named("Llama-3.1-8B"), Knobs(max_num_seqs=8))
    for _ in range(20):
        small.submit(Request(64, 32, 0.0))
    small.step()
    assert len(small.running) == 8 and len(small.waiting) == 12
    budget = Replica(gpu_named("H100-80GB"), model_named("Llama-3.1-8B"), Knobs(max_num_batched_tokens=1000))
    for _ in range(3):
        budget.submit(Request(600, 8, 0.0))
    budget.step()  # 600 tokens of one prompt and 400 of the next: chunked prefill
    assert [r.prefilled for r in budget.running] == [600, 400] and len(budget.waiting) == 1
    with pytest.raises(ValueError, match="exceeds the KV cache"):
        replica.submit(Request(replica.kv_capacity_tokens, 1, 0.0))


def test_a_model_too_big_for_the_gpu_is_refused_by_name():
    with pytest.raises(ValueError, match="Llama-3.1-70B-TP4 does not fit on a RTX-4090"):
        Replica(gpu_named("RTX-4090"), model_named("Llama-3.1-70B-TP4"))


def test_every_gpu_is_found_by_its_dcgm_model_name_and_every_table_entry_is_complete():
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "H200", "L4", "L40S", "RTX-4090", "RTX-A6000"} <= set(GPUS)
    assert {"Llama-3.1-8B", "Mistral-7B", "Qwen2.5-7B", "Llama-3.1-70B-TP4", "Llama-3.1-70B-TP8"} <= set(MODELS)
    for gpu in GPUS.values():
        assert gpu.aliases and all(gpu_named(alias) is gpu for alias in gpu.aliases)
    assert gpu_named("nvidia h100 80gb hbm3").name == "H100-80GB"
    assert model_named("Llama-3.1-70B-TP8").kv_bytes_per_token == 80 * 8 * 128 * 2 * 2 / 8
    with pytest.raises(KeyError, match="known: A100-40GB"):
        gpu_named("V100")


def test_nearest_rank_quantiles():
    assert quantile([5.0], 0.99) == 5.0
    assert quantile([float(i) for i in range(1, 101)], 0.99) == 99.0
    assert quantile([float(i) for i in range(1, 101)], 0.5) == 50.0


def test_the_serving_curve_command_prints_the_documented_json():
    done = subprocess.run([sys.executable, "-m", "gpu_balancer", "serving-curve", "--gpu", "NVIDIA L40S",
                           "--model", "Qwen2.5-7B", "--concurrency", "1,8", "--prompt-tokens", "256",
                           "--output-tokens", "64", "--output", "json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [row["concurrency"] for row in rows] == [1, 8]
    assert all(set(row) == {"concurrency", "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "tpot_p50_ms",
                            "output_tokens_per_s"}
               for row in rows)
    assert rows[1]["output_tokens_per_s"] > rows[0]["output_tokens_per_s"]


def signals(concurrency, gpu="A100-40GB", model="Llama-3.1-8B"):
    from statistics import fmean

    from sim.llm.curve import run_clients
    from sim.llm.telemetry import Sampler

    sampler = Sampler(1.0)
    run_clients(gpu_named(gpu), model_named(model), concurrency=concurrency, prompt_tokens=1024, output_tokens=256,
                requests_per_client=4, observe=sampler.observe)
    assert len(sampler.readings) >= 3
    return {name: fmean(getattr(r, name) for r in sampler.readings)
            for name in ("gpu_util", "dram_active", "pipe_tensor_active", "sm_occupancy", "kv_cache_usage_perc",
                         "num_requests_running", "fb_used_mib")}


def test_gpu_util_reads_near_full_with_one_request_in_flight_as_real_exporters_do():
    # vllm-project/vllm #6105: 94 % at one concurrent request on an A100 (Llama-2-7B).
    one = signals(1)
    assert 90 <= one["gpu_util"] <= 99, one
    assert one["dram_active"] > 0.6, "decode reads every weight each step: DRAM is busy at batch 1"
    assert one["pipe_tensor_active"] < 0.05 and one["kv_cache_usage_perc"] < 0.05


def test_the_signals_that_track_load_grow_with_it_and_gpu_util_does_not():
    one, many = signals(1), signals(64)
    assert many["gpu_util"] - one["gpu_util"] < 8, "a duty cycle: saturated from the first request"
    assert many["pipe_tensor_active"] > 10 * one["pipe_tensor_active"]
    assert many["sm_occupancy"] > 10 * one["sm_occupancy"]
    assert many["kv_cache_usage_perc"] > 20 * one["kv_cache_usage_perc"]
    assert many["num_requests_running"] > 40 > 2 > one["num_requests_running"]
    assert many["fb_used_mib"] == one["fb_used_mib"] == 0.9 * 40 * 1024, "preallocated: FB_USED says nothing of load"


def test_an_idle_replica_reads_idle():
    from sim.llm.engine import Counters
    from sim.llm.telemetry import read

    replica = Replica(gpu_named("L40S"), model_named("Mistral-7B"))
    replica.now = 5.0
    idle = read(replica, Counters(), 0.0)
    assert (idle.gpu_util, idle.dram_active, idle.pipe_tensor_active, idle.num_requests_running) == (0, 0, 0, 0)
