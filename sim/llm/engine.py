"""One continuous-batching LLM server (vLLM / SGLang style) on one GPU, step by step. Pure.

Each engine step runs every admitted request's next decode token plus as much (chunked) prefill
as the step's token budget leaves, first to the requests already prefilling, then to new ones
admitted while the batch has a free sequence slot and the KV cache has room for the request's
prompt and output. A step takes the roofline time of what it does — the larger of its bytes
(every weight once, every sequence's KV cache) over memory bandwidth × efficiency and its
FLOPs over peak × efficiency — plus a per-step host overhead, plus the all-reduces of tensor
parallelism. The step that finishes a prompt emits its first token.

The host's share of a step grows with the batch: scheduling, input preparation, sampling and
output processing cost per sequence (`Fitted.host_seconds_per_sequence`). Outside the engine,
the API server's HTTP, tokenisation and first-chunk streaming add a delay to every request's
first token (`Fitted.frontend_seconds`), which occupies no engine capacity.

The constants and where they come from:
- `DECODE_BANDWIDTH_EFFICIENCY` and `STEP_OVERHEAD_S` are fitted (`fit_decode`) to two published
  single-request TPOT measurements of Llama-3.1-8B in BF16 under vLLM, `DECODE_MEASUREMENTS`
  (the overhead is a one-sequence step's, so it holds the first sequence's host cost).
- `FITTED`: prefill FLOP efficiency, host seconds per sequence and the frontend's delay, fitted
  (`sim.llm.fit`, `bench/replica_model.py --fit`) to two published TTFT/TPOT-vs-concurrency
  sweeps (`sim.llm.published.FITTED_CURVES`) and held against two more.
- `GPU_MEMORY_UTILIZATION` 0.9: vLLM's default `--gpu-memory-utilization`.
- `RUNTIME_RESERVE_BYTES` 2 GiB of that for activations and CUDA graphs: assumption.
- `--max-num-seqs` and `--max-num-batched-tokens`: vLLM's defaults for its OpenAI server, which
  depend on the GPU (`vllm_batch_defaults`, from `EngineArgs.get_batch_defaults`).
- Tensor parallelism all-reduces the step's activations twice per layer: each takes `ALLREDUCE_S`
  (10 µs, assumption: NVLink all-reduce latency of small messages) plus its bytes over
  `ALLREDUCE_BUS_BYTES_PER_S` (232.5 GB/s bus bandwidth, nccl-tests' all_reduce_perf inside one
  8-A100 node, NVIDIA/nccl-tests #175; newer NVLink is faster, so this errs towards a slower
  all-reduce). `Knobs.allreduce_stretch` stretches both where the ranks sit in different NVLink
  domains (`sim.llm.topology`).
- KV room is reserved for prompt + output at admission; vLLM allocates blocks as tokens come
  and preempts when out of room: assumption, which errs towards a smaller batch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.llm.hardware import GIB, Gpu, Model, gpu_named, model_named
from sim.llm.published import DECODE_MEASUREMENTS, Measurement

GPU_MEMORY_UTILIZATION = 0.9
RUNTIME_RESERVE_BYTES = 2 * GIB
ALLREDUCE_S = 10e-6
ALLREDUCE_BUS_BYTES_PER_S = 232.5e9


def vllm_batch_defaults(gpu: Gpu) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM's OpenAI server uses when not told: 1,024 and
    8,192 on a device of 70 GiB or more that is not an A100, else 256 and 2,048
    (`vllm/engine/arg_utils.py`, `EngineArgs.get_batch_defaults` in recent releases; A100s are
    excluded there because the larger budget lowered their throughput, vLLM PR #17885)."""
    if gpu.memory_bytes >= 70 * GIB and "a100" not in (gpu.board or gpu.name).lower():
        return 1024, 8192
    return 256, 2048


@dataclass(frozen=True, slots=True)
class Fitted:
    """The constants fitted to published concurrency sweeps (`sim.llm.fit`)."""

    prefill_flops_efficiency: float
    """The share of dense peak a step's FLOPs reach."""
    host_seconds_per_sequence: float
    """Host time per scheduled sequence per step, beyond the first (whose cost is in `STEP_OVERHEAD_S`)."""
    frontend_seconds_per_stream: float
    """The API server's further delay on a first token for each other request streaming from the
    replica: one event loop tokenises, detokenises and streams every open request."""
    frontend_seconds: float = 0.0
    """The API server's delay on a first token with nothing else in flight (HTTP, tokenisation)."""


