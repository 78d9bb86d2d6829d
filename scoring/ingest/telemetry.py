"""Frozen telemetry model: per-GPU samples, model-server replicas, per-node telemetry and the cluster
snapshot. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from scoring.policy import ServingTarget


def unit_id(gpu: str, instance: str) -> str:
    """How a unit is named on a node: its GPU index, with the MIG instance after a slash."""
    return f"{gpu}/{instance}" if instance else gpu


def natural_key(text: str) -> tuple[int, int | str]:
    """GPU indices in numeric order ("2" before "10"), anything else after them."""
    return (0, int(text)) if text.isdigit() else (1, text)


@dataclass(frozen=True, slots=True)
class PodRef:
    """The workload pod a GPU is allocated to, as the exporter's Kubernetes mapping reports it."""

    namespace: str
    name: str
    container: str = ""


@dataclass(frozen=True, slots=True)
class Framebuffer:
    """MiB used and total over the GPUs of a node a new pod could take or share (`scoring.ingest.memory`);
    total 0 where every GPU is one pod's."""

    used_mib: float
    total_mib: float


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or MIG instance) as last reported by an exporter."""

    node: str
    gpu: str
    """The exporter's `gpu` index label, kept as text ("0", "1", ...)."""
    uuid: str = ""
    model: str = ""
    pci_bus_id: str = ""
    util_percent: float | None = None
    """Busy share 0–100: GR_ENGINE_ACTIVE × 100 when profiling metrics exist, else GPU_UTIL."""
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    last_xid: int = 0
    """dcgm-exporter reports the code of the last XID error, not a count; 0 means none."""
    clock_reasons: int | None = None
    """`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`, NVML's bitmask of why the clocks are where they are;
    None where the exporter does not export it (it is not in dcgm-exporter's default counters)."""
    sm_clock_mhz: float | None = None
    """`DCGM_FI_DEV_SM_CLOCK` (in dcgm-exporter's default counters); None where it is not exported."""
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    """`DCGM_FI_PROF_PCIE_TX_BYTES` / `_RX_BYTES`, bytes a second (profiling fields); None where not exported."""
    pod: PodRef | None = None
    mig_profile: str = ""
    mig_instance: str = ""


@dataclass(frozen=True, slots=True)
class PodUsage:
    """GPUs one workload pod holds on a node, and how busy they are."""

    namespace: str
    name: str
    gpus: int
    util_percent: float
    """Mean busy share of its GPUs, 0–100."""
    gpu_ids: tuple[str, ...] = field(default=(), compare=False)
    """The units it holds, as `NodeTelemetry.xids` names them ("3", or "3/1" for a MIG instance)."""


PEER_MARGIN = 1.25
"""How much worse than its workload's other replicas a replica must be for its node to be the
cause: a quarter, well beyond the scatter of equally loaded replicas."""

@dataclass(frozen=True, slots=True)
class ServingReplica:
    """One serving pod as its server reports it, with the target it is held to."""

    namespace: str
    pod: str
    server: str
    queue: float | None
    """Requests waiting now (the server's queue gauge); None when it exports none."""
    latency_seconds: float | None
    """The latency figure over `serving.windowSeconds` (`latency_label` says which); None without traffic."""
    latency_label: str
    target: ServingTarget
    workload: str = ""
    """The pod's `placement.workloadLabel` value, else its name less the ReplicaSet's two suffixes."""
    peer_pressure: float | None = None
    """The median `pressure` of the same workload's replicas on other nodes; None without any."""
    kv_usage: float | None = None
    """The KV cache's used share now, 0–1; None when the server exports none."""
    running: float | None = None
    """Requests in the running batch now; None when the server exports none."""

    @property
    def load(self) -> float | None:
        """How full the work keeps the replica, 0–1 and beyond: the larger of its KV cache's used
        share and its running plus waiting requests over the batch limit (`maxRunning`). It grows
        with the work where a duty cycle reads ~100 % from one request (bench/replica_signals.py);
        None when the server reports neither figure."""
        if self.kv_usage is None and self.running is None:
            return None
        batch = (self.running + (self.queue or 0.0)) / self.target.max_running if self.running is not None else 0.0
        return max(self.kv_usage or 0.0, batch)

    def describe_load(self) -> str:
        """e.g. "inference/chat-7 KV 95 %, 250 running + 10 waiting of 256"."""
        parts = [] if self.kv_usage is None else [f"KV {self.kv_usage:.0%}"]
        if self.running is not None:
            parts.append(f"{self.running:.0f} running + {self.queue or 0:.0f} waiting of {self.target.max_running:g}")
        return f"{self.namespace}/{self.pod} " + ", ".join(parts)

    @property
    def node_bound(self) -> bool:
        """Whether its node, not its workload, is what makes it slow: it is clearly worse off than
        its peers elsewhere (or has none to compare with). A workload slow on every node needs
        more replicas, not other nodes; moving or shunning nodes for it only churns."""
        return self.peer_pressure is None or self.pressure >= PEER_MARGIN * self.peer_pressure

    @property
    def pressure(self) -> float:
        return pressure_of(self.latency_seconds, self.queue, self.target)

    def describe(self) -> str:
        """e.g. "inference/chat-7 TTFT p95 0.82 s (target 0.50 s), 3 queued (target 8)"."""
        parts = []
        peers = "" if self.peer_pressure is None else f"; its workload's other replicas at {self.peer_pressure:.0%} of target"
        if self.latency_seconds is not None:
            parts.append(f"{self.latency_label} {self.latency_seconds:.2f} s (target {self.target.latency_seconds:.2f} s)")
        if self.queue is not None:
            parts.append(f"{self.queue:.0f} queued (target {self.target.queue_depth:g})")
        return f"{self.namespace}/{self.pod} " + ", ".join(parts) + peers


