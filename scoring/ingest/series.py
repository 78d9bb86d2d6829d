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
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from scoring import dcgm
from scoring.ingest import memory
from scoring.ingest.rows import Series
from scoring.ingest.signals import registry as signals
from scoring.ingest.telemetry import (ClusterSnapshot, Framebuffer, GpuKind, GpuSample, NodeTelemetry, PodRef, PodUsage,
                                      natural_key as _natural, unit_id)


Readings = Mapping[str, Sequence[Series]]
"""Per-GPU series by DCGM metric name."""

Aggregates = Mapping[str, Sequence[Series]]
"""Rows by name. Per unit (GPU or MIG instance; labels: node, gpu, GPU_I_ID, GPU_I_PROFILE, modelName
and the pod labels): gpu_util (GPU_UTIL, 0–100), gpu_engine_active (GR_ENGINE_ACTIVE, 0–1) and
gpu_busy (another profiling ratio), the policy's `BusyMeasure` saying which wins where a unit has several. Per node: sums (FB_USED, FB_FREE in MiB and POWER_USAGE in W, by `__name__`),
fb_counts (how many series of each framebuffer gauge, by `__name__`), temperature_max; xids (last
XID by node, gpu and GPU_I_ID, non-zero). From the recording rules, node_units (with node_util_sum,
node_util_max, mig_parents, pod_units) stands in for the per-unit rows and fb_unknown for
fb_counts (`scoring.ingest.queries.replacement_records`)."""

SUMMED = {dcgm.FB_USED: "fb_used", dcgm.FB_FREE: "fb_free", dcgm.POWER_USAGE: "power"}
"""Per-node sums, read from the `sums` rows by metric name."""

UnitKey = tuple[str, str, str]
"""(node, gpu, MIG instance id or "") — one schedulable unit, or a MIG-enabled GPU's parent row."""

_NO_NODE_LABEL = "no series carries a node label (tried " + ", ".join(dcgm.NODE_LABEL_CANDIDATES) + ")"
_PER_UNIT = ("gpu_busy", "gpu_util", "gpu_engine_active")
RECORDED_UNITS = "node_units"
"""Present instead of `_PER_UNIT` where the rows come from the recording rules."""
EXPORTER_HINTS = ("dcgm-exporter", "nvml-exporter")
_EXPORTER_NAME = re.compile("|".join(map(re.escape, EXPORTER_HINTS)))


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


def pod_order(labels: Mapping[str, str]) -> tuple[bool, str, str]:
    """Which of several series of one GPU names its pod: pods sharing a DRA claim each get a copy
    of the GPU's series, and the first pod by namespace and name is credited, on every path (a
    copy naming a pod before one naming none)."""
    pod = labels.get("exported_pod") or labels.get("pod", "")
    return not pod, labels.get("exported_namespace") or labels.get("namespace", ""), pod


def schedulable_units(keys: Iterable[UnitKey]) -> set[UnitKey]:
    """The keys that are units a pod can be given: a MIG-enabled GPU's own row (no instance id
    beside instance rows of the same GPU) is its parent, not a unit — the instances are."""
    keys = set(keys)
    partitioned = {(node, gpu) for node, gpu, instance in keys if instance}
    return {key for key in keys if key[2] or (key[0], key[1]) not in partitioned}


def _is_exporter_pod(labels: Mapping[str, str]) -> bool:
    """A bare `pod` that is the scrape target's own: behind a ServiceMonitor with `honorLabels:
    true` the idle GPUs keep the target's `container`, which is also its `job`/`service` name."""
    container = labels.get("container", "")
    if container and container in (labels.get("job"), labels.get("service")):
        return True
    return bool(_EXPORTER_NAME.search(labels.get("pod", "")) or _EXPORTER_NAME.search(container))