FITTED = Fitted(prefill_flops_efficiency=0.8, host_seconds_per_sequence=25e-6, frontend_seconds_per_stream=2e-3,
                frontend_seconds=0.0312)
"""`bench/replica_model.py --fit` at the grid of `sim.llm.fit.GRID` (the efficiency is the grid's top:
the sweeps ask for more than 0.8 of peak, or for something the model lacks); `BENCHMARKS.md` has
every figure beside its prediction, the held-out sweeps' included."""


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
    frontend_s: float = 0.0
    """The API server's delay on the first token (set by the replica when it emits it)."""

    @property
    def context(self) -> int:
        return self.prefilled + self.generated

    @property
    def ttft(self) -> float:
        """What the client sees: from sending to the first token, the frontend's delay included."""
        assert self.first_token_at is not None
        return self.first_token_at - self.arrived_at + self.frontend_s

    @property
    def e2e(self) -> float:
        assert self.done_at is not None
        return self.done_at - self.arrived_at + self.frontend_s

    @property
    def tpot(self) -> float:
        assert self.first_token_at is not None and self.done_at is not None
        return (self.done_at - self.first_token_at) / max(1, self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Knobs:
    max_num_seqs: int | None = None
    """None: vLLM's default for the GPU (`vllm_batch_defaults`); likewise the token budget."""
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION
    slowdown: float = 1.0
    """Every step takes this many times longer (contention from outside the GPU); 1: none."""
    allreduce_stretch: float = 1.0
    """Tensor-parallel all-reduces take this many times longer (ranks across NVLink domains); 1: none."""


def allreduce_seconds(model: Model, tokens: int) -> float:
    """One step's tensor-parallel all-reduces inside an NVLink domain: two per layer, each its
    latency plus the tokens' activations (BF16) over the bus bandwidth, ring-scaled by
    2(n − 1)/n as nccl-tests defines bus bandwidth; 0 for a model on one GPU."""
    tp = model.tensor_parallel
    if tp <= 1:
        return 0.0
    moved = tokens * model.hidden_size * 2 * 2 * (tp - 1) / tp
    return 2 * model.layers * (ALLREDUCE_S + moved / ALLREDUCE_BUS_BYTES_PER_S)


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
    fitted: Fitted = FITTED
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
        seqs, tokens = vllm_batch_defaults(self.gpu)
        self.max_num_seqs = self.knobs.max_num_seqs or seqs
        self.max_num_batched_tokens = self.knobs.max_num_batched_tokens or tokens

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
        budget = self.max_num_batched_tokens
        decoding = [r for r in self.running if r.prefilled == r.prompt_tokens]
        budget -= len(decoding)
        chunks: list[tuple[Request, int]] = []
        for request in self.running:
            if request.prefilled < request.prompt_tokens and budget > 0:
                take = min(budget, request.prompt_tokens - request.prefilled)
                chunks.append((request, take))
                budget -= take
        while (self.waiting and budget > 0 and len(self.running) < self.max_num_seqs
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
                request.frontend_s = (self.fitted.frontend_seconds + self.fitted.frontend_seconds_per_stream
                                      * (len(self.running) - 1)) * self.knobs.slowdown
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
        compute = flops / (gpu.bf16_flops * self.fitted.prefill_flops_efficiency)
        allreduce = allreduce_seconds(model, tokens) * self.knobs.allreduce_stretch
        kernels = (max(memory, compute) + allreduce) * self.knobs.slowdown
        if count:
            counters = self.counters
            counters.kernel_seconds += kernels
            counters.bytes_read += read
            counters.flops += flops
            counters.steps += 1
            counters.batch_tokens += tokens
        host = STEP_OVERHEAD_S + self.fitted.host_seconds_per_sequence * max(0, len(decoding) + len(chunks) - 1)
        return kernels + host * self.knobs.slowdown
