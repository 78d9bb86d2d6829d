"""The BalancerPolicy document: typed, defaulted and validated once at start. Pure, no I/O.

Wire format: YAML with `apiVersion: gpu-balancer.io/v1alpha1` and `kind: BalancerPolicy`; keys
are camelCase spellings of the field names below. Decoding, defaulting and validation happen in
`parse_policy`, which raises one `PolicyError` that names the offending field.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml

from scoring import dcgm

API_VERSION = "gpu-balancer.io/v1alpha1"
KIND = "BalancerPolicy"

DEFAULT_CRITICAL_XIDS = (48, 63, 64, 74, 79, 92, 94, 95)
"""XIDs that mean the GPU needs a reset or is failing: double-bit ECC (48), row-remap events
(63, 64), NVLink errors (74), fallen off the bus (79), high single-bit ECC rate (92), contained
and uncontained ECC errors (94, 95)."""

MAX_DERIVED_RECORDING_INTERVAL = 30
"""Seconds: dcgm-exporter's default collect interval; evaluating more often recomputes the same figures."""

_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


class PolicyError(ValueError):
    """The policy document is not valid; the message names the field."""


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line: where, and what is wrong."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


@dataclass(frozen=True)
class BasicAuth:
    username: str = ""
    """User name for HTTP basic auth to Prometheus."""
    password_file: str = ""
    """File holding the password (a mounted Secret), read at start; never inline."""


@dataclass(frozen=True)
class PrometheusConnection:
    url: str = "http://127.0.0.1:9090"
    """Base URL of the Prometheus-compatible query API (Prometheus, Thanos Query, Mimir, managed)."""
    timeout_seconds: float = 5.0
    """Seconds per query. Short, because a refresh must finish well inside the refresh interval."""
    bearer_token_file: str = ""
    """File holding a bearer token (re-read on each refresh so rotated tokens are picked up)."""
    basic_auth: BasicAuth = field(default_factory=BasicAuth)
    """HTTP basic auth (`username`, `passwordFile`), for Mimir or a reverse proxy."""
    ca_file: str = ""
    """CA bundle to verify Prometheus's TLS certificate; empty means the system trust store."""
    insecure_skip_verify: bool = False
    """Skip TLS verification. Only for tests and emergencies."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra HTTP headers, such as `X-Scope-OrgID` for a multi-tenant Mimir."""
    series_selector: str = ""
    """Label matchers added to every query, such as `{cluster="prod"}`, for shared Prometheus."""

    @property
    def selector_matchers(self) -> str:
        """The matchers of `series_selector` without braces, ready to join into a selector."""
        return self.series_selector.strip().removeprefix("{").removesuffix("}").strip()