def classify_workloads(units: Mapping[UnitKey, Mapping[str, str]],
                       gpu_pods: Collection[tuple[str, str]] | None = None,
                       units_per_node: Mapping[str, int] | None = None,
                       ) -> tuple[dict[UnitKey, PodRef], tuple[str, ...]]:
    """Which unit is allocated to which workload pod, from the series' own labels (docs/DESIGN.md's
    exporter facts), and a warning for every pod it could not be sure of.

    `exported_*` labels always name the workload. A bare `pod` does not when any series carries
    `exported_pod` (it is the target label then), nor when the series mark it as the exporter's
    own (`_is_exporter_pod`). A pod with dcgm-exporter's `dra_claim_name` got the GPU through a DRA
    claim: a workload, though kube-state-metrics lists no GPU request for it. Otherwise, where
    kube-state-metrics is scraped (`gpu_pods`: the (namespace, pod) pairs requesting a GPU
    resource), it decides. Without it, a bare pod covering every unit of a multi-GPU node is as
    likely the exporter as a whole-node job: not credited, and said so. `units_per_node` counts a
    node's units where `units` holds only those that name a pod (the recorded path).
    """
    any_exported = any(labels.get("exported_pod") for labels in units.values())
    per_node: dict[str, int] = defaultdict(int)
    cover: dict[tuple[str, str, str], int] = defaultdict(int)
    if gpu_pods is None and not any_exported:  # only then does a bare pod's cover decide
        for key, labels in units.items():
            per_node[key[0]] += 1
            if pod := labels.get("pod"):
                cover[key[0], labels.get("namespace", ""), pod] += 1
    allocated: dict[UnitKey, PodRef] = {}
    unsure: set[tuple[str, str, str]] = set()
    for key, labels in units.items():
        if labels.get("exported_pod"):
            allocated[key] = PodRef(labels.get("exported_namespace", ""), labels["exported_pod"],
                                    labels.get("exported_container", ""))
            continue
        pod, namespace = labels.get("pod", ""), labels.get("namespace", "")
        if not pod or any_exported or _is_exporter_pod(labels):
            continue
        if not labels.get(dcgm.DRA_CLAIM_LABEL):  # a DRA allocation is never the exporter's own pod
            if gpu_pods is not None:
                if (namespace, pod) not in gpu_pods:
                    continue
            else:
                on_node = per_node[key[0]] if units_per_node is None else units_per_node.get(key[0], 0)
                if on_node > 1 and cover[key[0], namespace, pod] >= on_node:
                    unsure.add((key[0], namespace, pod))
                    continue
        allocated[key] = PodRef(namespace, pod, labels.get("container", ""))
    warnings = tuple(f"node {node}: pod {namespace}/{pod} is on every GPU and nothing says whether it is the "
                     f"exporter's own pod or a workload; not counted as an allocation (scrape kube-state-metrics "
                     f"to decide)" for node, namespace, pod in sorted(unsure))
    return allocated, warnings


