"""Simulation scenarios: the fleet, the workloads and the events, as plain frozen data. Pure.

A scenario file is YAML with the same field names in camelCase (see README, "Simulating your
fleet"); `load_scenario` decodes and validates it with the policy loader's rules.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from scoring.policy import PolicyError, camel_case, decode_fields, yaml_problem
from sim.scheduler_profile import DEFAULT_PROFILE, Profile


DEFAULT_PRODUCT = "NVIDIA-H100-80GB-HBM3"


@dataclass(frozen=True)
class TaintShape:
    key: str = ""
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class PoolShape:
    """One node pool: its own GPUs, labels and taints; MIG pools expose instances of one profile."""

    name: str = "pool"
    nodes: int = 8
    gpus_per_node: int = 8
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[TaintShape, ...] = ()
    mig_profile: str = ""
    """e.g. "1g.10gb": the pool's nodes offer `nvidia.com/mig-1g.10gb` instead of `nvidia.com/gpu`."""
    instances_per_gpu: int = 1
    nodes_per_clique: int = 4
    sharing: str = ""
    """`time-slicing` or `mps`: NVIDIA's device plugin advertises each GPU as `replicasPerGpu`
    `nvidia.com/gpu`, and the pods given one GPU's replicas share its SMs and memory."""
    replicas_per_gpu: int = 1

    @property
    def resource(self) -> str:
        return f"nvidia.com/mig-{self.mig_profile}" if self.mig_profile else "nvidia.com/gpu"

    @property
    def device_class(self) -> str:
        """NVIDIA's DRA DeviceClass for the pool's units, where the fleet claims them (`claims: dra`)."""
        return "mig.nvidia.com" if self.mig_profile else "gpu.nvidia.com"

    @property
    def units_per_node(self) -> int:
        return self.gpus_per_node * (self.instances_per_gpu if self.mig_profile else self.shares_per_gpu)

    @property
    def shares_per_gpu(self) -> int:
        """Pods one GPU can be given: its replicas where it is shared, else 1."""
        return self.replicas_per_gpu if self.sharing else 1

    @property
    def sharing_labels(self) -> dict[str, str]:
        """What GPU feature discovery labels a node with shared GPUs with."""
        if not self.sharing:
            return {}
        return {"nvidia.com/gpu.replicas": str(self.replicas_per_gpu), "nvidia.com/gpu.sharing-strategy": self.sharing}


@dataclass(frozen=True)
class PoolShare:
    pool: str = ""
    share: float = 0.0
    """Share of the services pinned to this pool by `nodeSelector` (with tolerations for its taints)."""


@dataclass(frozen=True)
class FleetShape:
    nodes: int = 32
    gpus_per_node: int = 8
    cpu_per_node: int = 96
    memory_gib_per_node: int = 1024
    zones: int = 4
    nodes_per_clique: int = 4
    """NVLink domain size: nodes sharing one `nvidia.com/gpu.clique` value."""
    pools: tuple[PoolShape, ...] = ()
    """Node pools; when given they replace `nodes`, `gpusPerNode` and `nodesPerClique`."""

    def pool_shapes(self) -> tuple[PoolShape, ...]:
        return self.pools or (PoolShape("default", self.nodes, self.gpus_per_node,
                                        nodes_per_clique=self.nodes_per_clique),)


@dataclass(frozen=True)
class InferenceShape:
    services: int = 40
    mean_demand_fraction: float = 0.35
    """Mean total demand as a share of all GPUs (in GPUs fully busy)."""
    pareto_alpha: float = 1.2
    """Tail of the per-service demand distribution: smaller is more skewed."""
    target_util: float = 0.6
    """The autoscaler's target utilisation per replica."""
    max_replica_util: float = 0.85
    """Replica caps let a service's peak (diurnal high and a burst) run at this utilisation: the
    replica's queue onset (the top of `sim.llm.profile.UTILISATION_GRID`, of its saturation rate),
    so a service at its cap is at the edge of queueing, not past it by design."""
    diurnal_amplitude: float = 0.3
    """Demand swings ±this around its mean over a 24-hour day, one clock for every service (their
    peaks within an hour of each other): peak to trough 1.86 at 0.3. Assumption: no LLM trace
    we could read gives the ratio (BurstGPT and Azure's traces show the daily cycle only as
    figures); tianpan.co, "Diurnal latency" (2026-05-09), describes provider queue depth
    doubling at the weekday peak, the order of this."""
    peak_hour: float = 14.0
    """The hour of the day's peak: the end of the 8:00–14:00 weekday peak that post describes."""
    start_hour: float = 8.0
    """The hour the scenario starts at: the morning ramp, where demand changes fastest (assumption)."""
    bursts_per_hour: float = 0.5
    rollouts_per_service_per_day: float = 4.0
    autoscale_every_ticks: int = 4
    pool_shares: tuple[PoolShare, ...] = ()
    """Services pinned to pools; the rest may run on any untainted whole-GPU node."""
    latency_sensitive_share: float = 0.0
    """Share of services whose requests are short-output, long-prompt completions (code
    completion), so their TTFT is most of what their users wait for. Each is drawn with a
    conversational twin of equal GPU demand."""
    sensitive_prompt_tokens: int = 1500
    sensitive_output_tokens: int = 13
    """Their median lengths: Azure's coding trace (Patel et al., "Splitwise", ISCA 2024: median
    prompt 1,500 tokens, output 13)."""
    twin_host_load: float = 0.0
    """Host cores the conversational twins keep busy per replica, as a multiple of
    `contention.hostCoresPerReplica`, beyond those (e.g. retrieval and embedding beside the server):
    assumption, a knob."""
    sensitive_service_time_ms: float = 50.0
    sensitive_contention: float = 2.0
    """Fields of the retired queue-law world, read and ignored (README, "Simulating your fleet")."""
    serving_metrics: bool = True
    """Prometheus scrapes the replicas' vLLM series (running, waiting, KV cache, TTFT): gpu-balancer
    reads them where it does, as the shipped product does. vLLM serves them on /metrics by default;
    false: a cluster that does not scrape them."""
    claims: str = "device-plugin"
    """How pods get their GPUs: `device-plugin` (`nvidia.com/gpu` requests) or `dra` (a
    ResourceClaimTemplate per shape, NVIDIA's DRA driver publishing every node's GPUs in a
    ResourceSlice). A node's GPUs are managed one way or the other, so training pods claim too."""


@dataclass(frozen=True)
class TrainingShape:
    jobs_per_hour: float = 0.0
    workers: tuple[int, ...] = (2, 4)
    gpus_per_worker: int = 4
    duration_hours: tuple[float, ...] = (1.0, 2.0)
    exposed_allreduce_share: float = 0.1
    """Share of a data-parallel step spent in the gradient all-reduce that backward does not hide,
    inside one NVLink domain: assumption (`sim.llm.training`)."""
    cross_clique_allreduce_stretch: float = 2.7
    """How much longer that all-reduce takes across NVLink domains, over the network: 232.5 GB/s
    bus bandwidth inside one 8-A100 node, 86 GB/s across two with four 200 Gb/s NICs each
    (NVIDIA/nccl-tests #175, all_reduce_perf)."""


