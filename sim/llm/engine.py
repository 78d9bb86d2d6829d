"""One continuous-batching LLM server (vLLM / SGLang style) on one GPU, step by step. Pure.

Each engine step runs every admitted request's next decode token plus as much (chunked) prefill
as the step's token budget leaves, first to the requests already prefilling, then to new ones
admitted while the batch has a free sequence slot and the KV cache has room for the request's
prompt and output. A step takes the roofline time of what it does — the larger of its bytes
(every weight once, every sequence's KV cache) over memory bandwidth × efficiency and its
FLOPs over peak × efficiency — plus a per-step host overhead, plus the all-reduces of tensor
parallelism. The step that finishes a prompt emits its first token.

The constants and where they come from:
- `DECODE_BANDWIDTH_EFFICIENCY` and `STEP_OVERHEAD_S` are fitted (`fit_decode`) to two published
  single-request TPOT measurements of Llama-3.1-8B in BF16 under vLLM, `DECODE_MEASUREMENTS`.
- `PREFILL_FLOPS_EFFICIENCY` 0.5: assumption (prefill GEMMs reach about half of dense peak).
- `GPU_MEMORY_UTILIZATION` 0.9: vLLM's default `--gpu-memory-utilization`.
- `RUNTIME_RESERVE_BYTES` 2 GiB of that for activations and CUDA graphs: assumption.
- `MAX_NUM_SEQS` 256: vLLM's default `--max-num-seqs`. `MAX_NUM_BATCHED_TOKENS` 8,192: assumption
  (vLLM's default depends on release and usage context).
- `ALLREDUCE_S` 10 µs per all-reduce, two per layer under tensor parallelism: assumption
  (NVLink all-reduce latency of small messages).
- KV room is reserved for prompt + output at admission; vLLM allocates blocks as tokens come
  and preempts when out of room: assumption, which errs towards a smaller batch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.llm.hardware import GIB, Gpu, Model, gpu_named, model_named

PREFILL_FLOPS_EFFICIENCY = 0.5
GPU_MEMORY_UTILIZATION = 0.9
RUNTIME_RESERVE_BYTES = 2 * GIB
MAX_NUM_SEQS = 256
MAX_NUM_BATCHED_TOKENS = 8192
ALLREDUCE_S = 10e-6


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


DECODE_MEASUREMENTS = (
    Measurement("johnmusgrave.com, 'vLLM throughput-latency sweep on NVIDIA A100' (vLLM 0.23.0)", "A100-40GB",
                "Llama-3.1-8B", 1024, 128, 1, tpot_ms=1000 / 75,
                note="'decode at one request per time runs at about 75 tokens/sec'"),
    Measurement("InferenceBench concurrency-sweep recipe, yobitelcomm.github.io/bench (vLLM 0.21.0, fp16)",
                "H100-80GB", "Llama-3.1-8B", 300, 128, 1, tpot_ms=6.48, ttft_p50_ms=13.98,
                note="its chatbot-short prompts; their length is not given: 300 tokens is an assumption"),
)
"""The two single-request decode measurements `fit_decode` solves for."""

HELD_OUT = (
    Measurement("mushfiqrahman.dev, Mistral-7B-Instruct-v0.3 on one RTX 4090 with vLLM", "RTX-4090",
                "Mistral-7B", 256, 128, 4, output_tokens_per_s=210, ttft_p50_ms=53),
    Measurement("mushfiqrahman.dev (as above)", "RTX-4090", "Mistral-7B", 256, 128, 8,
                output_tokens_per_s=377, ttft_p50_ms=55),
    Measurement("mushfiqrahman.dev (as above)", "RTX-4090", "Mistral-7B", 256, 128, 16,
                output_tokens_per_s=644, ttft_p50_ms=97),
    Measurement("InferenceBench (as above)", "H100-80GB", "Llama-3.1-8B", 300, 128, 16, tpot_ms=10.94),
)
"""Figures not used in the fit: a GPU and a model the fit never saw, and the fitted pair at load."""


def decode_bytes(model: Model, context_tokens: float) -> float:
    """What one single-request decode step reads: every weight, and the sequence's KV cache."""
    return model.weight_bytes + model.kv_bytes_per_token * context_tokens


def fit_decode(measurements: tuple[Measurement, Measurement] = DECODE_MEASUREMENTS) -> tuple[float, float]:
    """(bandwidth efficiency, step overhead in s) such that TPOT = bytes / (bandwidth × e) + h
    holds for both single-request measurements (mean context: prompt + half the output)."""
    (a, b) = ((decode_bytes(model_named(m.model), m.prompt_tokens + m.output_tokens / 2)
               / gpu_named(m.gpu).bandwidth_bytes_per_s, m.tpot_ms / 1000) for m in measurements)
    efficiency = (a[0] - b[0]) / (a[1] - b[1])
    return efficiency, a[1] - a[0] / efficiency


DECODE_BANDWIDTH_EFFICIENCY, STEP_OVERHEAD_S = fit_decode()
"""0.82 of memory bandwidth, 0.61 ms a step (`BENCHMARKS.md` has the fit beside the held-out figures)."""