def build_snapshot(
    aggregates: Aggregates,
    *,
    taken_at: datetime,
    node_label: str = "auto",
    gpus_seen_recently: Sequence[Series] = (),
    allocatable_gpus: Sequence[Series] = (),
    allocated_gpus: Sequence[Series] = (),
    gpu_pods: Sequence[Series] | None = None,
    node_labels: Sequence[Series] = (),
    topology_keys: Sequence[str] = (),
    newest_sample_at: datetime | None = None,
    busy: dcgm.BusyMeasure = dcgm.BusyMeasure(),
) -> ClusterSnapshot:
    """Assemble rows into `NodeTelemetry`.

    `gpus_seen_recently` (series keys per node over the look-back window, by node label) reveals
    vanished GPUs and nodes; `allocatable_gpus` / `allocated_gpus` (by `node`) and `gpu_pods` (by
    `namespace`, `pod`) come from kube-state-metrics and, when present, beat pod labels.
    """
    recorded = RECORDED_UNITS in aggregates
    unit_rows = aggregates[RECORDED_UNITS] if recorded else [
        row for name in _PER_UNIT for row in aggregates.get(name, ())]
    label = detect_node_label(unit_rows, node_label)
    if not label:
        warnings = (_NO_NODE_LABEL,) if unit_rows else ()
        return ClusterSnapshot(taken_at=taken_at, nodes=(), warnings=warnings, newest_sample_at=newest_sample_at)

    def node_of(series: Series) -> str:
        return series.labels.get(label, "")

    ksm_pods = None if gpu_pods is None else {
        (row.labels.get("namespace", ""), row.labels.get("pod", "")) for row in gpu_pods}
    units = _units_from_records(aggregates, node_of, ksm_pods) if recorded else _units_from_rows(
        aggregates, node_of, ksm_pods, busy)
    kinds, util, reporting, pod_figures = units.kinds, units.util, units.reporting, units.pods

    sums = _by_node_and_name(aggregates.get("sums", ()), node_of)
    memory_known, placeable = _memory(aggregates, node_of, sums, recorded)
    signalled = signals.read(aggregates, node_of)

    seen = _sum_by(gpus_seen_recently, label)
    allocatable = _sum_by(allocatable_gpus, "node")
    allocated = _sum_by(allocated_gpus, "node")
    topology = _topology(node_labels, topology_keys)
    nodes = []
    no_figures: dict[str, float] = {}
    for name in sorted(kinds):
        util_sum, util_count, util_max = util[name]
        known = name in memory_known
        figures = sums.get(name, no_figures)
        used, free = figures.get("fb_used", 0.0), figures.get("fb_free", 0.0)
        pods = pod_figures.get(name)
        gpus = sum(kinds[name].values())
        nodes.append(NodeTelemetry(
            name=name,
            gpus=gpus,
            util_sum=util_sum,
            util_count=int(util_count),
            util_max=util_max,
            fb_used_mib=used if known else None,
            fb_total_mib=used + free if known else None,
            power_w=figures.get("power"),
            gpu_kinds=tuple(GpuKind(model, profile, count) for (model, profile), count in sorted(kinds[name].items())),
            pods=tuple(PodUsage(namespace, pod, int(count), total / count, tuple(sorted(ids, key=_natural)))
                       for (namespace, pod), (count, total, ids) in sorted(pods.items())) if pods else (),
            gpus_vanished=max(0, seen.get(name, 0) - reporting[name]),
            allocatable_gpus=allocatable.get(name),
            allocated_gpus=allocated.get(name),
            topology=topology.get(name, ()),
            # More GPUs allocatable than report: time-slicing or MPS replicas, all shared (dcgm-exporter
            # names one pod per time-sliced GPU by default, so its rows cannot tell).
            placeable_fb=placeable.get(name) if known and allocatable.get(name, 0) <= gpus else None,
            **signalled.get(name, {}),
        ))
    vanished = tuple(sorted(name for name, count in seen.items() if count > 0 and name not in kinds))
    return ClusterSnapshot(taken_at=taken_at, nodes=tuple(nodes), node_label=label, vanished_nodes=vanished,
                           newest_sample_at=newest_sample_at, warnings=units.warnings)


def _memory(aggregates: Aggregates, node_of, sums: Mapping[str, Mapping[str, float]],
            recorded: bool) -> tuple[set[str], dict[str, Framebuffer]]:
    """The nodes whose memory is known — every GPU reporting FB_USED also reports FB_FREE — and
    the framebuffer of their placeable units, where the rows say (`scoring.ingest.memory`)."""
    if recorded:  # the rules name only the nodes where fewer do
        unknown = {node_of(row) for row in aggregates.get("fb_unknown", ())}
        known = {node for node, figures in sums.items() if "fb_used" in figures} - unknown
    else:
        known = {node for node, counts in _by_node_and_name(aggregates.get("fb_counts", ()), node_of).items()
                 if counts.get("fb_used", 0) > 0 and counts.get("fb_used") == counts.get("fb_free")}
    if "fb_placeable_used" not in aggregates:
        return known, {}
    return known, memory.placeable_per_node(aggregates["fb_placeable_used"], aggregates.get("fb_placeable_free", ()),
                                            node_of, known)