@dataclass(frozen=True)
class TelemetryPolicy:
    node_label: str = "auto"
    """Series label holding the node name; `auto` detects it (node, kubernetes_node, nodename,
    Hostname, hostname, in that order) because each install relabels differently."""
    refresh_seconds: float = 5.0
    """Seconds between snapshot refreshes; a fraction of the usual 15 s scrape interval."""
    staleness_limit_seconds: float = 120.0
    """Telemetry older than this steers nothing. Default: two 30 s exporter intervals plus two
    15 s scrapes plus margin, so one missed scrape does not switch steering off."""
    vanish_lookback_seconds: float = 600.0
    """A GPU seen within this window but silent now marks its node unhealthy."""
    vanish_check_seconds: float = 60.0
    """How often a refreshing process (the webhook) re-runs the look-back for vanished GPUs,
    reusing the last answer in between. It is the costliest query at fleet scale, and reuse
    delays no vanish: a GPU in the reused answer was seen, so its silence shows at once."""
    recording_interval_seconds: float | None = None
    """How often the recording rules' snapshot group evaluates (`gpu-balancer recording-rules`).
    Unset (the default): a quarter of `stalenessLimitSeconds` in whole seconds, at least 1 and at
    most 30 — 30 s at the default limit, so a record is never older than the limit allows even
    with two evaluations missed. dcgm-exporter collects every 30 s by default, so evaluating more
    often recomputes the same figures; at 15,000 nodes one evaluation costs Prometheus 8–16 s of a
    core (`BENCHMARKS.md`). Set it only where the exporter collects more often."""

    @property
    def recording_interval(self) -> float:
        """The snapshot group's interval in seconds: the one set, else the one derived."""
        if self.recording_interval_seconds is not None:
            return self.recording_interval_seconds
        return float(min(MAX_DERIVED_RECORDING_INTERVAL, max(1, int(self.staleness_limit_seconds // 4))))

    @property
    def recording_interval_origin(self) -> str:
        """Where `recording_interval` came from, in words, for the generated rules and `status`."""
        if self.recording_interval_seconds is not None:
            return "telemetry.recordingIntervalSeconds"
        return (f"derived: a quarter of stalenessLimitSeconds ({self.staleness_limit_seconds:g} s), "
                f"1 to {MAX_DERIVED_RECORDING_INTERVAL} s")

    use_profiling_metrics: bool = True
    """Prefer a profiling gauge (`busyGauge`) over DCGM_FI_DEV_GPU_UTIL where present: GPU_UTIL
    counts any kernel running as 100 %, the profiling ratios measure a share of the GPU's work."""
    busy_gauge: str = dcgm.GR_ENGINE_ACTIVE
    """The profiling ratio read as a GPU's busy share (`dcgm.BUSY_GAUGES`). GR_ENGINE_ACTIVE (the
    default) and SM_ACTIVE are duty cycles, near full with one LLM request in flight; the tensor
    pipe's activity grows with the batch (`bench/replica_signals.py`; BENCHMARKS: "the busy gauge")."""
    busy_gauge_full_scale: float = 1.0
    """The `busyGauge` reading that counts as fully busy (100 %): a decoding LLM's tensor pipe tops
    out well below 1, where its batch is full."""

    @property
    def busy(self) -> dcgm.BusyMeasure:
        return dcgm.BusyMeasure(self.busy_gauge if self.use_profiling_metrics else None, self.busy_gauge_full_scale)


@dataclass(frozen=True)
class PluginChoice:
    """A registered node signal (`heat.signals`) or descheduler strategy (`descheduler.strategies`)
    by name, and its arguments, which that plugin decodes and checks (camelCase keys, as everywhere
    here): `scoring.plugins`."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HeatPolicy:
    warm_util_percent: float = 50.0
    """Mean GPU utilisation (%) from which a node is warm: half busy leaves little burst room."""
    hot_util_percent: float = 80.0
    """Mean GPU utilisation (%) from which a node is hot: inference queueing grows steeply past 80 %."""
    warm_memory_fraction: float = 0.75
    """Framebuffer used fraction from which a node is warm."""
    hot_memory_fraction: float = 0.92
    """Framebuffer used fraction from which a node is hot on its own: a new model will not fit."""
    hot_temperature_c: float = 87.0
    """Hottest GPU temperature (°C) from which a node is hot: data-centre GPUs throttle near 87–90 °C."""
    critical_xids: tuple[int, ...] = DEFAULT_CRITICAL_XIDS
    """XID codes that make a node unhealthy."""
    warm_serving_fraction: float = 0.8
    """Share of its serving target (`serving`) at which a replica makes its node warm; at the
    target itself the node is hot (`slow-serving`). 80 %: queues grow steeply just below it."""
    signals: tuple[PluginChoice, ...] = ()
    """The node signals asked for and judged, each `{name, args}`; one left out is off; none given:
    every registered one with its defaults. Names and arguments: README, "Adding a signal"."""


@dataclass(frozen=True)
class GpuDeviceClass:
    """A DRA DeviceClass whose devices are GPUs (or parts of one), and how to find its devices in
    ResourceSlices without evaluating the class's CEL selectors."""

    name: str = ""
    """The DeviceClass a claim's request names (`deviceClassName`)."""
    driver: str = ""
    """The ResourceSlices' `spec.driver` that publishes this class's devices; empty: devices are
    not counted from slices, and free capacity comes from telemetry alone."""
    device_type: str = ""
    """The devices' `type` attribute (NVIDIA's driver: `gpu` or `mig`); empty matches any."""
    whole_gpus: bool = True
    """A device is one whole GPU (false for MIG instances: a part of one)."""


DEFAULT_GPU_DEVICE_CLASSES = (
    GpuDeviceClass("gpu.nvidia.com", "gpu.nvidia.com", "gpu"),
    GpuDeviceClass("mig.nvidia.com", "gpu.nvidia.com", "mig", whole_gpus=False),
)
"""NVIDIA's DRA driver's classes: their selectors are `device.driver == 'gpu.nvidia.com' &&
device.attributes['gpu.nvidia.com'].type == 'gpu'` (or `'mig'`)."""


REPLICA_SPREADS = ("scheduler", "ledger")


@dataclass(frozen=True)
class PlacementPolicy:
    max_preferred_nodes: int = 5
    """K: preferred node terms per pod. Small, because the pod spec must stay small at any fleet
    size and the scheduler only needs a few good targets; five survive a few filling up."""
    hard_avoid_hot: bool = False
    """Add a required NotIn for hot nodes too (unhealthy ones get it whenever the pod fits
    elsewhere). Off by default: a hot node still runs a pod, and telemetry can be wrong."""
    hard_avoid_min_spare_gpus: int = 8
    """Hard avoidance only applies while cool and warm nodes keep at least this many free GPUs
    beyond the pod's own request, so a sudden wave cannot be left unschedulable."""
    max_avoided_nodes: int = 32
    """At most this many nodes named in a required NotIn (pod spec size stays bounded)."""
    replica_spread: str = "scheduler"
    """How a workload's replicas are spread over nodes: "scheduler" adds a hostname spread term
    (ScheduleAnyway) that counts only the nodes the pod may use; "ledger" adds none and leaves
    the spread to the advice, whose bookings lower each node's score as replicas are steered to it."""
    ready_horizon_seconds: float = 600.0
    """Nodes are ranked by their headroom times the share of this span a new pod would serve
    there, after its image pull (where the node does not hold the image), weight load and start
    (`scoring.advice.readiness`, priced with the descheduler's pull and load rates): a cool node that
    must pull for minutes can rank below a warm node that holds the image. The descheduler's
    10-minute window, after which a poor placement is its to mend (assumption). 0: off."""
    urgent_scale_ratio: float = 1.25
    """A pod is urgent too where the HorizontalPodAutoscaler that scales its workload reads a
    metric at least this many times its target (`status.currentMetrics` over `spec.metrics`,
    the highest): the HPA saw it the moment it added the pod, where the serving series are a
    scrape and a rule behind. 1.25 is the HPA's 10 % tolerance and more than as much again twice:
    past what an ordinary swing in load shows between two syncs, so a surge, not drift
    (assumption). 0: HPAs are not read for urgency."""
    settle_seconds: float = 45.0
    """How long steered load is remembered past the telemetry that could show it: scheduling,
    image pull and one exporter interval before the pod's GPU use appears in DCGM."""
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
    """Resource names (a trailing * matches a prefix) that make a pod a GPU pod."""
    gpu_device_classes: tuple[GpuDeviceClass, ...] = DEFAULT_GPU_DEVICE_CLASSES
    """DRA DeviceClasses whose devices are GPUs: a pod whose ResourceClaim asks for one is a GPU pod."""
    compute_domain_device_classes: tuple[str, ...] = ("compute-domain-default-channel.nvidia.com",)
    """DeviceClasses of NVIDIA ComputeDomain channels (multi-node NVLink): pods sharing a claim
    template of one of these are one job, packed into one interconnect domain."""
    workload_label: str = "app.kubernetes.io/name"
    """A pod carrying this label is spread across nodes with its peers even without a ReplicaSet."""
    training_label_keys: tuple[str, ...] = (
        "training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/group-key",
        "batch.kubernetes.io/job-name", "volcano.sh/job-name", "kueue.x-k8s.io/pod-group-name",
        "gpu-balancer.io/serving-group")
    """Labels naming a group of pods that should pack into one interconnect domain: a distributed
    job, one replica of a model served across nodes (LeaderWorkerSet's `group-key`, shared by a
    group's leader and workers and by no other group, so replicas stay independent), or pods that
    serve as one (`gpu-balancer.io/serving-group`: a prefill replica and the decode replicas it
    hands its KV cache to). `batch.kubernetes.io/job-name` only counts on Indexed Jobs."""
    interconnect_label: str = "nvidia.com/gpu.clique"
    """GPU Feature Discovery's NVLink domain label, the tightest packing domain."""
    network_block_label: str = "network.topology.kubernetes.io/block"
    """A site's network-block (leaf switch) node label; the next packing domain."""
    own_namespace: str = "gpu-balancer"
    """The webhook's own namespace, never mutated (defence in depth behind the namespaceSelector)."""

    @property
    def packing_domains(self) -> tuple[str, ...]:
        """The node labels naming a job's packing domains, tightest first: NVLink clique, network
        block, zone."""
        return (self.interconnect_label, self.network_block_label, "topology.kubernetes.io/zone")


@dataclass(frozen=True)
class DeschedulerPolicy:
    window_seconds: float = 600.0
    """Heat must have lasted this long (10 min): long enough that a burst or a rollout settling
    never triggers an eviction, short enough to act within a couple of CronJob runs."""
    step_seconds: float = 30.0
    """Resolution of the windowed queries; twice the usual 15 s scrape interval."""
    sustained_util_percent: float = 80.0
    """Mean node GPU utilisation over the window at or above which a node is a source."""
    low_quantile: float = 0.1
    """The quantile of the window that must also be high, so that a few very hot minutes inside
    an otherwise cool window do not count."""
    low_quantile_util_percent: float = 70.0
    """What that low quantile must reach (hysteresis below `sustainedUtilPercent`)."""
    min_window_coverage: float = 0.8
    """Share of the window's steps that must have samples; gaps mean we do not know."""
    target_util_percent: float = 50.0
    """Nodes below this mean utilisation, with free GPUs of the right kind, can take evicted pods."""
    max_evictions_per_run: int = 4
    """Evictions are disruptive: a few per 5-minute run lets the fleet settle between runs."""
    max_evictions_per_node: int = 2
    """At most this many evictions from one node per run: its load falls by a pod or two, and the
    next run sees whether that was enough."""
    max_evictions_per_namespace: int = 3
    """At most this many evictions from one namespace (one team) per run."""
    cooldown_seconds: float = 1800.0
    """A workload evicted once is left alone for 30 minutes."""
    backoff_factor: float = 2.0
    """Each further eviction of the same workload within `backoffWindowSeconds` multiplies its cooldown."""
    backoff_window_seconds: float = 21600.0
    """Six hours: repeated evictions of one workload within it back off (`backoffFactor`)."""
    evict_pods_with_local_storage: bool = False
    """emptyDir/hostPath data is lost on eviction; off unless you know the pods tolerate it."""
    payback_horizon_seconds: float = 1800.0
    """How long a move's gain is counted (`descheduler.payback`): the cooldown's 30 minutes, the
    least time a moved workload is left where it lands. 0 turns the payback rule off."""
    restart_cost_seconds: float = 120.0
    """A moved pod's time to ready where it does not give its image and model sizes: a vLLM
    replica on a node with its image cached is ready in ~40 s (weights, then CUDA-graph capture),
    on one without it a many-GB pull comes first: assumption, between the two."""
    image_pull_bytes_per_second: float = 200e6
    """Registry to node, for the `gpu-balancer.io/image-bytes` annotation: assumption."""
    weight_load_bytes_per_second: float = 2e9
    """Storage to GPU memory, for the `gpu-balancer.io/model-bytes` annotation: assumption."""
    remote_weight_load_bytes_per_second: float = 13.4e6
    """The same from the remote store, for a pod that names its model (`gpu-balancer.io/model`, a
    Fluid Dataset) on a node without Fluid's cache label for it: ~20 minutes for an 8B model's
    16 GB per worker (NVIDIA Dynamo's model-caching docs, as issue 46 quotes them)."""
    startup_seconds: float = 30.0
    """A model server's start once its weights are loaded ("Graph capturing finished in 20-30
    secs" in vLLM's start-up log): assumption."""
    prestage_deadline_seconds: float = 600.0
    """Make-before-break: before a live eviction, a short-lived pod pinned to the chosen
    destination pulls the moved pod's images there, and the eviction waits until they are there
    or this long has passed (`descheduler.prestage`): a 20 GB serving image took 5–6 min to pull
    and 3–4 to extract (BentoML, as issue 46 quotes it). 0 turns pre-staging off."""
    ledger_namespace: str = "gpu-balancer"
    """Where the eviction ledger ConfigMap (cooldowns and back-off) lives: our own namespace."""
    ledger_name: str = "gpu-balancer-eviction-ledger"
    """The ledger ConfigMap's name; the descheduler's Role may write only this one."""
    dry_run: bool = True
    """Report what would be evicted (JSON output and `WouldEvict` Events) and evict nothing. On by
    default and in the shipped base: a new install shows its choices before it acts on them."""
    strategies: tuple[PluginChoice, ...] = ()
    """The strategies a run uses, in order (a node an earlier one claims is not offered to a later
    one), each `{name, args}`; one left out is off; none given: every registered one with its
    defaults, in the registry's order. Names and arguments: README, "What the descheduler does"."""


@dataclass(frozen=True)
class ServingServer:
    """Where one model server keeps its queue and latency. Check the names against the server's
    release: they change between releases."""

    name: str = ""
    queue_metric: str = ""
    """A gauge of requests waiting for the engine."""
    latency_histogram: str = ""
    """A latency histogram's base name (`_bucket` is appended); the policy's quantile is read from it."""
    latency_sum_counter: str = ""
    """Where a server has no histogram: a counter of total latency, divided by `latencyCountCounter`."""
    latency_count_counter: str = ""
    latency_unit_seconds: float = 1.0
    """Seconds per unit of the latency metric (Triton counts microseconds: 1e-6)."""
    latency_name: str = "latency"
    """What the latency is, for reasons and `status` (TTFT, end-to-end, queue time)."""
    kv_usage_metric: str = ""
    """A gauge of the KV cache's used share, 0–1: with `runningMetric`, the replica's load (how
    much of its batch and cache the work fills), which a duty cycle cannot show."""
    running_metric: str = ""
    """A gauge of requests in the running batch, held against the target's `maxRunning`."""


DEFAULT_SERVERS = (
    ServingServer("vllm", "vllm:num_requests_waiting", "vllm:time_to_first_token_seconds", latency_name="TTFT",
                  kv_usage_metric="vllm:kv_cache_usage_perc", running_metric="vllm:num_requests_running"),
    ServingServer("sglang", "sglang:num_queue_reqs", "sglang:time_to_first_token_seconds", latency_name="TTFT",
                  kv_usage_metric="sglang:token_usage", running_metric="sglang:num_running_reqs"),
    ServingServer("tgi", "tgi_queue_size", "tgi_request_duration", latency_name="end-to-end",
                  running_metric="tgi_batch_current_size"),
    ServingServer("triton", "nv_inference_pending_request_count", latency_sum_counter="nv_inference_queue_duration_us",
                  latency_count_counter="nv_inference_request_success", latency_unit_seconds=1e-6,
                  latency_name="queue time"),
)
"""vLLM and SGLang: time to first token; TGI: end-to-end request duration (it exports no TTFT);
Triton: mean queue time from its default counters (it exports no latency histogram by default).
KV-cache use and the running batch as vLLM v1 (`vllm:kv_cache_usage_perc`; v0 called it
`vllm:gpu_cache_usage_perc`), SGLang (`sglang:token_usage`) and TGI (batch size only) name them
(the samples in `shared/real_exporters/`)."""


@dataclass(frozen=True)
class ServingTarget:
    server: str = ""
    """Match replicas of this server only (a `servers[].name`); empty matches any."""
    namespace: str = ""
    """Match replicas in this namespace only; empty matches any."""
    workload: str = ""
    """Match replicas whose pod's `placement.workloadLabel` has this value (from the series' own
    label or kube-state-metrics' `kube_pod_labels`); empty matches any."""
    latency_seconds: float = 1.0
    """The latency figure at or above which a replica misses its target."""
    queue_depth: float = 16.0
    """Requests waiting at or above which a replica misses its target."""
    max_running: float = 256.0
    """The server's running-batch limit (vLLM's `--max-num-seqs`, 256 by default in its engine
    arguments; SGLang and TGI size theirs from memory: set it per target). Running plus waiting
    requests over it is the replica's batch load."""


@dataclass(frozen=True)
class ServingPolicy:
    """The model servers' own queue and latency as a heat signal. Off by itself where no server
    exports these series: the heat model then judges on DCGM alone."""

    enabled: bool = True
    """Read the servers' series. On by default: it costs a query that finds nothing where no server exports them."""
    quantile: float = 0.95
    """The latency quantile read from histograms: p95 is what latency objectives are usually set on."""
    window_seconds: float = 120.0
    """The rate window of latency histograms: eight 15 s scrapes, short enough to see a queue form."""
    servers: tuple[ServingServer, ...] = DEFAULT_SERVERS
    """The model servers whose series are read: vLLM, SGLang, TGI and Triton by default; a list
    given here replaces them (name, queueMetric, latencyHistogram, ... as `ServingServer`)."""
    targets: tuple[ServingTarget, ...] = ()
    """Per server, namespace or workload; the first that matches applies, else `defaultTarget`."""
    default_target: ServingTarget = field(default_factory=lambda: ServingTarget(latency_seconds=1.0, queue_depth=16.0))
    """TTFT p95 of 1 s and 16 queued requests: interactive chat starts to feel slow past either."""


@dataclass(frozen=True)
class OptInPolicy:
    """The namespace label that opts a namespace in, named once for both halves: the webhook's
    namespaceSelector (in the MutatingWebhookConfiguration, tested to match) and the descheduler,
    which evicts only pods in namespaces carrying it."""

    label: str = "gpu-balancer.io/enabled"
    """The namespace label key that opts a namespace in."""
    value: str = "true"
    """The value it must have."""


@dataclass(frozen=True)
class BalancerPolicy:
    prometheus: PrometheusConnection = field(default_factory=PrometheusConnection)
    telemetry: TelemetryPolicy = field(default_factory=TelemetryPolicy)
    heat: HeatPolicy = field(default_factory=HeatPolicy)
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    descheduler: DeschedulerPolicy = field(default_factory=DeschedulerPolicy)
    opt_in: OptInPolicy = field(default_factory=OptInPolicy)
    serving: ServingPolicy = field(default_factory=ServingPolicy)


def default_policy() -> BalancerPolicy:
    return BalancerPolicy()


def parse_policy(text: str) -> BalancerPolicy:
    """Decode, default and validate a policy document."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyError(f"policy is not valid YAML: {yaml_problem(error)}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise PolicyError("policy must be a YAML mapping")
    document = dict(document)
    api_version = document.pop("apiVersion", API_VERSION)
    kind = document.pop("kind", KIND)
    if api_version != API_VERSION:
        raise PolicyError(f"apiVersion: expected {API_VERSION!r}, got {api_version!r}")
    if kind != KIND:
        raise PolicyError(f"kind: expected {KIND!r}, got {kind!r}")
    document.pop("metadata", None)
    policy = decode_fields(BalancerPolicy, document, path="")
    validate_policy(policy)
    return policy


def validate_policy(policy: BalancerPolicy) -> None:
    """Cross-field rules that types alone cannot express."""
    heat, telemetry, prom = policy.heat, policy.telemetry, policy.prometheus
    _between(heat.warm_util_percent, 0, 100, "heat.warmUtilPercent")
    _between(heat.hot_util_percent, 0, 100, "heat.hotUtilPercent")
    _require(heat.warm_util_percent < heat.hot_util_percent,
             "heat.warmUtilPercent", f"must be below hotUtilPercent ({heat.hot_util_percent:g})")
    _between(heat.warm_memory_fraction, 0, 1, "heat.warmMemoryFraction")
    _between(heat.hot_memory_fraction, 0, 1, "heat.hotMemoryFraction")
    _require(heat.warm_memory_fraction < heat.hot_memory_fraction,
             "heat.warmMemoryFraction", f"must be below hotMemoryFraction ({heat.hot_memory_fraction:g})")
    _require(0 < heat.hot_temperature_c < 150, "heat.hotTemperatureC", "must be between 0 and 150 °C")
    _require(all(x > 0 for x in heat.critical_xids), "heat.criticalXids", "XID codes are positive")
    _require(telemetry.refresh_seconds > 0, "telemetry.refreshSeconds", "must be positive")
    _require(telemetry.staleness_limit_seconds > telemetry.refresh_seconds,
             "telemetry.stalenessLimitSeconds", "must be greater than refreshSeconds")
    _require(telemetry.vanish_lookback_seconds > 0, "telemetry.vanishLookbackSeconds", "must be positive")
    _require(0 < telemetry.vanish_check_seconds <= telemetry.vanish_lookback_seconds,
             "telemetry.vanishCheckSeconds", "must be positive and at most vanishLookbackSeconds")
    interval = telemetry.recording_interval_seconds
    _require(interval is None or (1 <= interval < telemetry.staleness_limit_seconds and interval == int(interval)),
             "telemetry.recordingIntervalSeconds",
             f"must be whole seconds, at least 1 and below stalenessLimitSeconds "
             f"({telemetry.staleness_limit_seconds:g}), or left out to derive it from that limit; got {interval}")
    _require(telemetry.busy_gauge in dcgm.BUSY_GAUGES, "telemetry.busyGauge",
             f"must be one of {', '.join(dcgm.BUSY_GAUGES)}; got {telemetry.busy_gauge!r}")
    _require(0 < telemetry.busy_gauge_full_scale <= 1, "telemetry.busyGaugeFullScale",
             f"must be above 0 and at most 1 (a ratio); got {telemetry.busy_gauge_full_scale}")
    _require(re.fullmatch(r"auto|[A-Za-z_][A-Za-z0-9_]*", telemetry.node_label) is not None,
             "telemetry.nodeLabel", "must be 'auto' or a Prometheus label name")
    _require(prom.url.startswith(("http://", "https://")), "prometheus.url", "must start with http:// or https://")
    _require(0 < prom.timeout_seconds <= 60, "prometheus.timeoutSeconds", "must be in (0, 60]")
    matchers = prom.selector_matchers
    _require(not matchers or re.fullmatch(rf"{_MATCHER.pattern}(,{_MATCHER.pattern})*,?\s*", matchers) is not None,
             "prometheus.seriesSelector", 'must be label matchers such as {cluster="prod"}')
    placement = policy.placement
    _require(1 <= placement.max_preferred_nodes <= 20, "placement.maxPreferredNodes", "must be between 1 and 20")
    _require(0 <= placement.max_avoided_nodes <= 200, "placement.maxAvoidedNodes", "must be between 0 and 200")
    _require(placement.replica_spread in REPLICA_SPREADS, "placement.replicaSpread",
             f"must be one of {', '.join(REPLICA_SPREADS)}; got {placement.replica_spread!r}")
    _require(placement.ready_horizon_seconds >= 0, "placement.readyHorizonSeconds", "must not be negative (0: off)")
    _require(placement.urgent_scale_ratio == 0 or placement.urgent_scale_ratio > 1, "placement.urgentScaleRatio",
             "must be over 1 (0: off)")
    _require(placement.hard_avoid_min_spare_gpus >= 0, "placement.hardAvoidMinSpareGpus", "must not be negative")
    _require(placement.settle_seconds >= 0, "placement.settleSeconds", "must not be negative")
    _require(bool(placement.gpu_resources) and all(placement.gpu_resources), "placement.gpuResources",
             "needs at least one resource name")
    class_names = [c.name for c in placement.gpu_device_classes]
    _require(all(class_names) and len(set(class_names)) == len(class_names), "placement.gpuDeviceClasses",
             "need unique, non-empty names")
    for i, device_class in enumerate(placement.gpu_device_classes):
        _require(not device_class.device_type or bool(device_class.driver), f"placement.gpuDeviceClasses[{i}]",
                 "deviceType needs the driver that publishes the devices")
    _require(all(placement.compute_domain_device_classes), "placement.computeDomainDeviceClasses",
             "names must not be empty")
    d = policy.descheduler
    _require(d.step_seconds > 0 and d.window_seconds >= 4 * d.step_seconds, "descheduler.windowSeconds",
             "must cover at least four stepSeconds")
    _require(0 < d.low_quantile < 1, "descheduler.lowQuantile", "must be between 0 and 1")
    _require(0 < d.low_quantile_util_percent <= d.sustained_util_percent <= 100, "descheduler.lowQuantileUtilPercent",
             "must satisfy 0 < lowQuantileUtilPercent <= sustainedUtilPercent <= 100")
    _require(0 < d.target_util_percent < d.sustained_util_percent, "descheduler.targetUtilPercent",
             "must be positive and below sustainedUtilPercent")
    _require(0 < d.min_window_coverage <= 1, "descheduler.minWindowCoverage", "must be in (0, 1]")
    _require(min(d.max_evictions_per_run, d.max_evictions_per_node, d.max_evictions_per_namespace) >= 0,
             "descheduler.maxEvictionsPerRun", "limits must not be negative")
    _require(d.cooldown_seconds >= 0 and d.backoff_factor >= 1, "descheduler.backoffFactor",
             "cooldown must not be negative and backoffFactor at least 1")
    _require(d.payback_horizon_seconds >= 0, "descheduler.paybackHorizonSeconds", "must not be negative")
    _require(0 <= d.prestage_deadline_seconds <= 3600, "descheduler.prestageDeadlineSeconds",
             "must be 0 (off) to 3600: a run waits this long at most")
    _require(d.restart_cost_seconds >= 0 and d.startup_seconds >= 0, "descheduler.restartCostSeconds",
             "restartCostSeconds and startupSeconds must not be negative")
    _require(d.image_pull_bytes_per_second > 0 and d.weight_load_bytes_per_second > 0
             and d.remote_weight_load_bytes_per_second > 0,
             "descheduler.imagePullBytesPerSecond", "imagePullBytesPerSecond, weightLoadBytesPerSecond and remoteWeightLoadBytesPerSecond must be positive")
    for path, kind, choices in (("descheduler.strategies", "strategy", d.strategies),
                                ("heat.signals", "signal", heat.signals)):
        names = [choice.name for choice in choices]
        _require(len(set(names)) == len(names), path, f"names a {kind} more than once")
    _validate_serving(policy.serving, heat.warm_serving_fraction)
    _require(bool(prom.basic_auth.username) == bool(prom.basic_auth.password_file),
             "prometheus.basicAuth", "needs both username and passwordFile")


def _validate_serving(serving: ServingPolicy, warm_fraction: float) -> None:
    _require(0 < warm_fraction < 1, "heat.warmServingFraction", "must be between 0 and 1")
    _require(0 < serving.quantile < 1, "serving.quantile", "must be between 0 and 1")
    _require(serving.window_seconds >= 30, "serving.windowSeconds", "must be at least 30 (two scrapes for a rate)")
    names = [server.name for server in serving.servers]
    _require(all(names) and len(set(names)) == len(names), "serving.servers", "need unique, non-empty names")
    for i, server in enumerate(serving.servers):
        _require(bool(server.queue_metric or server.latency_histogram or server.latency_sum_counter),
                 f"serving.servers[{i}]", "needs a queueMetric, a latencyHistogram or latency counters")
        _require(bool(server.latency_sum_counter) == bool(server.latency_count_counter), f"serving.servers[{i}]",
                 "latencySumCounter and latencyCountCounter go together")
        _require(server.latency_unit_seconds > 0, f"serving.servers[{i}].latencyUnitSeconds", "must be positive")
        for metric in (server.queue_metric, server.latency_histogram, server.latency_sum_counter,
                       server.latency_count_counter, server.kv_usage_metric, server.running_metric):
            _require(not metric or re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", metric) is not None,
                     f"serving.servers[{i}]", f"{metric!r} is not a Prometheus metric name")
    for i, target in enumerate((*serving.targets, serving.default_target)):
        where = f"serving.targets[{i}]" if i < len(serving.targets) else "serving.defaultTarget"
        _require(target.latency_seconds > 0 and target.queue_depth > 0 and target.max_running > 0, where,
                 "latencySeconds, queueDepth and maxRunning must be positive")
        _require(not target.server or target.server in names, f"{where}.server", f"no server named {target.server!r}")


def _between(value: float, low: float, high: float, path: str) -> None:
    _require(low <= value <= high, path, f"must be between {low:g} and {high:g}, got {value:g}")


def _require(condition: bool, path: str, message: str) -> None:
    if not condition:
        raise PolicyError(f"{path}: {message}")


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def decode_fields(kind: Any, value: Any, path: str) -> Any:
    """Turn plain YAML data into `kind`, naming the path of the first thing that does not fit."""
    where = path or "policy"
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise PolicyError(f"{where}: expected a mapping, got {type(value).__name__}")
        hints = typing.get_type_hints(kind)
        by_key = {camel_case(f.name): f for f in dataclasses.fields(kind)}
        unknown = sorted(set(value) - set(by_key))
        if unknown:
            raise PolicyError(f"{path + '.' if path else ''}{unknown[0]}: unknown field "
                              f"(known: {', '.join(sorted(by_key))})")
        kwargs = {f.name: decode_fields(hints[f.name], value[key], f"{path + '.' if path else ''}{key}")
                  for key, f in by_key.items() if key in value}
        return kind(**kwargs)
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):  # `X | None`: null or left out means unset
        (present,) = (arg for arg in typing.get_args(kind) if arg is not type(None))
        return None if value is None else decode_fields(present, value, path)
    if origin is tuple:
        (item_kind, _ellipsis) = typing.get_args(kind)
        if not isinstance(value, list):
            raise PolicyError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(decode_fields(item_kind, item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if typing.get_args(kind)[1] is Any:  # decoded later by whoever owns it (a strategy's arguments)
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise PolicyError(f"{where}: expected a mapping")
            return dict(value)
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise PolicyError(f"{where}: expected a mapping of strings to strings")
        return dict(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise PolicyError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise PolicyError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(f"{where}: expected a whole number, got {value!r}")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise PolicyError(f"{where}: expected a string, got {value!r}")
        return value
    raise PolicyError(f"{where}: unsupported field type {kind!r}")