@dataclass(frozen=True)
class Events:
    burst_pods_at_hour: float = -1.0
    """When ≥ 0: at this hour one service scales out by `burstPods` pods within one tick."""
    burst_pods: int = 200
    node_failures_at_hour: float = -1.0
    failed_nodes: int = 2
    failure_duration_hours: float = 1.0


@dataclass(frozen=True)
class ContentionShape:
    """How a replica's node slows its engine steps, channel by channel (`sim.llm.world`). Each
    channel's excess is multiplied by `scale`: at 0 where a replica runs cannot change its latency."""

    scale: float = 1.0
    host_cores_per_replica: float = 2.0
    """Cores a serving replica keeps busy: vLLM's engine-core process holds one at 100 % and the
    GIL keeps it to one (vllm-project/vllm #14538: "python gil prevents usage of more than 1 core
    per process"); the API server and detokeniser take the second: assumption."""
    training_cores_per_worker: float = 32.0
    """Cores a training worker keeps busy (its data loaders), its request in this simulator: assumption."""
    gpu_power_budget_share: float = 0.77
    """The node's GPU power budget over the GPUs' summed TDP: 1 / 1.3, POLCA's oversubscription
    (Patel et al., "POLCA: Power Oversubscription in LLM Cloud Providers", 2023: 30 % more servers
    in the same power for inference)."""
    power_sensitivity: float = 0.45
    """Step time lost per share of power over budget: a 14 % cap (700 → 600 W on an H100) costs
    5–8 % of memory-bound LLM inference throughput (factryze.ai, "Power capping"), 6.5 / 14."""
    gpus_per_pcie_switch: int = 2
    """GPUs behind one PCIe switch (a DGX H100 pairs two GPUs per switch with their NICs): assumption."""
    pcie_penalty: float = 0.05
    """Step time lost by a replica whose switch also carries a training worker's GPU (its
    all-reduce traffic through the NICs) or a replica loading its weights: assumption."""


@dataclass(frozen=True)
class ServingShape:
    """Every inference replica a continuous-batching LLM server (`sim.llm`)."""

    model: str = ""
    """A model of `sim.llm.hardware` (Llama-3.1-8B, ...) every service serves; its GPU is the node's
    `gpu.product` (a MIG instance of it on a MIG pool). Empty: each service serves the first of
    `DEFAULT_MODELS` that fits every pool it may run on (`service_model`)."""
    prompt_tokens: int = 1020
    output_tokens: int = 129
    """Median lengths: Azure's conversation trace (Patel et al., "Splitwise", ISCA 2024: median
    prompt 1,020 tokens, output 129)."""
    length_sigma: float = 0.8
    """Log-normal spread of both lengths: assumption."""
    ttft_slo_ms: float = 1000.0
    tpot_slo_ms: float = 100.0
    """The targets `slo_attainment` holds every request to: assumption."""
    image_pull_bytes_per_second: float = 200e6
    """Registry to node, first pod of an image on a node only (cached after): assumption."""
    weight_load_bytes_per_second: float = 2e9
    """Weights from storage into GPU memory: assumption."""
    startup_seconds: float = 30.0
    """Engine start, CUDA-graph capture and warm-up ("Graph capturing finished in 20-30 secs" in
    vLLM's start-up log): assumption."""
    tp8_share: float = 0.0
    """Share of services whose replica is the model at tensor parallelism 8 over two 4-GPU pods, a
    LeaderWorkerSet of size 2 (its leader and one worker, by their `group-key`), as vLLM serves a
    model across nodes; with `serving.model` at TP 4, it is the same model on twice the GPUs."""
    disaggregated_share: float = 0.0
    """Share of services served as prefill/decode pairs: a prefill pod and a decode pod of half the
    replica's GPUs each, labelled with one `gpu-balancer.io/serving-group`, the prefill pod handing
    each request's KV cache to its decode pod (one fixed pair per replica: assumption; llm-d's
    router pairs them per request). A pair serves what one replica on all its GPUs serves
    (assumption: disaggregation's TPOT gain is not modelled)."""
    util_noise_percent: float = 2.0
    """Standard deviation of the exporter's GPU_UTIL around the engine's kernel share: assumption."""
    missing_scrape_share: float = 0.01
    """Share of GPU samples a scrape misses: assumption."""


@dataclass(frozen=True)
class DegradedGpus:
    """GPUs slower than their peers of the same model, and episodes in which the hardware holds a
    GPU's clocks down (`sim.llm.gpus`). The exporters show each as a real GPU does: a lower SM
    clock under load, and NVML's HW-slowdown clock-event bit while an episode lasts."""

    enabled: bool = False
    speed_sigma: float = 0.1
    """Each GPU's step time over its model's fastest is 1 + |N(0, σ)|: σ 0.1 puts a GPU 8 % over
    the fastest on average, the spread between GPUs of one model that issue 46 quotes from Sinha
    et al., "Not All GPUs Are Created Equal" (SC22, arXiv 2208.11035); the law's shape: assumption."""
    outlier_share: float = 0.01
    outlier_stretch: float = 1.5
    """A share of GPUs are outliers, this much slower: 1.5× is the outliers' figure issue 46 quotes
    from the same paper; their share: assumption."""
    slowdown_share: float = 0.005
    """Share of GPUs in a hardware-slowdown episode at any moment: assumption (no fleet figure we
    could read gives it; the Llama 3 run's 220 faulty-GPU and HBM3 interruptions in 54 days on
    16,384 H100s, Dubey et al. 2024, are failures, a floor under it)."""
    slowdown_seconds: tuple[float, float] = (30.0, 36000.0)
    """An episode lasts log-uniformly between these: "tens of seconds to nearly ten hours", the
    fail-slows of Wu et al., "FALCON" (Alibaba, arXiv 2410.12588)."""
    slowdown_clock_share: float = 0.5
    """HW slowdown holds the clocks at this share or less: NVML's `HW_SLOWDOWN` reason "reduces
    the clocks by a factor of 2 or more" (nvml.h). A step stretches as the clock falls: assumption."""


