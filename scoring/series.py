"""Build a `ClusterSnapshot` from labelled series, whether read from Prometheus or from exposition text. Pure.

Two shapes of input meet here. Prometheus aggregates per node at query time (`Aggregates`: a few
rows per node, cheap at 40,000 GPUs); exposition text gives per-GPU series (`Readings`), which
`aggregate_samples` folds into the very same rows. One builder turns rows into the snapshot, so
both paths apply the same field rules: which label names the node, and which pod labels name a
workload rather than the exporter's own pod.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from scoring import dcgm
from scoring.telemetry import ClusterSnapshot, GpuKind, GpuSample, NodeTelemetry, PodRef, PodUsage


@dataclass(frozen=True, slots=True)
class Series:
    """One series of an instant vector: its labels and its value."""

    labels: Mapping[str, str]
    value: float


Readings = Mapping[str, Sequence[Series]]
"""Per-GPU series by DCGM metric name."""

Aggregates = Mapping[str, Sequence[Series]]
"""Per-node rows by name: gpu_kinds (GPU count by node, modelName and GPU_I_PROFILE), gpu_util
(each GPU's GPU_UTIL, 0–100, with its workload pod labels), gpu_engine_active (the same for
GR_ENGINE_ACTIVE, 0–1, which wins where a GPU has both), sums (per-node sums by `__name__`, see
`SUMMED`), temperature_max (hottest GPU per node), xids (last XID by node and gpu, non-zero)."""

_NO_NODE_LABEL = "no series carries a node label (tried " + ", ".join(dcgm.NODE_LABEL_CANDIDATES) + ")"

SUMMED = {"fb_used": dcgm.FB_USED, "fb_free": dcgm.FB_FREE, "power": dcgm.POWER_USAGE}
"""Per-node sums, read from the `sums` row set by metric name (`__name__`)."""


def detect_node_label(rows: Iterable[Series], configured: str = "auto") -> str:
    """The label that names the node: the configured one, else the first candidate most rows carry."""
    if configured != "auto":
        return configured
    counts = dict.fromkeys(dcgm.NODE_LABEL_CANDIDATES, 0)
    total = 0
    for series in rows:
        total += 1
        for candidate in dcgm.NODE_LABEL_CANDIDATES:
            if series.labels.get(candidate):
                counts[candidate] += 1
    if not any(counts.values()):
        return ""
    # A relabelled name on (nearly) every row beats the exporter's own label, which may name its pod.
    for candidate in dcgm.NODE_LABEL_CANDIDATES:
        if counts[candidate] >= 0.9 * total:
            return candidate
    return max(dcgm.NODE_LABEL_CANDIDATES, key=counts.__getitem__)


def _pod_key(labels: Mapping[str, str]) -> tuple[str, str, bool]:
    """(namespace, pod, exported?) from a row's workload labels."""
    if labels.get("exported_pod"):
        return labels.get("exported_namespace", ""), labels["exported_pod"], True
    return labels.get("namespace", ""), labels.get("pod", ""), False


def workload_pods(pod_rows: Sequence[tuple[str, str, str, bool, int]],
                  gpus_per_node: Mapping[str, int]) -> set[tuple[str, str, str]]:
    """Which (node, namespace, pod) rows name a workload, following DESIGN.md's exporter facts.

    Rows are (node, namespace, pod, exported, gpu count). `exported_*` labels always name the
    workload. A bare `pod` names one only when no row anywhere is exported (else it is the
    exporter's target label) and it does not cover every GPU of a multi-GPU node (then it is the
    exporter's own pod name).
    """
    any_exported = any(exported for *_, exported, _ in pod_rows)
    accepted = set()
    for node, namespace, pod, exported, gpus in pod_rows:
        if not pod:
            continue
        if exported or (not any_exported and not (gpus > 1 and gpus >= gpus_per_node.get(node, 0))):
            accepted.add((node, namespace, pod))
    return accepted


