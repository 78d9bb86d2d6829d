"""Published serving measurements the replica model is fitted to or held against. Pure data.

Each curve is one `vllm bench serve`-style concurrency sweep: C closed-loop clients, fixed
prompt and output lengths, the percentiles each source printed. A field a source does not give
is None; a length a source does not give is an assumption and says so in `note`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Measurement:
    """A published figure the model is fitted to or held against."""

    source: str
    gpu: str
    model: str
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    tpot_ms: float | None = None
    output_tokens_per_s: float | None = None
    ttft_p50_ms: float | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class PublishedPoint:
    concurrency: int
    ttft_p50_ms: float | None
    ttft_tail_ms: float | None
    tpot_p50_ms: float | None = None
    output_tokens_per_s: float | None = None
    requests: int | None = None
    """Requests the sweep sent at this concurrency; None: 20 a client, as `vllm bench serve` sweeps do."""


@dataclass(frozen=True, slots=True)
class PublishedCurve:
    """One source's sweep: TTFT p50 and its tail (the percentile `tail_quantile` it printed)."""

    name: str
    source: str
    gpu: str
    model: str
    prompt_tokens: int
    output_tokens: int
    gpu_memory_utilization: float
    tail_quantile: float
    points: tuple[PublishedPoint, ...]
    note: str = ""


DECODE_MEASUREMENTS = (
    Measurement("johnmusgrave.com, 'vLLM throughput-latency sweep on NVIDIA A100' (vLLM 0.23.0)", "A100-40GB",
                "Llama-3.1-8B", 1024, 128, 1, tpot_ms=1000 / 75,
                note="'decode at one request per time runs at about 75 tokens/sec'"),
    Measurement("InferenceBench concurrency-sweep recipe, yobitelcomm.github.io/bench (vLLM 0.21.0, fp16)",
                "H100-80GB", "Llama-3.1-8B", 300, 128, 1, tpot_ms=6.48, ttft_p50_ms=13.98,
                note="its chatbot-short prompts; their length is not given: 300 tokens is an assumption"),
)
"""The two single-request decode measurements `sim.llm.engine.fit_decode` solves for."""

INFERENCEBENCH_H100 = PublishedCurve(
    "h100-llama-3.1-8b", "InferenceBench concurrency-sweep recipe, yobitelcomm.github.io/bench/recipes/"
    "concurrency-sweep (vLLM 0.21.0, fp16, 2026-05-16)", "H100-80GB", "Llama-3.1-8B", 300, 128, 0.9, 0.99,
    (PublishedPoint(1, 13.98, 14.95, 6.48, 122.2), PublishedPoint(4, 22.75, 32.18, 6.59, 580.3),
     PublishedPoint(16, 41.69, 64.71, 10.94, 1384.2), PublishedPoint(64, 86.92, 464.7, 46.91, 1312.3)),
    note="chatbot-short lengths are not given: 300 in / 128 out is an assumption")

WMX_L4 = PublishedCurve(
    "l4-qwen2.5-0.5b", "ai.wmx.dev/benchmarks, serving/raw-vllm (vLLM v0.23.0, vllm bench serve, GKE "
    "g2-standard-4)", "L4", "Qwen2.5-0.5B", 256, 128, 0.6, 0.95,
    (PublishedPoint(1, 27.0, None, 5.1, 168), PublishedPoint(2, 37.8, 48.2, 5.2, 367), PublishedPoint(4, 50.1, 85.4, 5.3, 698),
     PublishedPoint(8, 60.9, 88.4, 5.5, 1312), PublishedPoint(16, 103.8, 135.7, 6.0, 2277),
     PublishedPoint(32, 135.3, 191.8, 7.1, 3773)),
    note="TPOT is its ITL p50; its one-client p95 (115.5 ms) is a warm-up request and is left out")

MUSHFIQ_RTX4090 = PublishedCurve(
    "rtx4090-mistral-7b", "mushfiqrahman.dev, Mistral-7B-Instruct-v0.3 on one RTX 4090 with vLLM", "RTX-4090",
    "Mistral-7B", 256, 128, 0.9, 0.99,
    (PublishedPoint(4, 53, None, None, 210), PublishedPoint(8, 55, None, None, 377), PublishedPoint(16, 97, None, None, 644)))

LDSINGH_A6000 = PublishedCurve(
    "a6000-qwen2.5-7b", "ld-singh.github.io/ai-factory-ops-lab, inference benchmark report (vLLM v0.23.0 on k3s, "
    "its own closed-loop harness, 2026-06-27)", "RTX-A6000", "Qwen2.5-7B", 100, 52, 0.9, 0.95,
    (PublishedPoint(2, 67, 68, 22.0, 84.0, 12), PublishedPoint(4, 67, 68, 22.1, 153.1, 12),
     PublishedPoint(64, 87, 163, 27.5, 2127.6, 512), PublishedPoint(128, 126, 325, 36.0, 3138.1, 512),
     PublishedPoint(256, 299, 517, 53.1, 4039.9, 512)),
    note="prompt length not given: 100 tokens is an assumption; 52 out is its mean generated length. Left out: "
         "one client (its p95 is a warm-up request), 8 clients (12 requests: 1.5 a client) and 512 (one request "
         "a client: a single burst, not a steady state)")

FITTED_CURVES = (LDSINGH_A6000, WMX_L4)
"""What `sim.llm.fit` fits the prefill and host constants to: up to 256 clients on one, 32 on the other."""
HELD_OUT_CURVES = (INFERENCEBENCH_H100, MUSHFIQ_RTX4090)
"""A GPU and model pair each that no fit saw (the H100 sweep's single-request TPOT is one of the two
`DECODE_MEASUREMENTS`: its TTFT under load and the rest of its curve are not)."""