@dataclass(frozen=True)
class CpuNeighbours:
    """CPU-bound batch pods on GPU nodes, as untainted GPU nodes take them, and serving
    Deployments that set CPU limits (`sim.llm.host`). The exporters show each as real ones do:
    node_exporter's CPU pressure (PSI) and cAdvisor's CFS throttled periods."""

    enabled: bool = False
    node_share: float = 0.5
    """Share of the GPU nodes that run batch pods: assumption (a fleet whose GPU nodes are not
    tainted, the CPU pool full)."""
    batch_demand_share: float = 1.5
    """Runnable batch threads on such a node over its cores: CPU-bound pods without limits take
    every idle core (CFS is work-conserving) and run a thread per visible core (Spark's and
    PyTorch's default pools): assumption."""
    interference_at_full_host: float = 0.146
    """Step time lost by a replica on a host whose cores are all busy, from the cache, memory
    bandwidth and wake-up delays its neighbours cause: 8.8–20.5 % throughput lost to noisy CPU,
    network and disk neighbours (eunomia.dev, 2026-05-24, as issue 46 quotes it), the mid-point;
    linear in the host's busy share: assumption."""
    limited_service_share: float = 0.25
    """Share of serving Deployments that set `limits.cpu` equal to their request (Guaranteed QoS):
    assumption."""
    engine_cores: float = 3.0
    """Cores vLLM's V1 engine needs busy at once on one GPU: 2 + N (vLLM PR #33940, N = 1)."""
    spin_share_of_visible_cores: float = 0.33
    """Threads beyond those that run in bursts under a CFS quota, as a share of the cores the node
    shows (thread pools sized to the host, not the quota: tobocop2/lilbee #660 measured 48 threads
    on a 96-core host against a 7.65-core quota): fitted to vLLM #49460's one point (6 CPUs on a
    172-core node: inter-token latency ×10), so 3 + 0.33 × 172 ≈ 60 cores wanted against 6."""


@dataclass(frozen=True)
class Failures:
    """GPUs that fail and nodes that are lost, at the rates a large fleet measured (`sim.llm.failures`).
    A failed GPU's pod is lost and its controller makes another; the device plugin takes the GPU
    out of the node's allocatable until it is repaired; dcgm-exporter shows the XID (48, a double-bit
    ECC error, for HBM) or loses the GPU's series (79, fallen off the bus). A lost node's series
    vanish and its pods are made again elsewhere."""

    enabled: bool = False
    gpu_failures_per_gpu_day: float = 2.49e-4
    """The Llama 3 405B run's 148 faulty-GPU and 72 HBM3 interruptions in 54 days on 16,384 H100s
    (Dubey et al., "The Llama 3 Herd of Models", 2024, table 5): 220 / (54 × 16,384)."""
    hbm_share: float = 0.327
    """Of those, the HBM3 ones (72 / 220): they show XID 48; the rest XID 79."""
    gpu_repair_hours: float = 24.0
    """A failed GPU stays out until the node is drained and repaired: assumption."""
    node_losses_per_node_day: float = 4.8e-4
    """The same run's host-side interruptions (unplanned host maintenance 32, NIC 7, SSD 3, power
    supply 3, chassis 2, IO board 2, CPU 2, system memory 2: 53) over 54 days on its 2,048 nodes."""
    node_loss_hours: float = 1.0
    """How long a lost node stays away: assumption."""


@dataclass(frozen=True)
class ColdStart:
    """What a new replica waits for before it serves, each term on its own (`sim.llm.startup`):
    the image's pull and extraction where the node's disk does not hold it, the weights from a
    node-local model cache or a remote store, the engine's start. Nodes keep images on disk, the
    least recently used evicted as the kubelet's image GC does, and report them in `status.images`;
    the nodes of the model cache carry Fluid's dataset label."""

    enabled: bool = False
    shared_image: bool = True
    """Every service runs one vLLM image (`vllm/vllm-openai`), as fleets that serve many models on
    one engine do; false: each service its own image of the same size."""
    image_bytes: float = 5.2e9
    """The serving image without weights: CUDA 2.8 GB, Torch 1.4 GB, other libraries 1 GB, the
    parts of a Llama 3.1 8B container BentoML lists ("Cold-starting LLMs on Kubernetes in under
    30 seconds", 2025-04-11)."""
    pull_bytes_per_second: float = 61e6
    extract_bytes_per_second: float = 96e6
    """Registry to node, then layers unpacked: the same post's 20.2 GB image (those parts and 15 GB
    of weights) took 5–6 min to pull and 3–4 min to extract, so 20.2 GB over 330 s and 210 s."""
    remote_weight_bytes_per_second: float = 13.4e6
    """Weights from the remote store: ~20 minutes per worker (NVIDIA Dynamo's model-caching docs, as
    issue 46 quotes them), read as Llama-3.1-8B's 16 GB in 1,200 s; the model those docs timed is
    not given: assumption."""
    cached_weight_bytes_per_second: float = 133e6
    """Weights from a cache: ~2 minutes (the same docs' shared cache), 16 GB in 120 s."""
    model_cache_node_share: float = 0.25
    """Share of GPU nodes in the model cache's node group (a KServe LocalModelCache node group, or
    the nodes Fluid caches a dataset on), which holds every model the fleet serves: assumption."""
    image_disk_bytes: float = 200e9
    """The disk the container runtime keeps images on: assumption."""
    image_gc_high_percent: float = 85.0
    image_gc_low_percent: float = 80.0
    """The kubelet's image GC: over the high mark it removes unused images, least recently used
    first, down to the low mark (`imageGCHighThresholdPercent` 85, `imageGCLowThresholdPercent` 80,
    the KubeletConfiguration defaults)."""
    new_tag_share: float = 0.1
    """Share of rollouts that move the service to a new image tag (an engine upgrade) rather than a
    change of configuration only: assumption."""


@dataclass(frozen=True)
class PcieNeighbours:
    """Host↔GPU traffic through the PCIe switch a replica's GPU shares with its neighbours' GPUs
    (`sim.llm.pcie`): training workers' data loaders and optimizer offload, replicas loading their
    weights. The GPU-to-switch map is fixed (`contention.gpusPerPcieSwitch` GPUs in index order
    per switch); dcgm-exporter shows each GPU's traffic as `DCGM_FI_PROF_PCIE_TX_BYTES` and
    `_RX_BYTES`, as a real one does."""

    enabled: bool = False
    uplink_bytes_per_second: float = 63e9
    """What one switch's uplink to the host carries, both ways together: PCIe Gen4 x16, 16 GT/s on
    16 lanes at 128b/130b, 31.5 GB/s each way (PCI-SIG). A DGX A100 puts two GPUs and two NICs
    behind each of its four Gen4 switches (NVIDIA, "DGX A100 System Architecture", 2020): the
    A100s on which arXiv 2508.20274 measured PCIe noisy neighbours."""
    offload_share: float = 0.5
    """Share of training jobs whose workers offload optimizer state to host memory (DeepSpeed
    ZeRO-Offload, FSDP's CPU offload), as fine-tuning on few GPUs does to fit: assumption."""
    offload_bytes_per_second: float = 16e9
    """An offloading worker's GPU traffic, both ways: ZeRO-Offload moves the fp16 gradients to the
    host and the fp16 parameters back every step, 4 bytes per parameter (Ren et al., USENIX ATC
    2021), while a step computes 6 FLOPs per parameter and token, so 4 × R / (6 × T) bytes a second
    at R FLOP/s over T tokens a step: 16 GB/s at 100 TFLOP/s (a third of an A100's dense BF16) and
    4,096 tokens a step per GPU (R and T: assumption)."""
    loader_bytes_per_second: float = 0.4e9
    """Input batches a training GPU's data loaders copy to it: ResNet-50 on an A100 takes ~2,500
    decoded 224×224 images a second, 150 kB each (assumption, the order of MLPerf's A100 results)."""
    serving_bytes_per_second: float = 0.13e9
    """A serving replica's own traffic (token ids in, sampled tokens out, host-side scheduling):
    the order of a real scrape's busy A100 (`tests/fixtures/real_exporters/nvidia-docs-a100-mig-1g5gb.txt`:
    33 MB/s out, 98 MB/s in): assumption."""
    stretch_at_full_uplink: float = 0.15
    """Step time a replica loses when its neighbours fill its switch's uplink, linear in their share
    of it: PCIe-aware control cut p99 latency by 15 % on A100s shared with training jobs and data
    loaders, placement about half of it, and vLLM's TTFT p99 by 10–15 % (Darzi et al., "Predictable
    LLM Serving on GPU Clusters", arXiv 2508.20274); read as the whole loss at a full uplink:
    assumption."""


