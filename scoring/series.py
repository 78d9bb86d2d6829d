"""Build a `ClusterSnapshot` from labelled series, whether read from Prometheus or from exposition text. Pure.

This is where the field facts about dcgm-exporter labels live: which label names the node, and
which pod labels name a workload rather than the exporter's own pod.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from scoring import dcgm
from scoring.telemetry import ClusterSnapshot, GpuSample, NodeTelemetry, PodRef


@dataclass(frozen=True, slots=True)
class Series:
    """One series of an instant vector: its labels and its value."""

    labels: Mapping[str, str]
    value: float


Readings = Mapping[str, Sequence[Series]]
"""Series per metric name."""


def detect_node_label(readings: Readings, configured: str = "auto") -> str:
    """The label that names the node: the configured one, else the first candidate most series carry."""
    if configured != "auto":
        return configured
    counts = dict.fromkeys(dcgm.NODE_LABEL_CANDIDATES, 0)
    for series_list in readings.values():
        for series in series_list:
            for candidate in dcgm.NODE_LABEL_CANDIDATES:
                if series.labels.get(candidate):
                    counts[candidate] += 1
    total = max(counts.values(), default=0)
    if total == 0:
        return ""
    # A relabelled name present on (nearly) every series wins over the exporter's own label.
    for candidate in dcgm.NODE_LABEL_CANDIDATES:
        if counts[candidate] >= 0.9 * total:
            return candidate
    return max(dcgm.NODE_LABEL_CANDIDATES, key=counts.__getitem__)


def _gpu_key(labels: Mapping[str, str], node_label: str) -> tuple[str, str, str] | None:
    node = labels.get(node_label, "")
    if not node:
        return None
    return node, labels.get("gpu", labels.get("UUID", "")), labels.get("GPU_I_ID", "")


def _workload_pods(identity: Mapping[tuple[str, str, str], Mapping[str, str]]) -> dict[tuple[str, str, str], PodRef]:
    """Which GPU runs which workload pod, following DESIGN.md's rules on exporter labels.

    `exported_*` labels always name the workload (the target labels were renamed). A bare `pod`
    label names the workload only when no series anywhere carries `exported_pod`, and not when
    it is identical on every GPU of a multi-GPU node: then it is the exporter's own pod name.
    """
    any_exported = any(labels.get("exported_pod") for labels in identity.values())
    pods: dict[tuple[str, str, str], PodRef] = {}
    if any_exported:
        for key, labels in identity.items():
            if labels.get("exported_pod"):
                pods[key] = PodRef(labels.get("exported_namespace", ""), labels["exported_pod"],
                                   labels.get("exported_container", ""))
        return pods
    bare_by_node: dict[str, list[str]] = defaultdict(list)
    for (node, _gpu, _mig), labels in identity.items():
        bare_by_node[node].append(labels.get("pod", ""))
    exporter_named = {node for node, names in bare_by_node.items()
                      if len(names) > 1 and names[0] and all(name == names[0] for name in names)}
    for key, labels in identity.items():
        if labels.get("pod") and key[0] not in exporter_named:
            pods[key] = PodRef(labels.get("namespace", ""), labels["pod"], labels.get("container", ""))
    return pods


def build_snapshot(
    readings: Readings,
    *,
    taken_at: datetime,
    node_label: str = "auto",
    use_profiling_metrics: bool = True,
    gpus_seen_recently: Mapping[str, int] | None = None,
    allocatable_gpus: Mapping[str, int] | None = None,
    allocated_gpus: Mapping[str, int] | None = None,
    newest_sample_at: datetime | None = None,
) -> ClusterSnapshot:
    """Assemble per-GPU samples into per-node telemetry.

    `gpus_seen_recently` (node → GPU series count over the look-back window) reveals vanished
    GPUs and nodes; `allocatable_gpus` / `allocated_gpus` come from kube-state-metrics and, when
    present, beat the exporter's pod labels as the count of allocated GPUs.
    """
    label = detect_node_label(readings, node_label)
    warnings: list[str] = []
    if not label and any(readings.values()):
        warnings.append("no series carries a node label (tried " + ", ".join(dcgm.NODE_LABEL_CANDIDATES) + ")")
    values: dict[str, dict[tuple[str, str, str], float]] = defaultdict(dict)
    identity: dict[tuple[str, str, str], Mapping[str, str]] = {}
    for metric, series_list in readings.items():
        for series in series_list:
            key = _gpu_key(series.labels, label) if label else None
            if key is None:
                continue
            values[metric][key] = series.value
            known = identity.get(key)
            if known is None or len(series.labels) > len(known):
                identity[key] = series.labels
    pods = _workload_pods(identity)

    gpus_by_node: dict[str, list[GpuSample]] = defaultdict(list)
    for key in sorted(identity, key=_natural_key):
        labels = identity[key]
        gpus_by_node[key[0]].append(GpuSample(
            gpu=key[1],
            uuid=labels.get("UUID", ""),
            model=labels.get("modelName", ""),
            util_percent=_utilisation(values, key, use_profiling_metrics),
            fb_used_mib=values[dcgm.FB_USED].get(key),
            fb_free_mib=values[dcgm.FB_FREE].get(key),
            temperature_c=values[dcgm.GPU_TEMP].get(key),
            power_w=values[dcgm.POWER_USAGE].get(key),
            last_xid=_as_xid(values[dcgm.XID_ERRORS].get(key)),
            pod=pods.get(key),
            mig_profile=labels.get("GPU_I_PROFILE", ""),
            mig_instance=labels.get("GPU_I_ID", ""),
        ))
    seen = gpus_seen_recently or {}
    allocatable = allocatable_gpus or {}
    allocated = allocated_gpus or {}
    nodes = tuple(
        NodeTelemetry(
            name=name,
            gpus=tuple(gpus),
            gpus_seen_recently=max(seen.get(name, 0), len(gpus)),
            allocatable_gpus=allocatable.get(name),
            allocated_gpus=allocated.get(name),
        )
        for name, gpus in sorted(gpus_by_node.items())
    )
    vanished = tuple(sorted(name for name, count in seen.items() if count > 0 and name not in gpus_by_node))
    return ClusterSnapshot(
        taken_at=taken_at,
        nodes=nodes,
        node_label=label,
        vanished_nodes=vanished,
        newest_sample_at=newest_sample_at,
        warnings=tuple(warnings),
    )


def _utilisation(values: Mapping[str, Mapping[tuple[str, str, str], float]], key: tuple[str, str, str],
                 use_profiling_metrics: bool) -> float | None:
    if use_profiling_metrics:
        engine_active = values[dcgm.GR_ENGINE_ACTIVE].get(key)
        if engine_active is not None:
            return min(100.0, max(0.0, engine_active * 100.0))
    util = values[dcgm.GPU_UTIL].get(key)
    return None if util is None else min(100.0, max(0.0, util))


def _as_xid(value: float | None) -> int:
    return int(value) if value is not None and value == value and value > 0 else 0


def _natural_key(key: tuple[str, str, str]) -> tuple:
    node, gpu, mig = key
    return node, (0, int(gpu), "") if gpu.isdigit() else (1, 0, gpu), mig


def series_from_families(families: Iterable) -> dict[str, list[Series]]:
    """Readings from parsed exposition text (`prometheus_client.parser` metric families)."""
    readings: dict[str, list[Series]] = defaultdict(list)
    for family in families:
        for sample in family.samples:
            if sample.name in dcgm.GPU_METRICS:
                readings[sample.name].append(Series(dict(sample.labels), float(sample.value)))
    return dict(readings)
