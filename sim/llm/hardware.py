"""What a serving replica runs on and what it runs: GPUs and models as published figures. Pure.

GPU figures are the vendors' datasheet numbers: memory, memory bandwidth, dense BF16 tensor
throughput (half the "with sparsity" figure; for the RTX 4090, the FP32-accumulate rate, which
is what BF16 GEMMs in PyTorch use) and the boost clock. DCGM reports a GPU by `modelName` (the
`modelName` label of dcgm-exporter's series); those strings are aliases here. Model figures are from each model's
published config (`config.json`): parameters, layers, KV heads, head size; weights and KV cache
in BF16.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    bf16_flops: float
    """Dense BF16 tensor-core peak, FLOP/s."""
    aliases: tuple[str, ...] = ()
    """DCGM `modelName` strings of this GPU."""
    max_sm_clock_mhz: float = 1980.0
    """The datasheet's boost clock: what `DCGM_FI_DEV_SM_CLOCK` reads while a kernel runs unthrottled."""
    board: str = ""
    """For a MIG instance, the whole GPU it is a slice of (`mig_slice`); empty for a whole GPU."""
    board_share: float = 1.0
    """The share of its board's SMs (and so of its power) a MIG instance holds; 1 for a whole GPU."""


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    parameters: float
    layers: int
    kv_heads: int
    head_dim: int
    tensor_parallel: int = 1
    """GPUs the model is sharded over; every figure below is per GPU."""
    hidden_size: int = 0
    """The width of the activations each tensor-parallel all-reduce sums (config.json's
    `hidden_size`); 0 where the model is not sharded."""

    @property
    def weight_bytes(self) -> float:
        """BF16 weights one GPU holds and reads each step."""
        return 2 * self.parameters / self.tensor_parallel

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V of every layer for one token, BF16, on one GPU (KV heads split over the shards)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2 / self.tensor_parallel

    @property
    def flops_per_token(self) -> float:
        """Dense forward FLOPs for one token on one GPU (2 per parameter; attention over the
        context is left out: at the lengths served here it is a few per cent)."""
        return 2 * self.parameters / self.tensor_parallel


GPUS = {gpu.name: gpu for gpu in (
    Gpu("A100-40GB", 40 * GIB, 1555e9, 312e12, ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), 1410),
    Gpu("A100-80GB", 80 * GIB, 2039e9, 312e12, ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), 1410),
    Gpu("H100-80GB", 80 * GIB, 3350e9, 989e12, ("NVIDIA H100 80GB HBM3", "NVIDIA H100-SXM5-80GB"), 1980),
    Gpu("H200", 141 * 10**9, 4800e9, 989e12, ("NVIDIA H200", "NVIDIA H200 NVL"), 1980),
    # GB200 NVL72's per-GPU share of its rack's figures (13.4 TB HBM3e, 576 TB/s, 180 PFLOPS dense
    # BF16 over 72 GPUs); its boost clock: assumption.
    Gpu("GB200", 186 * 10**9, 8000e9, 2500e12, ("NVIDIA GB200",), 1965),
    Gpu("L4", 24 * GIB, 300e9, 121e12, ("NVIDIA L4",), 2040),
    Gpu("L40S", 48 * GIB, 864e9, 362e12, ("NVIDIA L40S",), 2520),
    Gpu("RTX-4090", 24 * GIB, 1008e9, 165e12, ("NVIDIA GeForce RTX 4090",), 2520),
    Gpu("RTX-A6000", 48 * GIB, 768e9, 154.8e12, ("NVIDIA RTX A6000",), 1800),
)}

MODELS = {model.name: model for model in (
    Model("Llama-3.1-8B", 8.03e9, 32, 8, 128),
    Model("Mistral-7B", 7.25e9, 32, 8, 128),
    Model("Qwen2.5-7B", 7.62e9, 28, 4, 128),
    Model("Llama-3.1-70B-TP4", 70.6e9, 80, 8, 128, tensor_parallel=4, hidden_size=8192),
    Model("Llama-3.1-70B-TP8", 70.6e9, 80, 8, 128, tensor_parallel=8, hidden_size=8192),
    # Small models for GPU slices (MIG instances, shared GPUs), from their config.json the same way.
    Model("Llama-3.2-3B", 3.21e9, 28, 8, 128),
    Model("Qwen2.5-1.5B", 1.54e9, 28, 2, 128),
    Model("Qwen2.5-0.5B", 0.494e9, 24, 2, 64),
)}

DEFAULT_MODELS = ("Llama-3.1-8B", "Llama-3.2-3B", "Qwen2.5-1.5B")
"""What a scenario without `serving.model` serves, first that fits its pool's GPU unit: the model
most chat fleets serve, then the small ones for slices (`sim.scenario.default_model`)."""

MIG_PROFILE = re.compile(r"^(\d)g\.(\d+)gb$")


def mig_slice(gpu: Gpu, profile: str) -> Gpu:
    """A MIG instance of `gpu` by its profile name (`1g.10gb`): c of the board's 7 compute slices
    (SMs, tensor throughput) and m GB of its memory, with the memory bandwidth of the memory
    slices it holds (NVIDIA's MIG User Guide, "Supported MIG Profiles": an H100's 1g.10gb holds
    1/7 of the SMs and 1/8 of the memory and its bandwidth). DCGM names an instance by its board's
    `modelName`, so it keeps the board's aliases. ValueError for a name not of that form."""
    match = MIG_PROFILE.match(profile)
    if match is None:
        raise ValueError(f"MIG profile {profile!r} is not of the form <c>g.<m>gb (e.g. 1g.10gb)")
    compute = int(match[1]) / 7
    memory_share = min(1.0, int(match[2]) / round(gpu.memory_bytes / GIB))  # of the board's nominal GB
    return Gpu(f"{gpu.name} {profile}", int(gpu.memory_bytes * memory_share), gpu.bandwidth_bytes_per_s * memory_share,
               gpu.bf16_flops * compute, gpu.aliases, gpu.max_sm_clock_mhz, gpu.name, compute)


def gpu_named(name: str) -> Gpu:
    """A GPU by its table name or a DCGM `modelName`, case-insensitive; KeyError naming the known ones."""
    wanted = name.strip().lower()
    for gpu in GPUS.values():
        if wanted == gpu.name.lower() or wanted in (alias.lower() for alias in gpu.aliases):
            return gpu
    raise KeyError(f"unknown GPU {name!r}; known: {', '.join(GPUS)} (or their DCGM modelName)")


def model_named(name: str) -> Model:
    wanted = name.strip().lower()
    for model in MODELS.values():
        if wanted == model.name.lower():
            return model
    raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def sharded_wider(model: Model) -> Model | None:
    """The same model at twice its tensor parallelism, where the table has it."""
    return next((m for m in MODELS.values() if m.parameters == model.parameters
                 and m.tensor_parallel == 2 * model.tensor_parallel), None)


def gpu_of_product(product: str) -> Gpu:
    """A GPU by its node's `nvidia.com/gpu.product` label, which GPU feature discovery writes as
    the `modelName` with dashes for spaces (NVIDIA-H100-80GB-HBM3), `-SHARED` after it where the
    GPU is shared by time-slicing or MPS."""
    product = product.removesuffix("-SHARED")
    for gpu in GPUS.values():
        if any(alias.replace(" ", "-").lower() == product.lower() for alias in gpu.aliases):
            return gpu
    return gpu_named(product)