def kv_capacity_tokens(gpu: Gpu, model: Model, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION) -> int:
    """Tokens the server's KV cache holds: what its share of the GPU's memory leaves beside the
    weights and the runtime reserve (≤ 0: the model does not fit)."""
    room = gpu.memory_bytes * gpu_memory_utilization - model.weight_bytes
    return int((room - RUNTIME_RESERVE_BYTES) // model.kv_bytes_per_token)


@dataclass(slots=True)
class Request:
    prompt_tokens: int
    output_tokens: int
    arrived_at: float
    prefilled: int = 0
    generated: int = 0
    first_token_at: float | None = None
    done_at: float | None = None

    @property
    def context(self) -> int:
        return self.prefilled + self.generated

    @property
    def ttft(self) -> float:
        assert self.first_token_at is not None
        return self.first_token_at - self.arrived_at

    @property
    def tpot(self) -> float:
        assert self.first_token_at is not None and self.done_at is not None
        return (self.done_at - self.first_token_at) / max(1, self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Knobs:
    max_num_seqs: int = MAX_NUM_SEQS
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION
    slowdown: float = 1.0
    """Every step takes this many times longer (contention from outside the GPU); 1: none."""


@dataclass(slots=True)
class Counters:
    """What the GPU did since the replica started, as an exporter's counters see it: time with a
    kernel running (the GPU part of each step; the host overhead between steps is idle), bytes
    read from memory and FLOPs done."""

    kernel_seconds: float = 0.0
    bytes_read: float = 0.0
    flops: float = 0.0
    steps: int = 0
    batch_tokens: int = 0


@dataclass
class Replica:
    """The server's state: the batch, the queue beyond it and the clock."""

    gpu: Gpu
    model: Model
    knobs: Knobs = field(default_factory=Knobs)
    now: float = 0.0
    waiting: deque[Request] = field(default_factory=deque)
    running: list[Request] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)

    def __post_init__(self) -> None:
        self.kv_capacity_tokens = kv_capacity_tokens(self.gpu, self.model, self.knobs.gpu_memory_utilization)
        if self.kv_capacity_tokens <= 0:
            raise ValueError(f"{self.model.name} does not fit on a {self.gpu.name}: its weights take "
                             f"{self.model.weight_bytes / GIB:.1f} GiB of {self.gpu.memory_bytes / GIB:.0f}")
        self.kv_reserved = 0

    def submit(self, request: Request) -> None:
        if request.prompt_tokens + request.output_tokens > self.kv_capacity_tokens:
            raise ValueError(f"a request of {request.prompt_tokens + request.output_tokens} tokens exceeds the "
                             f"KV cache ({self.kv_capacity_tokens} tokens)")
        self.waiting.append(request)

    @property
    def kv_usage(self) -> float:
        """The share of the KV cache held, as vLLM's `kv_cache_usage_perc` reports it (0–1)."""
        return self.kv_reserved / self.kv_capacity_tokens

    def step(self) -> list[Request]:
        """One engine step; the requests it finished. Idle (nothing to do): returns at once."""
        budget = self.knobs.max_num_batched_tokens
        decoding = [r for r in self.running if r.prefilled == r.prompt_tokens]
        budget -= len(decoding)
        chunks: list[tuple[Request, int]] = []
        for request in self.running:
            if request.prefilled < request.prompt_tokens and budget > 0:
                take = min(budget, request.prompt_tokens - request.prefilled)
                chunks.append((request, take))
                budget -= take
        while (self.waiting and budget > 0 and len(self.running) < self.knobs.max_num_seqs
               and self.kv_reserved + self.waiting[0].prompt_tokens + self.waiting[0].output_tokens
               <= self.kv_capacity_tokens):
            request = self.waiting.popleft()
            self.running.append(request)
            self.kv_reserved += request.prompt_tokens + request.output_tokens
            take = min(budget, request.prompt_tokens)
            chunks.append((request, take))
            budget -= take
        if not decoding and not chunks:
            return []
        self.now += self.step_seconds(decoding, chunks, count=True)
        finished = []
        for request in decoding:
            request.generated += 1
            if request.generated >= request.output_tokens:
                request.done_at = self.now
                finished.append(request)
        for request, take in chunks:
            request.prefilled += take
            if request.prefilled == request.prompt_tokens:  # the prefill's step emits the first token
                request.generated, request.first_token_at = 1, self.now
                if request.output_tokens <= 1:
                    request.done_at = self.now
                    finished.append(request)
        for request in finished:
            self.running.remove(request)
            self.kv_reserved -= request.prompt_tokens + request.output_tokens
        return finished

    def step_seconds(self, decoding: list[Request], chunks: list[tuple[Request, int]], *,
                     count: bool = False) -> float:
        """The roofline time of one step, plus host overhead and tensor-parallel all-reduces;
        with `count`, the step's kernel time, bytes and FLOPs go into `counters`."""
        model, gpu = self.model, self.gpu
        tokens = len(decoding) + sum(take for _, take in chunks)
        context = sum(r.context for r in decoding) + sum(r.prefilled + take for r, take in chunks)
        read = model.weight_bytes + model.kv_bytes_per_token * context
        flops = model.flops_per_token * tokens
        memory = read / (gpu.bandwidth_bytes_per_s * DECODE_BANDWIDTH_EFFICIENCY)
        compute = flops / (gpu.bf16_flops * PREFILL_FLOPS_EFFICIENCY)
        allreduce = 2 * model.layers * ALLREDUCE_S if model.tensor_parallel > 1 else 0.0
        kernels = (max(memory, compute) + allreduce) * self.knobs.slowdown
        if count:
            counters = self.counters
            counters.kernel_seconds += kernels
            counters.bytes_read += read
            counters.flops += flops
            counters.steps += 1
            counters.batch_tokens += tokens
        return kernels + STEP_OVERHEAD_S * self.knobs.slowdown