def pressure_of(latency_seconds: float | None, queue: float | None, target: ServingTarget) -> float:
    """The worse of latency and queue as a share of their targets (1.0 is exactly on target); an
    unknown figure counts for nothing."""
    shares = [0.0]
    if latency_seconds is not None and target.latency_seconds > 0:
        shares.append(latency_seconds / target.latency_seconds)
    if queue is not None and target.queue_depth > 0:
        shares.append(queue / target.queue_depth)
    return max(shares)


@dataclass(frozen=True, slots=True)
class GpuKind:
    """How many GPUs (or MIG instances of one profile) of one model a node has."""

    model: str
    mig_profile: str
    count: int


@dataclass(frozen=True, slots=True)
class NodeTelemetry:
    """One node's GPUs, aggregated. Prometheus computes these sums at scale; `scoring.ingest.series`
    computes the same from per-GPU samples."""

    name: str
    gpus: int
    """GPU (or MIG instance) series reporting now."""
    util_sum: float = 0.0
    util_count: int = 0
    """How many GPUs reported utilisation; the mean is `util_sum / util_count`."""
    util_max: float = 0.0
    fb_used_mib: float | None = None
    fb_total_mib: float | None = None
    """Framebuffer used and total (MiB) over the GPUs that report both gauges; None when none does."""
    temperature_max_c: float | None = None
    power_w: float | None = None
    gpu_kinds: tuple[GpuKind, ...] = ()
    xids: tuple[tuple[str, int], ...] = ()
    """(gpu, last XID code) for every GPU whose last XID is non-zero."""
    pods: tuple[PodUsage, ...] = ()
    gpus_vanished: int = 0
    """GPU series seen within the vanish look-back window that report no more."""
    allocatable_gpus: int | None = None
    """From `kube_node_status_allocatable`, when kube-state-metrics is scraped."""
    allocated_gpus: int | None = None
    """From `kube_pod_container_resource_requests`, when kube-state-metrics is scraped."""
    topology: tuple[tuple[str, str], ...] = ()
    """(node label, value) for the topology labels kube-state-metrics exports via `kube_node_labels`
    (NVLink clique, network block, zone), when it is configured to."""
    serving: tuple[ServingReplica, ...] = ()
    """The model-server replicas on this node that export queue or latency series, worst first."""
    gpus_power_capped: int = 0
    """GPUs whose clocks their power limit holds down now (clock-event reasons SW power cap or HW
    power brake)."""
    gpus_heat_throttled: int = 0
    """GPUs whose clocks heat holds down now (SW or HW thermal slowdown, or HW slowdown, which
    fires for heat as well as for an external power brake)."""
    placeable_fb: Framebuffer | None = None
    """Framebuffer over the GPUs a new pod could take or share (`scoring.ingest.memory`); None where the
    exporters' figures do not say which GPUs pods hold, and the whole node's figures stand in."""
    readings: tuple[tuple[str, float], ...] = ()
    """(name, value) of every reading a signal keeps by name rather than in a field of its own
    (`scoring.ingest.signals`), sorted by name."""

    def reading(self, name: str) -> float | None:
        """A signal's reading by name; None where its exporter reported nothing for the node."""
        return next((value for key, value in self.readings if key == name), None)

    def readings_per(self, name: str) -> list[tuple[str, float]]:
        """(what, value) of every reading named `name:<what>` (a GPU, a switch), `what` in natural order."""
        prefix = name + ":"
        found = [(key.removeprefix(prefix), value) for key, value in self.readings if key.startswith(prefix)]
        return sorted(found, key=lambda f: natural_key(f[0]))

    @property
    def memory_used_fraction(self) -> float | None:
        if self.fb_used_mib is None or not self.fb_total_mib:
            return None
        return self.fb_used_mib / self.fb_total_mib

    @property
    def placeable_memory_fraction(self) -> float | None:
        """Memory used on the GPUs a new pod could take or share; None where there are none (or
        memory is unknown)."""
        if self.fb_total_mib is None:
            return None
        if self.placeable_fb is None:
            return self.memory_used_fraction
        placeable = self.placeable_fb
        return placeable.used_mib / placeable.total_mib if placeable.total_mib > 0 else None

    @property
    def util_mean(self) -> float:
        return self.util_sum / self.util_count if self.util_count else 0.0


@dataclass(frozen=True)
class ClusterSnapshot:
    """An immutable picture of the GPU fleet at `taken_at`. Every decision reads one of these."""

    taken_at: datetime
    nodes: tuple[NodeTelemetry, ...]
    node_label: str = ""
    """The series label the node name was read from (see `scoring.dcgm.NODE_LABEL_CANDIDATES`)."""
    vanished_nodes: tuple[str, ...] = ()
    """Nodes that reported GPUs within the look-back window but report none now."""
    newest_sample_at: datetime | None = None
    warnings: tuple[str, ...] = ()
    source: str = "raw queries"
    """How Prometheus was read: "raw queries" or "recording rules" (`scoring.ingest.recording`)."""

    @cached_property
    def by_name(self) -> dict[str, NodeTelemetry]:
        return {node.name: node for node in self.nodes}

    def age_seconds(self, now: datetime) -> float:
        """Seconds since the freshest sample (or since the snapshot was taken when none)."""
        reference = self.newest_sample_at or self.taken_at
        return max(0.0, (now - reference).total_seconds())


@dataclass(frozen=True, slots=True)
class WindowStats:
    """A node's mean GPU utilisation over the descheduler window."""

    mean: float
    low: float
    """The policy's low quantile of the window."""
    coverage: float
    """Share of the window's steps with a sample, 0–1."""