@dataclass(slots=True)
class _Units:
    """Per node what the units say: GPU kinds, utilisation (sum, count, max), how many unit keys
    report (MIG parents included), and the workload pods' (units, utilisation total)."""

    kinds: dict[str, dict[tuple[str, str], int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    util: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0, 0.0]))
    reporting: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    pods: dict[str, dict[tuple[str, str], list]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(lambda: [0, 0.0, []])))
    warnings: tuple[str, ...] = ()

    def credit(self, rows: Mapping[UnitKey, tuple[float, Mapping[str, str]]],
               ksm_pods: Collection[tuple[str, str]] | None, units_per_node: Mapping[str, int] | None = None) -> None:
        """Credit each unit's utilisation to the workload pod its labels name."""
        allocated_to, self.warnings = classify_workloads({key: labels for key, (_, labels) in rows.items()},
                                                         ksm_pods, units_per_node)
        for key, pod in allocated_to.items():
            held = self.pods[key[0]][pod.namespace, pod.name]
            held[0] += 1
            held[1] += rows[key][0]
            held[2].append(unit_id(key[1], key[2]))


def _chosen(rows: Iterable[Series], node_of, scale: float = 1.0) -> dict[UnitKey, tuple[float, Mapping[str, str]]]:
    """One row per unit (a GPU shared through a DRA claim has a copy per pod: `pod_order`'s first
    wins), its value scaled and clamped to 0–100."""
    chosen: dict[UnitKey, Series] = {}
    for row in rows:
        if node := node_of(row):
            key = (node, row.labels.get("gpu", ""), row.labels.get("GPU_I_ID", ""))
            if key not in chosen or pod_order(row.labels) < pod_order(chosen[key].labels):
                chosen[key] = row
    return {key: (min(100.0, max(0.0, row.value * scale)), row.labels) for key, row in chosen.items()}


def _units_from_rows(aggregates: Aggregates, node_of, ksm_pods, busy: dcgm.BusyMeasure) -> _Units:
    """From one row per unit (the raw queries)."""
    # The preferred gauge wins where a unit has several (a key keeps its first place, takes the last value).
    per_key: dict[UnitKey, tuple[float, Mapping[str, str]]] = {}
    for name, _, factor in reversed(busy.readings):
        per_key |= _chosen(aggregates.get(name, ()), node_of, factor)
    schedulable = schedulable_units(per_key)
    found = _Units()
    for node, *_ in per_key:
        found.reporting[node] += 1
    # In the rows' order, not the set's: float sums that depend on the process's hash seed made
    # near-equal nodes swap ranks between runs of the same simulated seed.
    units = {key: row for key, row in per_key.items() if key in schedulable}
    for (node, *_), (value, labels) in units.items():
        found.kinds[node][labels.get("modelName", ""), labels.get("GPU_I_PROFILE", "")] += 1
        figures = found.util[node]
        figures[0] += value
        figures[1] += 1
        figures[2] = max(figures[2], value)
    found.credit(units, ksm_pods)
    return found