def build_snapshot(
    aggregates: Aggregates,
    *,
    taken_at: datetime,
    node_label: str = "auto",
    gpus_seen_recently: Sequence[Series] = (),
    allocatable_gpus: Sequence[Series] = (),
    allocated_gpus: Sequence[Series] = (),
    node_labels: Sequence[Series] = (),
    topology_keys: Sequence[str] = (),
    newest_sample_at: datetime | None = None,
) -> ClusterSnapshot:
    """Assemble per-node rows into `NodeTelemetry`.

    `gpus_seen_recently` (GPU series count per node over the look-back window, by node label)
    reveals vanished GPUs and nodes; `allocatable_gpus` / `allocated_gpus` (by `node`) come from
    kube-state-metrics and, when present, beat pod labels as the count of allocated GPUs.
    """
    label = detect_node_label(aggregates.get("gpu_kinds", ()), node_label)
    if not label:
        warnings = (_NO_NODE_LABEL,) if aggregates.get("gpu_kinds") else ()
        return ClusterSnapshot(taken_at=taken_at, nodes=(), warnings=warnings, newest_sample_at=newest_sample_at)

    def node_of(series: Series) -> str:
        return series.labels.get(label, "")

    kinds: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for row in aggregates.get("gpu_kinds", ()):
        if node := node_of(row):
            kinds[node][row.labels.get("modelName", ""), row.labels.get("GPU_I_PROFILE", "")] += int(row.value)
    gpus = {node: sum(by_kind.values()) for node, by_kind in kinds.items()}

    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    metric_to_sum = {metric: name for name, metric in SUMMED.items()}
    for row in aggregates.get("sums", ()):
        if (node := node_of(row)) and (name := metric_to_sum.get(row.labels.get("__name__", ""))):
            sums[node][name] += row.value
    temperature: dict[str, float] = {}
    for row in aggregates.get("temperature_max", ()):
        if node := node_of(row):
            temperature[node] = max(temperature.get(node, row.value), row.value)
    xids: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for row in aggregates.get("xids", ()):
        if (node := node_of(row)) and row.value > 0:
            xids[node].append((row.labels.get("gpu", "?"), int(row.value)))

    per_gpu: dict[tuple[str, str, str], tuple[float, Mapping[str, str]]] = {}
    for name, scale in (("gpu_util", 1.0), ("gpu_engine_active", 100.0)):  # the engine ratio wins: last
        for row in aggregates.get(name, ()):
            if node := node_of(row):
                key = (node, row.labels.get("gpu", ""), row.labels.get("GPU_I_ID", ""))
                per_gpu[key] = (min(100.0, max(0.0, row.value * scale)), row.labels)
    util: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0.0])  # sum, count, max
    pod_gpus: dict[tuple[str, str, str, bool], int] = defaultdict(int)
    pod_util: dict[tuple[str, str, str, bool], float] = defaultdict(float)
    for (node, _gpu, _mig), (value, labels) in per_gpu.items():
        figures = util[node]
        figures[0] += value
        figures[1] += 1
        figures[2] = max(figures[2], value)
        key = (node, *_pod_key(labels))
        pod_gpus[key] += 1
        pod_util[key] += value
    accepted = workload_pods([(*key, count) for key, count in pod_gpus.items()], gpus)
    pods: dict[str, list[PodUsage]] = defaultdict(list)
    for (node, namespace, pod, exported), count in pod_gpus.items():
        if (node, namespace, pod) in accepted:
            pods[node].append(PodUsage(namespace, pod, count, pod_util[(node, namespace, pod, exported)] / count))

    seen = _sum_by(gpus_seen_recently, label)
    allocatable = _sum_by(allocatable_gpus, "node")
    allocated = _sum_by(allocated_gpus, "node")
    topology = _topology(node_labels, topology_keys)
    nodes = []
    for name in sorted(gpus):
        util_sum, util_count, util_max = util.get(name, (0.0, 0, 0.0))
        nodes.append(NodeTelemetry(
            name=name,
            gpus=gpus[name],
            util_sum=util_sum,
            util_count=int(util_count),
            util_max=util_max,
            fb_used_mib=sums[name].get("fb_used", 0.0),
            fb_free_mib=sums[name].get("fb_free", 0.0),
            temperature_max_c=temperature.get(name),
            power_w=sums[name].get("power"),
            gpu_kinds=tuple(GpuKind(model, profile, count) for (model, profile), count in sorted(kinds[name].items())),
            xids=tuple(sorted(xids[name], key=lambda x: _natural(x[0]))),
            pods=tuple(sorted(pods[name], key=lambda p: (p.namespace, p.name))),
            gpus_seen_recently=max(seen.get(name, 0), gpus[name]),
            allocatable_gpus=allocatable.get(name),
            allocated_gpus=allocated.get(name),
            topology=topology.get(name, ()),
        ))
    vanished = tuple(sorted(name for name, count in seen.items() if count > 0 and name not in gpus))
    return ClusterSnapshot(taken_at=taken_at, nodes=tuple(nodes), node_label=label, vanished_nodes=vanished,
                           newest_sample_at=newest_sample_at)


