"""Frozen telemetry model: per-GPU samples, per-node telemetry and the cluster snapshot. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property


@dataclass(frozen=True, slots=True)
class PodRef:
    """The workload pod a GPU is allocated to, as the exporter's Kubernetes mapping reports it."""

    namespace: str
    name: str
    container: str = ""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or MIG instance) as last reported by the exporter."""

    gpu: str
    """The exporter's `gpu` index label, kept as text ("0", "1", ...)."""
    uuid: str = ""
    model: str = ""
    util_percent: float | None = None
    """Busy share 0–100: GR_ENGINE_ACTIVE × 100 when profiling metrics exist, else GPU_UTIL."""
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    last_xid: int = 0
    """dcgm-exporter reports the code of the last XID error, not a count; 0 means none."""
    pod: PodRef | None = None
    mig_profile: str = ""
    mig_instance: str = ""

    @property
    def memory_used_fraction(self) -> float | None:
        if self.fb_used_mib is None or self.fb_free_mib is None:
            return None
        total = self.fb_used_mib + self.fb_free_mib
        return self.fb_used_mib / total if total > 0 else None


@dataclass(frozen=True, slots=True)
class NodeTelemetry:
    """All GPUs of one node, plus what kube-state-metrics says about allocation when it is scraped."""

    name: str
    gpus: tuple[GpuSample, ...]
    gpus_seen_recently: int = 0
    """How many GPU series this node had within the vanish look-back window; more than `len(gpus)`
    means some series disappeared."""
    allocatable_gpus: int | None = None
    """From `kube_node_status_allocatable`, when kube-state-metrics is scraped."""
    allocated_gpus: int | None = None
    """From `kube_pod_container_resource_requests`, when kube-state-metrics is scraped."""


@dataclass(frozen=True)
class ClusterSnapshot:
    """An immutable picture of the GPU fleet at `taken_at`. Every decision reads one of these."""

    taken_at: datetime
    nodes: tuple[NodeTelemetry, ...]
    node_label: str = ""
    """The series label the node name was read from (see `scoring.series.NODE_LABEL_CANDIDATES`)."""
    vanished_nodes: tuple[str, ...] = ()
    """Nodes that reported GPUs within the look-back window but report none now."""
    newest_sample_at: datetime | None = None
    warnings: tuple[str, ...] = field(default=())

    @cached_property
    def by_name(self) -> dict[str, NodeTelemetry]:
        return {node.name: node for node in self.nodes}

    def age_seconds(self, now: datetime) -> float:
        """Seconds since the freshest sample (or since the snapshot was taken when none)."""
        reference = self.newest_sample_at or self.taken_at
        return max(0.0, (now - reference).total_seconds())