@dataclass(frozen=True)
class Topology:
    """Where the pods of one multi-pod replica sit against each other (`sim.llm.topology`): a
    tensor-parallel replica whose ranks straddle NVLink domains all-reduces over the network, and a
    prefill/decode pair hands its KV cache over the network rather than over NVLink. The fleet's
    NVLink domains are its `nvidia.com/gpu.clique` values, as GPU feature discovery labels a
    GB200 NVL72 rack's trays. Off: every pod pair costs what it costs inside one domain."""

    enabled: bool = False
    cross_domain_allreduce_stretch: float = 2.7
    """How much longer an all-reduce takes across NVLink domains: 232.5 GB/s bus bandwidth inside
    one 8-A100 node against 86 GB/s across two with four 200 Gb/s NICs each (NVIDIA/nccl-tests
    #175, all_reduce_perf), the same ratio taken for the latency of small ones (assumption). It
    predicts ~35 ms more TTFT for a 1,020-token prompt of a 70B model at TP 8; vLLM #17006 (as
    issue 46 quotes it) measured ~100 ms across nodes (`tests/sim/test_topology.py`)."""
    kv_seconds_per_token_in_domain: float = 31e-6
    """KV handover from prefill to decode inside one NVLink domain: ~31 ms inside one 8-GPU node
    (vLLM PR #6170, as issue 46 quotes it), read as a 1,000-token prompt's (assumption)."""
    kv_seconds_per_token_across: float = 52.6e-6
    """The same across the network: a ~5,000-token handover took 263 ms across nodes (vLLM #50913,
    as issue 46 quotes it)."""


@dataclass(frozen=True)
class Conditions:
    """The fleet conditions where placement can change what users feel, each switched on by a
    scenario (`conditions.<name>.enabled`), so the same fleet runs with and without it."""

    degraded_gpus: DegradedGpus = field(default_factory=DegradedGpus)
    cpu_neighbours: CpuNeighbours = field(default_factory=CpuNeighbours)
    cold_start: ColdStart = field(default_factory=ColdStart)
    failures: Failures = field(default_factory=Failures)
    pcie_neighbours: PcieNeighbours = field(default_factory=PcieNeighbours)
    topology: Topology = field(default_factory=Topology)


@dataclass(frozen=True)
class Scenario:
    name: str = "custom"
    hours: float = 6.0
    tick_seconds: float = 30.0
    telemetry_lag_seconds: float = 45.0
    """Exporter collect interval plus scrape interval: how old what policies see is."""
    descheduler_every_ticks: int = 10
    webhook_replicas: int = 1
    """Admissions alternate over this many webhook replicas, which share only what the API server
    shows them: bindings, `bindDelaySeconds` after they happen."""
    bind_delay_seconds: float = 0.0
    fleet: FleetShape = field(default_factory=FleetShape)
    inference: InferenceShape = field(default_factory=InferenceShape)
    training: TrainingShape = field(default_factory=TrainingShape)
    events: Events = field(default_factory=Events)
    serving: ServingShape = field(default_factory=ServingShape)
    contention: ContentionShape = field(default_factory=ContentionShape)
    scheduler: Profile = DEFAULT_PROFILE
    """The scheduler profile every policy's scheduler runs (`simulate --scheduler-config`)."""
    conditions: Conditions = field(default_factory=Conditions)