def ksm_label_name(key: str) -> str:
    """How kube-state-metrics names a node label in `kube_node_labels`: `label_` + sanitised key."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _topology(rows: Sequence[Series], keys: Sequence[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    names = {ksm_label_name(key): key for key in keys}
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for row in rows:
        node = row.labels.get("node", "")
        for name, key in names.items():
            if node and row.labels.get(name):
                found[node][key] = row.labels[name]
    return {node: tuple((k, v[k]) for k in keys if k in v) for node, v in found.items()}


def _sum_by(rows: Sequence[Series], label: str) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for row in rows:
        if row.labels.get(label):
            totals[row.labels[label]] += int(row.value)
    return dict(totals)


def _natural(text: str) -> tuple[int, int | str]:
    return (0, int(text)) if text.isdigit() else (1, text)


# --- per-GPU series (exposition text) -------------------------------------------------------------

def gpu_samples(readings: Readings, *, node_label: str = "auto", use_profiling_metrics: bool = True) -> list[GpuSample]:
    """One `GpuSample` per GPU (or MIG instance) in per-GPU series, pods resolved by `workload_pods`."""
    label = detect_node_label((s for rows in readings.values() for s in rows), node_label)
    if not label:
        return []
    values: dict[str, dict[tuple[str, str, str], float]] = defaultdict(dict)
    identity: dict[tuple[str, str, str], Mapping[str, str]] = {}
    for metric, rows in readings.items():
        for series in rows:
            node = series.labels.get(label, "")
            if not node:
                continue
            key = (node, series.labels.get("gpu", series.labels.get("UUID", "")), series.labels.get("GPU_I_ID", ""))
            values[metric][key] = series.value
            if len(series.labels) > len(identity.get(key, ())):
                identity[key] = series.labels
    gpus_per_node: dict[str, int] = defaultdict(int)
    pod_counts: dict[tuple[str, str, str, bool], int] = defaultdict(int)
    for key, labels in identity.items():
        gpus_per_node[key[0]] += 1
        pod_counts[(key[0], *_pod_key(labels))] += 1
    accepted = workload_pods([(*k, n) for k, n in pod_counts.items()], gpus_per_node)

    samples = []
    for key in sorted(identity, key=lambda k: (k[0], _natural(k[1]), k[2])):
        labels = identity[key]
        namespace, pod, exported = _pod_key(labels)
        container = labels.get("exported_container" if exported else "container", "")
        samples.append(GpuSample(
            node=key[0],
            gpu=key[1],
            uuid=labels.get("UUID", ""),
            model=labels.get("modelName", ""),
            util_percent=_utilisation(values, key, use_profiling_metrics),
            fb_used_mib=values[dcgm.FB_USED].get(key),
            fb_free_mib=values[dcgm.FB_FREE].get(key),
            temperature_c=values[dcgm.GPU_TEMP].get(key),
            power_w=values[dcgm.POWER_USAGE].get(key),
            last_xid=_as_xid(values[dcgm.XID_ERRORS].get(key)),
            pod=PodRef(namespace, pod, container) if (key[0], namespace, pod) in accepted else None,
            mig_profile=labels.get("GPU_I_PROFILE", ""),
            mig_instance=labels.get("GPU_I_ID", ""),
        ))
    return samples


def aggregate_samples(samples: Iterable[GpuSample]) -> dict[str, list[Series]]:
    """The rows Prometheus would return for these GPUs (node label: `node`)."""
    kinds: dict[tuple, float] = defaultdict(float)
    sums: dict[tuple, float] = defaultdict(float)
    temperature: dict[tuple, float] = {}
    rows: dict[str, list[Series]] = defaultdict(list)
    for s in samples:
        node = (("node", s.node),)
        kinds[node + (("modelName", s.model), ("GPU_I_PROFILE", s.mig_profile))] += 1
        if s.util_percent is not None:
            workload = () if s.pod is None else (("exported_namespace", s.pod.namespace), ("exported_pod", s.pod.name))
            rows["gpu_util"].append(Series(dict(node + (("gpu", s.gpu),) + workload), s.util_percent))
        for metric, value in ((dcgm.FB_USED, s.fb_used_mib), (dcgm.FB_FREE, s.fb_free_mib),
                              (dcgm.POWER_USAGE, s.power_w)):
            if value is not None:
                sums[node + (("__name__", metric),)] += value
        if s.temperature_c is not None:
            temperature[node] = max(temperature.get(node, s.temperature_c), s.temperature_c)
        if s.last_xid:
            rows["xids"].append(Series(dict(node + (("gpu", s.gpu),)), s.last_xid))
    for name, by_labels in (("gpu_kinds", kinds), ("sums", sums), ("temperature_max", temperature)):
        rows[name] = [Series(dict(labels), value) for labels, value in by_labels.items()]
    return dict(rows)


def snapshot_from_readings(readings: Readings, *, taken_at: datetime, node_label: str = "auto",
                           use_profiling_metrics: bool = True, newest_sample_at: datetime | None = None
                           ) -> ClusterSnapshot:
    """A snapshot straight from per-GPU series, e.g. one exporter's text, without Prometheus."""
    label = detect_node_label((s for rows in readings.values() for s in rows), node_label)
    samples = gpu_samples(readings, node_label=label, use_profiling_metrics=use_profiling_metrics)
    snapshot = build_snapshot(aggregate_samples(samples), taken_at=taken_at, node_label="node",
                              newest_sample_at=newest_sample_at)
    warnings = (_NO_NODE_LABEL,) if not label and any(readings.values()) else ()
    return replace(snapshot, node_label=label, warnings=warnings)


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


def series_from_families(families: Iterable) -> dict[str, list[Series]]:
    """Readings from parsed exposition text (`prometheus_client.parser` metric families)."""
    readings: dict[str, list[Series]] = defaultdict(list)
    for family in families:
        for sample in family.samples:
            if sample.name in dcgm.GPU_METRICS:
                readings[sample.name].append(Series(dict(sample.labels), float(sample.value)))
    return dict(readings)
