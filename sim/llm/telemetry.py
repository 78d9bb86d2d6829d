"""What exporters report for one replica over a sample period, derived from what its engine steps
did — never from the latency model's own busy share. Pure.

- `DCGM_FI_DEV_GPU_UTIL` and `DCGM_FI_PROF_GR_ENGINE_ACTIVE`: the share of the period with a kernel
  running. Only the host overhead between steps is idle, so one request in flight reads ~95 %
  (vllm-project/vllm #6105 measured 94 % at one concurrent request on an A100; NVIDIA/dcgm-exporter
  #301: "GPU utilization becomes very high if there's even single request").
- `DCGM_FI_PROF_DRAM_ACTIVE`: bytes read over the period at peak bandwidth. Decode reads every
  weight each step, so it is high at batch 1.
- `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`: FLOPs over the period at dense BF16 peak; grows with the batch.
- `DCGM_FI_PROF_SM_ACTIVE`: the kernel share (a GEMM or GEMV spreads over every SM: assumption).
- `DCGM_FI_PROF_SM_OCCUPANCY`: the kernel share times the step's tokens against the roofline knee
  (the batch at which a step turns compute-bound), at most 1: assumption.
- `DCGM_FI_DEV_FB_USED`: fixed by the server's preallocation (`gpu_memory_utilization` of the
  GPU, vLLM's default 0.9), whatever the load.
- vLLM's `num_requests_running`, `num_requests_waiting` and `kv_cache_usage_perc` (0–1) from the
  replica's batch, queue and KV reservations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.llm.engine import DECODE_BANDWIDTH_EFFICIENCY, Counters, Replica

MIB = 2**20


@dataclass(frozen=True, slots=True)
class ExporterReading:
    gpu_util: float
    """DCGM_FI_DEV_GPU_UTIL, 0–100."""
    gr_engine_active: float
    sm_active: float
    sm_occupancy: float
    pipe_tensor_active: float
    dram_active: float
    """The profiling fields, 0–1."""
    fb_used_mib: float
    fb_free_mib: float
    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage_perc: float


def knee_tokens(replica: Replica) -> float:
    """Tokens a step must carry before its FLOPs take longer than reading the weights."""
    gpu, model = replica.gpu, replica.model
    memory = model.weight_bytes / (gpu.bandwidth_bytes_per_s * DECODE_BANDWIDTH_EFFICIENCY)
    return memory * gpu.bf16_flops * replica.fitted.prefill_flops_efficiency / model.flops_per_token


def read(replica: Replica, before: Counters, since: float) -> ExporterReading:
    """The exporters' figures for the period from `since` to the replica's clock, `before` being
    its counters at `since` (a copy)."""
    period = max(replica.now - since, 1e-9)
    now = replica.counters
    busy = min(1.0, (now.kernel_seconds - before.kernel_seconds) / period)
    steps = now.steps - before.steps
    tokens_per_step = (now.batch_tokens - before.batch_tokens) / steps if steps else 0.0
    gpu = replica.gpu
    used = replica.gpu.memory_bytes * replica.knobs.gpu_memory_utilization
    return ExporterReading(
        gpu_util=100 * busy, gr_engine_active=busy, sm_active=busy,
        sm_occupancy=busy * min(1.0, tokens_per_step / knee_tokens(replica)),
        pipe_tensor_active=min(1.0, (now.flops - before.flops) / (period * gpu.bf16_flops)),
        dram_active=min(1.0, (now.bytes_read - before.bytes_read) / (period * gpu.bandwidth_bytes_per_s)),
        fb_used_mib=used / MIB, fb_free_mib=(gpu.memory_bytes - used) / MIB,
        num_requests_running=len(replica.running), num_requests_waiting=len(replica.waiting),
        kv_cache_usage_perc=replica.kv_usage)


class Sampler:
    """An exporter scraping a replica every `period` seconds of its clock: pass `observe` to
    `sim.llm.curve.run_clients`; `readings` are the samples taken."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.readings: list[ExporterReading] = []
        self._since = 0.0
        self._before = Counters()

    def observe(self, replica: Replica) -> None:
        if replica.now - self._since >= self.period:
            self.readings.append(read(replica, self._before, self._since))
            self._since, self._before = replica.now, replace(replica.counters)