BUILT_IN = {
    # Every scenario runs in the serving world: each service serves the first default model that
    # fits its GPUs (Llama-3.1-8B on whole GPUs), Azure's conversation lengths, the default
    # traffic and autoscaler. Each scenario keeps the reason it was made for and its sizes.
    # Skewed demand over one whole traffic cycle (6 hours) on the default 32-node H100 fleet.
    "skewed-inference": Scenario(name="skewed-inference"),
    "burst": Scenario(name="burst", hours=2.0, events=Events(burst_pods_at_hour=1.0, burst_pods=200),
                      fleet=FleetShape(nodes=48), inference=InferenceShape(services=30, mean_demand_fraction=0.3)),
    "training-mix": Scenario(name="training-mix", hours=6.0,
                             inference=InferenceShape(services=30, mean_demand_fraction=0.3),
                             training=TrainingShape(jobs_per_hour=1.5)),
    # Pooled and tainted fleets: H100 and L4 pools serve Llama-3.1-8B (it fits an L4's 24 GB with
    # room for its KV cache), the MIG pool's 1g.10gb instances a 1.5B model.
    "mixed-pools": Scenario(
        name="mixed-pools", fleet=FleetShape(pools=(
            PoolShape("h100", 12, 8, {"pool": "h100", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
            PoolShape("l4", 12, 8, {"pool": "l4", "nvidia.com/gpu.product": "NVIDIA-L4"}),
            PoolShape("reserved", 4, 8, {"pool": "reserved", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                      (TaintShape("gpu-balancer.io/reserved", "batch", "NoSchedule"),)),
            PoolShape("mig", 4, 8, {"pool": "mig", "nvidia.com/mig.strategy": "mixed"}, mig_profile="1g.10gb",
                      instances_per_gpu=7))),
        inference=InferenceShape(services=40, pool_shares=(
            PoolShare("h100", 0.4), PoolShare("l4", 0.3), PoolShare("reserved", 0.1), PoolShare("mig", 0.2)))),
    # Services that differ in what their users wait for: half are code completion (long prompts,
    # a few output tokens: TTFT is nearly all of it), each with a conversational twin of equal GPU
    # demand whose replicas keep twice a replica's host cores busy. No bursts: a burst saturates a
    # service wherever it runs.
    "latency-sensitivity": Scenario(
        name="latency-sensitivity", hours=6.0,
        inference=InferenceShape(services=40, mean_demand_fraction=0.3, bursts_per_hour=0.0,
                                 latency_sensitive_share=0.5, twin_host_load=1.0)),
    # Parameters from the world, fixed before any run: a 32-node H100 fleet (the default's),
    # Llama-3.1-8B replicas as most chat fleets serve, Azure's conversation lengths, the default
    # traffic shape and its autoscaler.
    "llm-fleet": Scenario(name="llm-fleet", hours=2.0, serving=ServingShape(model="Llama-3.1-8B")),
    # Inference beside training jobs: the noisy neighbour of GPU clusters (host cores, power, PCIe).
    "llm-training-mix": Scenario(name="llm-training-mix", hours=2.0, serving=ServingShape(model="Llama-3.1-8B"),
                                 inference=InferenceShape(services=30, mean_demand_fraction=0.3),
                                 training=TrainingShape(jobs_per_hour=1.5)),
    # The same fleet and traffic as llm-fleet, its GPUs time-sliced in two (the GPU Operator's
    # time-slicing, `replicas: 2`), as platform teams share GPUs between small services: each
    # replica gets half the memory, and the replicas of one GPU take turns on its SMs. Demand is
    # a share of the advertised units, so half of llm-fleet's per GPU unit gives its load per GPU.
    "llm-shared-gpus": Scenario(name="llm-shared-gpus", hours=2.0, serving=ServingShape(model="Llama-3.1-8B"),
                                fleet=FleetShape(pools=(PoolShape("shared", 32, 8, sharing="time-slicing",
                                                                  replicas_per_gpu=2),)),
                                inference=InferenceShape(mean_demand_fraction=0.175)),
    "node-failure": Scenario(name="node-failure", hours=4.0,
                             events=Events(node_failures_at_hour=1.5, failed_nodes=3, failure_duration_hours=1.0)),
    # Fixed before any run (issue 46), each from a reason: the size, 96 H100 nodes of 8
    # GPUs for two hours; llm-fleet's services per node (40 on 32 nodes, so 120), its model,
    # lengths, traffic and autoscaler; every GPU with its own speed from the published spread,
    # 1 % outliers, and 0.5 % of GPUs in a hardware-slowdown episode at any moment
    # (`DegradedGpus`: each value's source or "assumption"). GPU failures and node losses at the
    # Llama 3 run's rates (`Failures`) joined after the first recorded run, as issue 46 lists them
    # for this scenario; their rates are the published ones, chosen before they ran.
    "llm-degraded-gpus": Scenario(name="llm-degraded-gpus", hours=2.0, serving=ServingShape(model="Llama-3.1-8B"),
                                  fleet=FleetShape(nodes=96), inference=InferenceShape(services=120),
                                  conditions=Conditions(degraded_gpus=DegradedGpus(enabled=True),
                                                        failures=Failures(enabled=True))),
    # Fixed before any run (issue 46): llm-fleet's fleet, model and traffic; half its nodes also
    # run CPU-bound batch pods that take every idle core, and a quarter of the serving
    # Deployments set CPU limits equal to their requests (`CpuNeighbours`: each value's source or
    # "assumption").
    "llm-cpu-neighbours": Scenario(name="llm-cpu-neighbours", hours=2.0, serving=ServingShape(model="Llama-3.1-8B"),
                                   conditions=Conditions(cpu_neighbours=CpuNeighbours(enabled=True))),
    # Fixed before any run (issue 46), each from a reason: the size (96 H100 nodes of 8
    # GPUs, two hours) and llm-degraded-gpus' services and traffic, with bursts four times as
    # often (2 an hour: "bursty traffic", assumption); every service runs one shared vLLM image;
    # weights come from a remote store, or from the node-local model cache that a quarter of the
    # nodes hold (`ColdStart`: each term's source or "assumption").
    "llm-cold-start": Scenario(name="llm-cold-start", hours=2.0, serving=ServingShape(model="Llama-3.1-8B"),
                               fleet=FleetShape(nodes=96), inference=InferenceShape(services=120, bursts_per_hour=2.0),
                               conditions=Conditions(cold_start=ColdStart(enabled=True))),
    # Fixed before any run (issue 46), each from a reason: A100 nodes laid out as a DGX A100 (8
    # GPUs, two behind each PCIe Gen4 switch), the hardware on which arXiv 2508.20274 measured
    # PCIe noisy neighbours; llm-training-mix's 32 nodes, services and traffic; its training
    # GPU-hours (about 27 GPUs busy an hour) as data-parallel fine-tuning jobs of one GPU per worker
    # pod (a PyTorchJob's replicas), 2 to 8 workers, so training GPUs sit beside replicas behind
    # shared switches; half the jobs offload optimizer state to host memory (`PcieNeighbours`:
    # each value's source or "assumption").
    "llm-pcie-neighbours": Scenario(
        name="llm-pcie-neighbours", hours=2.0, serving=ServingShape(model="Llama-3.1-8B"),
        fleet=FleetShape(pools=(PoolShape("a100", 32, 8, {"pool": "a100", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),)),
        inference=InferenceShape(services=30, mean_demand_fraction=0.3),
        training=TrainingShape(jobs_per_hour=4.0, workers=(2, 4, 8), gpus_per_worker=1),
        conditions=Conditions(pcie_neighbours=PcieNeighbours(enabled=True))),
    # Fixed before any run (issue 46), each for a reason: four GB200 NVL72 racks (72 GPUs each, a
    # compute tray of 4 GPUs and 144 Grace cores per node, 18 trays in one NVLink domain: NVIDIA's
    # GB200 NVL72 specification), the hardware on which GPU feature discovery labels NVLink
    # domains across nodes; one site (a zone). Llama-3.1-70B, the model issue 46 names, as a
    # dozen endpoints (assumption), each a third of the time: TP 4 on one tray, TP 8 over two
    # (a LeaderWorkerSet), or a prefill/decode pair of TP 4 pods (assumption: equal thirds).
    # Azure's conversation lengths and the default traffic shape, as llm-fleet.
    "llm-tp-disagg": Scenario(
        name="llm-tp-disagg", hours=2.0,
        serving=ServingShape(model="Llama-3.1-70B-TP4", tp8_share=1 / 3, disaggregated_share=1 / 3),
        fleet=FleetShape(cpu_per_node=144, memory_gib_per_node=960, zones=1, pools=(
            PoolShape("gb200", 72, 4, {"pool": "gb200", "nvidia.com/gpu.product": "NVIDIA-GB200"}, nodes_per_clique=18),)),
        inference=InferenceShape(services=12),
        conditions=Conditions(topology=Topology(enabled=True))),
}


ABOUT = {
    "skewed-inference": "inference services of skewed demand on 32 H100 nodes for six hours",
    "burst": "one service scales out by 200 replicas at once after an hour, on 48 H100 nodes",
    "training-mix": "inference beside 1.5 training jobs an hour for six hours",
    "mixed-pools": "H100 and L4 pools, a tainted reserved pool and MIG 1g.10gb slices serving a 1.5B model",
    "latency-sensitivity": "half the services code completion (long prompts), their twins loading the host",
    "llm-fleet": "Llama-3.1-8B replicas on 32 H100 nodes for two hours",
    "llm-training-mix": "llm-fleet's replicas beside training jobs",
    "llm-shared-gpus": "llm-fleet's traffic on GPUs time-sliced in two",
    "node-failure": "three nodes fail for an hour, 90 minutes in",
    "llm-degraded-gpus": "96 H100 nodes whose GPUs differ in speed, a few slowed, failing or lost at published rates",
    "llm-cpu-neighbours": "llm-fleet with CPU-bound batch pods on half its nodes, some replicas under CPU limits",
    "llm-cold-start": "96 H100 nodes, bursty traffic, one shared vLLM image, weights remote or in a node-local cache",
    "llm-pcie-neighbours": "32 A100 nodes, replicas beside one-GPU training workers behind shared PCIe switches",
    "llm-tp-disagg": "four GB200 NVL72 racks serving Llama-3.1-70B at TP 4, TP 8 over two pods, and prefill/decode pairs",
}
"""One line on each built-in scenario, for `simulate --list`."""


def load_scenario(text: str) -> Scenario:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyError(f"scenario is not valid YAML: {yaml_problem(error)}") from None
    if document is None:
        raise PolicyError("scenario is empty: give at least its name (every other field has a default, "
                          "see README, \"Simulating your fleet\")")
    if not isinstance(document, dict):
        raise PolicyError(f"scenario must be a YAML mapping of fields, got a {type(document).__name__}")
    if "scheduler" in document:  # read from a real KubeSchedulerConfiguration, where it is checked
        raise PolicyError("scheduler: give the scheduler's profile as a KubeSchedulerConfiguration file, "
                          "with simulate --scheduler-config")
    return checked(decode_fields(Scenario, document, path=""))


def checked(scenario: Scenario) -> Scenario:
    """The scenario, or PolicyError naming the first field that is out of range or inconsistent:
    every check a scenario file gets, for a scenario built or overridden in code too."""
    names = [p.name for p in scenario.fleet.pool_shapes()]
    if len(set(names)) != len(names):
        raise PolicyError("fleet.pools: pool names must be unique")
    for i, share in enumerate(scenario.inference.pool_shares):
        if share.pool not in names:
            raise PolicyError(f"inference.poolShares[{i}].pool: no pool named {share.pool!r}")
    if sum(s.share for s in scenario.inference.pool_shares) > 1 + 1e-9:
        raise PolicyError("inference.poolShares: shares add up to more than 1")
    for path, ok, allowed in _ranges(scenario):
        if not ok:
            raise PolicyError(f"{path}: out of range (allowed: {allowed})")
    _check_serving(scenario)
    return scenario


def _check_serving(scenario: Scenario) -> None:
    """Every service has a model that fits each GPU unit it may run on."""
    from sim.llm.hardware import model_named

    if scenario.serving.model:
        try:
            model_named(scenario.serving.model)
        except KeyError as error:
            raise PolicyError(f"serving.model: {error.args[0]}") from None
    _check_multi_pod(scenario)
    for pool in scenario.fleet.pool_shapes():
        try:
            unit_gpu(pool)
        except (KeyError, ValueError) as error:
            raise PolicyError(f"fleet.pools: pool {pool.name!r}: {error.args[0]}") from None
        if scenario.serving.model and kv_tokens(pool, scenario.serving.model) < MIN_KV_TOKENS:
            raise PolicyError(f"fleet.pools: pool {pool.name!r} gives each pod {unit_name(pool)}: "
                              f"{scenario.serving.model} leaves too little room for its KV cache "
                              f"(under {MIN_KV_TOKENS:,} tokens); leave serving.model empty to serve a model that fits")
    groups = service_pool_groups(scenario)
    if sum(s.share for s in scenario.inference.pool_shares) < 1 - 1e-9 and None not in groups:
        raise PolicyError("inference.poolShares: the services pinned to no pool run on untainted whole-GPU "
                          "pools, and this fleet has none: pin every service (shares adding up to 1)")
    for pools in groups.values():
        service_model(scenario, pools)


def _check_multi_pod(scenario: Scenario) -> None:
    """Multi-pod replicas serve `serving.model` at twice its tensor parallelism, one half per pod."""
    from sim.llm.hardware import model_named, sharded_wider

    sv = scenario.serving
    if not (sv.tp8_share or sv.disaggregated_share):
        return
    if not sv.model or model_named(sv.model).tensor_parallel < 2 or sharded_wider(model_named(sv.model)) is None:
        raise PolicyError("serving.tp8Share, serving.disaggregatedShare: a replica of two pods serves serving.model at "
                          "twice its tensor parallelism, so serving.model must be a sharded model with such a variant "
                          "(Llama-3.1-70B-TP4)")


MIN_KV_TOKENS = 16_384
"""A model fits a GPU unit when, beside its weights, vLLM's KV cache there holds this many tokens:
two requests at the 8,192-token context serving deployments commonly cap Llama-3.1 at
(assumption)."""


def unit_gpu(pool: PoolShape):
    """The GPU a pod of the pool is given: the node's GPU, or a MIG instance of it."""
    from sim.llm.hardware import gpu_of_product, mig_slice

    gpu = gpu_of_product(pool_product(pool))
    return mig_slice(gpu, pool.mig_profile) if pool.mig_profile else gpu


def unit_name(pool: PoolShape) -> str:
    gpu = unit_gpu(pool)
    return f"1/{pool.shares_per_gpu} of one {gpu.name}" if pool.shares_per_gpu > 1 else f"one {gpu.name}"


def kv_tokens(pool: PoolShape, model_name: str) -> int:
    """Tokens the KV cache of a replica of the model holds on one of the pool's units (≤ 0: the
    weights do not fit)."""
    from sim.llm.engine import GPU_MEMORY_UTILIZATION, kv_capacity_tokens
    from sim.llm.hardware import model_named

    # vLLM is started with --gpu-memory-utilization 0.9 / k on a GPU shared k ways (`profile_of`).
    return kv_capacity_tokens(unit_gpu(pool), model_named(model_name), GPU_MEMORY_UTILIZATION / pool.shares_per_gpu)


def service_pool_groups(scenario: Scenario) -> dict[str | None, tuple[PoolShape, ...]]:
    """The pools a service may run on, by the pool it is pinned to: that pool alone, and for the
    services pinned to none (None) the untainted whole-GPU pools together."""
    pools = scenario.fleet.pool_shapes()
    pinned = {s.pool for s in scenario.inference.pool_shares}
    free = tuple(p for p in pools if not p.taints and not p.mig_profile)
    return {**{p.name: (p,) for p in pools if p.name in pinned}, **({None: free} if free else {})}


def service_model(scenario: Scenario, pools: tuple[PoolShape, ...]) -> str:
    """The model a service serves on these pools: `serving.model`, or else the first of
    `DEFAULT_MODELS` that fits every one of them. PolicyError where none does."""
    from sim.llm.hardware import DEFAULT_MODELS

    if scenario.serving.model:
        return scenario.serving.model
    for name in DEFAULT_MODELS:
        if all(kv_tokens(pool, name) >= MIN_KV_TOKENS for pool in pools):
            return name
    raise PolicyError(f"fleet.pools: no model of {', '.join(DEFAULT_MODELS)} fits "
                      f"{' and '.join(unit_name(p) for p in pools)}")


def pool_product(pool: PoolShape) -> str:
    """The pool's `nvidia.com/gpu.product` label (the fleet's default H100 where it sets none)."""
    return pool.labels.get("nvidia.com/gpu.product", DEFAULT_PRODUCT)


def _ranges(scenario: Scenario) -> list[tuple[str, bool, str]]:
    """(field, whether its value is allowed, what is allowed) for every bounded field."""
    f, inf, tr, ev = scenario.fleet, scenario.inference, scenario.training, scenario.events
    total_nodes = sum(p.nodes for p in f.pool_shapes())

    def within(path: str, value: float, low: float, high: float, *, open_low: bool = False,
               open_high: bool = False) -> tuple[str, bool, str]:
        ok = (low < value if open_low else low <= value) and (value < high if open_high else value <= high)
        return path, ok, f"{'more than ' if open_low else ''}{low:g} to {high:g}{' (exclusive)' if open_high else ''}"

    def at_least(path: str, value: float, low: float, *, strictly: bool = False) -> tuple[str, bool, str]:
        return path, value > low if strictly else value >= low, f"{'more than' if strictly else 'at least'} {low:g}"

    checks = [
        within("hours", scenario.hours, 0, 24 * 7, open_low=True), within("tickSeconds", scenario.tick_seconds, 5, 600),
        within("telemetryLagSeconds", scenario.telemetry_lag_seconds, 0, 3600),
        at_least("deschedulerEveryTicks", scenario.descheduler_every_ticks, 1),
        at_least("webhookReplicas", scenario.webhook_replicas, 1), at_least("bindDelaySeconds", scenario.bind_delay_seconds, 0),
        within("fleet.nodes", f.nodes, 1, 2000), within("fleet.gpusPerNode", f.gpus_per_node, 1, 16),
        at_least("fleet.cpuPerNode", f.cpu_per_node, 1), at_least("fleet.memoryGibPerNode", f.memory_gib_per_node, 1),
        at_least("fleet.zones", f.zones, 1), at_least("fleet.nodesPerClique", f.nodes_per_clique, 1),
        within("inference.services", inf.services, 0, 2000),
        within("inference.meanDemandFraction", inf.mean_demand_fraction, 0, 1),
        at_least("inference.paretoAlpha", inf.pareto_alpha, 1.0, strictly=True),
        within("inference.targetUtil", inf.target_util, 0, 1, open_low=True),
        within("inference.maxReplicaUtil", inf.max_replica_util, 0, 1, open_low=True),
        within("inference.diurnalAmplitude", inf.diurnal_amplitude, 0, 1, open_high=True),
        within("inference.peakHour", inf.peak_hour, 0, 24), within("inference.startHour", inf.start_hour, 0, 24),
        at_least("inference.burstsPerHour", inf.bursts_per_hour, 0),
        at_least("inference.rolloutsPerServicePerDay", inf.rollouts_per_service_per_day, 0),
        at_least("inference.autoscaleEveryTicks", inf.autoscale_every_ticks, 1),
        within("inference.latencySensitiveShare", inf.latency_sensitive_share, 0, 0.5),
        within("inference.sensitivePromptTokens", inf.sensitive_prompt_tokens, 1, 100_000),
        within("inference.sensitiveOutputTokens", inf.sensitive_output_tokens, 2, 100_000),
        within("inference.sensitiveServiceTimeMs", inf.sensitive_service_time_ms, 1, 10_000),
        within("inference.sensitiveContention", inf.sensitive_contention, 1, 10),
        within("inference.twinHostLoad", inf.twin_host_load, 0, 10),
        ("inference.claims", inf.claims in ("device-plugin", "dra"), "device-plugin or dra"),
        at_least("training.jobsPerHour", tr.jobs_per_hour, 0),
        ("training.workers", bool(tr.workers) and all(1 <= w <= total_nodes * 16 for w in tr.workers),
         f"a non-empty list of 1 to {total_nodes * 16}"),
        within("training.gpusPerWorker", tr.gpus_per_worker, 1, 16),
        within("training.exposedAllreduceShare", tr.exposed_allreduce_share, 0, 1),
        within("training.crossCliqueAllreduceStretch", tr.cross_clique_allreduce_stretch, 1, 100),
        ("training.durationHours", bool(tr.duration_hours) and all(h > 0 for h in tr.duration_hours),
         "a non-empty list of hours, each more than 0"),
        within("events.burstPods", ev.burst_pods, 0, 100_000), within("events.failedNodes", ev.failed_nodes, 0, total_nodes),
        at_least("events.failureDurationHours", ev.failure_duration_hours, 0, strictly=True),
    ]
    sv, co = scenario.serving, scenario.contention
    checks += [
        within("contention.scale", co.scale, 0, 10), within("contention.hostCoresPerReplica", co.host_cores_per_replica, 0, 64),
        within("contention.trainingCoresPerWorker", co.training_cores_per_worker, 0, 512),
        within("contention.gpuPowerBudgetShare", co.gpu_power_budget_share, 0, 2, open_low=True),
        within("contention.powerSensitivity", co.power_sensitivity, 0, 1),
        within("contention.gpusPerPcieSwitch", co.gpus_per_pcie_switch, 1, 16),
        within("contention.pciePenalty", co.pcie_penalty, 0, 1),
        within("serving.promptTokens", sv.prompt_tokens, 1, 100_000), within("serving.outputTokens", sv.output_tokens, 2, 100_000),
        within("serving.lengthSigma", sv.length_sigma, 0, 2),
        at_least("serving.ttftSloMs", sv.ttft_slo_ms, 0, strictly=True), at_least("serving.tpotSloMs", sv.tpot_slo_ms, 0, strictly=True),
        at_least("serving.imagePullBytesPerSecond", sv.image_pull_bytes_per_second, 0, strictly=True),
        at_least("serving.weightLoadBytesPerSecond", sv.weight_load_bytes_per_second, 0, strictly=True),
        at_least("serving.startupSeconds", sv.startup_seconds, 0),
        within("serving.utilNoisePercent", sv.util_noise_percent, 0, 50),
        within("serving.missingScrapeShare", sv.missing_scrape_share, 0, 0.5),
        within("serving.tp8Share", sv.tp8_share, 0, 1), within("serving.disaggregatedShare", sv.disaggregated_share, 0, 1),
        ("serving.disaggregatedShare", sv.tp8_share + sv.disaggregated_share <= 1 + 1e-9,
         "at most 1 - serving.tp8Share (each service is one kind)"),
    ]
    dg = scenario.conditions.degraded_gpus
    checks += [
        within("conditions.degradedGpus.speedSigma", dg.speed_sigma, 0, 1),
        within("conditions.degradedGpus.outlierShare", dg.outlier_share, 0, 1),
        within("conditions.degradedGpus.outlierStretch", dg.outlier_stretch, 1, 10),
        within("conditions.degradedGpus.slowdownShare", dg.slowdown_share, 0, 1),
        ("conditions.degradedGpus.slowdownSeconds", len(dg.slowdown_seconds) == 2
         and 0 < dg.slowdown_seconds[0] <= dg.slowdown_seconds[1], "[shortest, longest], 0 < shortest ≤ longest"),
        within("conditions.degradedGpus.slowdownClockShare", dg.slowdown_clock_share, 0, 1, open_low=True),
    ]
    cn = scenario.conditions.cpu_neighbours
    checks += [
        within("conditions.cpuNeighbours.nodeShare", cn.node_share, 0, 1),
        within("conditions.cpuNeighbours.batchDemandShare", cn.batch_demand_share, 0, 10),
        within("conditions.cpuNeighbours.interferenceAtFullHost", cn.interference_at_full_host, 0, 1),
        within("conditions.cpuNeighbours.limitedServiceShare", cn.limited_service_share, 0, 1),
        within("conditions.cpuNeighbours.engineCores", cn.engine_cores, 0, 64),
        within("conditions.cpuNeighbours.spinShareOfVisibleCores", cn.spin_share_of_visible_cores, 0, 1),
    ]
    fl = scenario.conditions.failures
    checks += [
        within("conditions.failures.gpuFailuresPerGpuDay", fl.gpu_failures_per_gpu_day, 0, 1),
        within("conditions.failures.hbmShare", fl.hbm_share, 0, 1),
        at_least("conditions.failures.gpuRepairHours", fl.gpu_repair_hours, 0, strictly=True),
        within("conditions.failures.nodeLossesPerNodeDay", fl.node_losses_per_node_day, 0, 1),
        at_least("conditions.failures.nodeLossHours", fl.node_loss_hours, 0, strictly=True),
    ]
    cs = scenario.conditions.cold_start
    checks += [
        at_least(f"conditions.coldStart.{name}", getattr(cs, field_name), 0, strictly=True)
        for name, field_name in (("imageBytes", "image_bytes"), ("pullBytesPerSecond", "pull_bytes_per_second"),
                                 ("extractBytesPerSecond", "extract_bytes_per_second"),
                                 ("remoteWeightBytesPerSecond", "remote_weight_bytes_per_second"),
                                 ("cachedWeightBytesPerSecond", "cached_weight_bytes_per_second"),
                                 ("imageDiskBytes", "image_disk_bytes"))]
    checks += [
        within("conditions.coldStart.modelCacheNodeShare", cs.model_cache_node_share, 0, 1),
        within("conditions.coldStart.imageGcHighPercent", cs.image_gc_high_percent, 0, 100, open_low=True),
        ("conditions.coldStart.imageGcLowPercent", 0 < cs.image_gc_low_percent <= cs.image_gc_high_percent,
         "more than 0, at most imageGcHighPercent"),
        within("conditions.coldStart.newTagShare", cs.new_tag_share, 0, 1),
    ]
    pn = scenario.conditions.pcie_neighbours
    checks += [
        at_least("conditions.pcieNeighbours.uplinkBytesPerSecond", pn.uplink_bytes_per_second, 0, strictly=True),
        within("conditions.pcieNeighbours.offloadShare", pn.offload_share, 0, 1),
        *(at_least(f"conditions.pcieNeighbours.{name}", getattr(pn, field_name), 0)
          for name, field_name in (("offloadBytesPerSecond", "offload_bytes_per_second"),
                                   ("loaderBytesPerSecond", "loader_bytes_per_second"),
                                   ("servingBytesPerSecond", "serving_bytes_per_second"))),
        within("conditions.pcieNeighbours.stretchAtFullUplink", pn.stretch_at_full_uplink, 0, 10),
    ]
    tp = scenario.conditions.topology
    checks += [
        within("conditions.topology.crossDomainAllreduceStretch", tp.cross_domain_allreduce_stretch, 1, 100),
        within("conditions.topology.kvSecondsPerTokenInDomain", tp.kv_seconds_per_token_in_domain, 0, 1),
        within("conditions.topology.kvSecondsPerTokenAcross", tp.kv_seconds_per_token_across, 0, 1),
    ]
    for i, pool in enumerate(f.pools):
        checks += [within(f"fleet.pools[{i}].nodes", pool.nodes, 1, 2000),
                   within(f"fleet.pools[{i}].gpusPerNode", pool.gpus_per_node, 1, 16),
                   within(f"fleet.pools[{i}].instancesPerGpu", pool.instances_per_gpu, 1, 7),
                   (f"fleet.pools[{i}].sharing", pool.sharing in ("", "time-slicing", "mps")
                    and not (pool.sharing and pool.mig_profile), "time-slicing or mps, on a pool without MIG"),
                   within(f"fleet.pools[{i}].replicasPerGpu", pool.replicas_per_gpu, 1, 16),
                   at_least(f"fleet.pools[{i}].nodesPerClique", pool.nodes_per_clique, 1)]
    checks += [within(f"inference.poolShares[{i}].share", share.share, 0, 1)
               for i, share in enumerate(inf.pool_shares)]
    return checks


def overridden(scenario: Scenario, key: str, text: str) -> Scenario:
    """The scenario with the field at the dotted camelCase path `key` (`contention.scale`,
    `serving.model`) set to `text` read as YAML, checked as a scenario file's field is; PolicyError
    naming the field (and what it allows) otherwise. A list is set whole, as YAML flow text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyError(f"{key}: the value is not YAML: {yaml_problem(error)}") from None
    return checked(_set(scenario, key.split("."), value, ""))


def _set(node: Any, parts: list[str], value: Any, done: str) -> Any:
    by_key = {camel_case(f.name): f for f in dataclasses.fields(node)}
    head, path = parts[0], f"{done}.{parts[0]}" if done else parts[0]
    if head not in by_key:
        raise PolicyError(f"{path}: unknown field (known: {', '.join(sorted(by_key))})")
    chosen = by_key[head]
    kind = typing.get_type_hints(type(node))[chosen.name]
    if len(parts) == 1:
        return replace(node, **{chosen.name: decode_fields(kind, value, path)})
    child = getattr(node, chosen.name)
    if child is None:  # an optional section not set yet: its defaults, then the field
        child = next(arg for arg in typing.get_args(kind) if arg is not type(None))()
    if not dataclasses.is_dataclass(child):
        raise PolicyError(f"{path}: has no fields to set ({'.'.join(parts[1:])} given)")
    return replace(node, **{chosen.name: _set(child, parts[1:], value, path)})


def named(name: str) -> Scenario:
    if name not in BUILT_IN:
        raise KeyError(f"unknown scenario {name!r}; built in: {', '.join(BUILT_IN)}")
    return BUILT_IN[name]


__all__ = ["ABOUT", "BUILT_IN", "Conditions", "ContentionShape", "CpuNeighbours", "DegradedGpus", "Events", "ServingShape", "FleetShape", "InferenceShape", "PoolShape", "PoolShare", "Scenario", "TaintShape",
           "TrainingShape", "checked", "load_scenario", "overridden",
           "named", "replace"]