def _units_from_records(aggregates: Aggregates, node_of, ksm_pods) -> _Units:
    """From the recording rules' per-node records, and per-unit rows only for units naming a pod."""
    found = _Units()
    for row in aggregates[RECORDED_UNITS]:
        if node := node_of(row):
            found.kinds[node][row.labels.get("modelName", ""), row.labels.get("GPU_I_PROFILE", "")] += int(row.value)
            found.util[node][1] += int(row.value)
            found.reporting[node] += int(row.value)
    for row in aggregates.get("node_util_sum", ()):
        if (node := node_of(row)) in found.util:
            found.util[node][0] += row.value
    for row in aggregates.get("node_util_max", ()):
        if (node := node_of(row)) in found.util:
            found.util[node][2] = max(found.util[node][2], row.value)
    for row in aggregates.get("mig_parents", ()):
        if node := node_of(row):
            found.reporting[node] += int(row.value)
    found.credit(_chosen(aggregates.get("pod_units", ()), node_of), ksm_pods,
                 {node: int(figures[1]) for node, figures in found.util.items()})
    return found


def _by_node_and_name(rows: Sequence[Series], node_of) -> dict[str, dict[str, float]]:
    """Per node, the rows' values summed by `SUMMED` name (rows of one node under several label sets add up)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        if (node := node_of(row)) and (name := SUMMED.get(row.labels.get("__name__", ""))):
            totals[node][name] += row.value
    return totals


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


def _totals(rows: Sequence[Series], key: Callable[[Series], str]) -> dict[str, int]:
    """Each row's value summed by its key (rows without one are left out)."""
    totals: dict[str, int] = defaultdict(int)
    for row in rows:
        if name := key(row):
            totals[name] += int(row.value)
    return dict(totals)


def _sum_by(rows: Sequence[Series], label: str) -> dict[str, int]:
    return _totals(rows, lambda row: row.labels.get(label, ""))


# --- per-GPU series (exposition text) -------------------------------------------------------------

def gpu_samples(readings: Readings, *, node_label: str = "auto", busy: dcgm.BusyMeasure = dcgm.BusyMeasure()
                ) -> list[GpuSample]:
    """One `GpuSample` per GPU (or MIG instance) in per-GPU series, pods resolved by `classify_workloads`
    over the units that report utilisation, as the Prometheus path sees them."""
    return _samples(readings, node_label, busy)[0]


def _samples(readings: Readings, node_label: str, busy: dcgm.BusyMeasure
             ) -> tuple[list[GpuSample], tuple[str, ...]]:
    """`gpu_samples` and the workload warnings of `classify_workloads`."""
    label = detect_node_label((s for rows in readings.values() for s in rows), node_label)
    if not label:
        return [], ()
    values: dict[str, dict[UnitKey, float]] = defaultdict(dict)
    identity: dict[UnitKey, Mapping[str, str]] = {}
    for metric, rows in readings.items():
        for series in rows:
            node = series.labels.get(label, "")
            if not node:
                continue
            key = (node, series.labels.get("gpu", series.labels.get("UUID", "")), series.labels.get("GPU_I_ID", ""))
            values[metric][key] = series.value
            known = identity.get(key, {})
            if len(series.labels) > len(known) or (
                    len(series.labels) == len(known) and pod_order(series.labels) < pod_order(known)):
                identity[key] = series.labels
    reporting = {key for metric in dcgm.UTILISATION_METRICS for key in values[metric]}
    allocated_to, unsure = classify_workloads({key: identity[key] for key in schedulable_units(reporting)})

    samples = []
    for key in sorted(identity, key=lambda k: (k[0], _natural(k[1]), _natural(k[2]))):
        labels = identity[key]
        samples.append(GpuSample(
            node=key[0],
            gpu=key[1],
            uuid=labels.get("UUID", ""),
            model=labels.get("modelName", ""),
            util_percent=_utilisation(values, key, busy),
            fb_used_mib=values[dcgm.FB_USED].get(key),
            fb_free_mib=values[dcgm.FB_FREE].get(key),
            temperature_c=values[dcgm.GPU_TEMP].get(key),
            power_w=values[dcgm.POWER_USAGE].get(key),
            last_xid=_as_xid(values[dcgm.XID_ERRORS].get(key)),
            clock_reasons=_as_reasons(values[dcgm.CLOCK_THROTTLE_REASONS].get(key)),
            sm_clock_mhz=values[dcgm.SM_CLOCK].get(key),
            pcie_tx_bytes=values[dcgm.PCIE_TX_BYTES].get(key),
            pcie_rx_bytes=values[dcgm.PCIE_RX_BYTES].get(key),
            pod=allocated_to.get(key),
            mig_profile=labels.get("GPU_I_PROFILE", ""),
            mig_instance=labels.get("GPU_I_ID", ""),
        ))
    return samples, unsure


def aggregate_samples(samples: Iterable[GpuSample]) -> dict[str, list[Series]]:
    """The rows Prometheus would return for these GPUs (node label: `node`)."""
    sums: dict[tuple[str, str], float] = defaultdict(float)
    counts: dict[tuple[str, str], float] = defaultdict(float)
    rows: dict[str, list[Series]] = defaultdict(list)
    for s in samples:
        unit = {"node": s.node, "gpu": s.gpu, "GPU_I_ID": s.mig_instance}
        if s.util_percent is not None:
            labels = unit | {"GPU_I_PROFILE": s.mig_profile, "modelName": s.model}
            if s.pod is not None:
                labels |= {"exported_namespace": s.pod.namespace, "exported_pod": s.pod.name,
                           "exported_container": s.pod.container}
            rows["gpu_util"].append(Series(labels, s.util_percent))
        for metric, value in ((dcgm.FB_USED, s.fb_used_mib), (dcgm.FB_FREE, s.fb_free_mib),
                              (dcgm.POWER_USAGE, s.power_w)):
            if value is not None:
                sums[s.node, metric] += value
                if metric != dcgm.POWER_USAGE:
                    counts[s.node, metric] += 1
    for name, by_key in (("sums", sums), ("fb_counts", counts)):
        rows[name] = [Series({"node": node, "__name__": metric}, value) for (node, metric), value in by_key.items()]
    return dict(rows) | memory.placeable_rows(samples) | signals.aggregate(samples)


def snapshot_from_readings(readings: Readings, *, taken_at: datetime, node_label: str = "auto",
                           busy: dcgm.BusyMeasure = dcgm.BusyMeasure(), newest_sample_at: datetime | None = None
                           ) -> ClusterSnapshot:
    """A snapshot straight from per-GPU series, e.g. one exporter's text, without Prometheus."""
    label = detect_node_label((s for rows in readings.values() for s in rows), node_label)
    samples, unsure = _samples(readings, label, busy)
    snapshot = build_snapshot(aggregate_samples(samples), taken_at=taken_at, node_label="node",
                              newest_sample_at=newest_sample_at)
    warnings = (_NO_NODE_LABEL,) if not label and any(readings.values()) else unsure
    return replace(snapshot, node_label=label, warnings=warnings)


def _utilisation(values: Mapping[str, Mapping[UnitKey, float]], key: UnitKey,
                 busy: dcgm.BusyMeasure) -> float | None:
    """The preferred busy gauge, else the next the unit reports: a unit that reports only one
    (H100 MIG instances report only GR_ENGINE_ACTIVE) is still measured."""
    for _, metric, factor in busy.readings:
        if (value := values[metric].get(key)) is not None:
            return min(100.0, max(0.0, value * factor))
    return None


def _as_xid(value: float | None) -> int:
    return int(value) if value is not None and value == value and value > 0 else 0


def _as_reasons(value: float | None) -> int | None:
    return int(value) if value is not None and value == value and 0 <= value < 2**63 else None


def series_from_families(families: Iterable) -> dict[str, list[Series]]:
    """Readings from parsed exposition text (`prometheus_client.parser` metric families)."""
    readings: dict[str, list[Series]] = defaultdict(list)
    for family in families:
        for sample in family.samples:
            if sample.name in dcgm.GPU_METRICS:
                readings[sample.name].append(Series(dict(sample.labels), float(sample.value)))
    return dict(readings)
