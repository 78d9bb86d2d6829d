"""GPU memory where it says something about room: the framebuffer of the GPUs a new pod could take
or share — those no pod holds, and those several pods share — not of GPUs one pod holds alone. Pure,
no I/O.

A model server preallocates: vLLM takes 90 % of its GPU's framebuffer whatever its load
(`--gpu-memory-utilization`, default 0.9), so a fleet of idle replicas reads as full memory. A GPU
one pod holds cannot take another pod however much of its memory is free, so its memory is
neither pressure nor room. Memory used on a free GPU (a process outside Kubernetes, a leak) is
room lost, and on a shared GPU (time-slicing, MPS, a shared DRA claim) it is what the next
replica's KV cache must fit beside.

dcgm-exporter names one pod per time-sliced GPU by default (its issues #151, #307; a copy per
replica only with `KUBERNETES_VIRTUAL_GPUS`), so where kube-state-metrics shows more GPUs
allocatable than report, the node's GPUs count as shared and its whole framebuffer stands
(`scoring.series.build_snapshot`).

Raw rows give each unit's FB_USED and FB_FREE (`fb_units`); the recording rules give the sums over
placeable units per node (`fb_placeable_used`, `fb_placeable_free`), counting a unit held alone
where the recorded pod rows name one pod.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from scoring import dcgm
from scoring.rows import Series

Key = tuple[str, str, str]
"""(node, gpu, MIG instance id or ""), as `scoring.series.UnitKey`."""


@dataclass(frozen=True, slots=True)
class Framebuffer:
    """MiB used and total over a node's placeable units (total 0: every unit is one pod's)."""

    used_mib: float
    total_mib: float


def pods_per_unit(rows: Iterable[Series], node_of: Callable[[Series], str]) -> dict[Key, int]:
    """How many distinct pods the per-unit rows name for each unit (dcgm-exporter writes a shared
    GPU's series once per pod)."""
    pods: dict[Key, set[tuple[str, str]]] = defaultdict(set)
    for row in rows:
        labels = row.labels
        pod = labels.get("exported_pod") or labels.get("pod", "")
        if pod and (node := node_of(row)):
            namespace = labels.get("exported_namespace") or labels.get("namespace", "")
            pods[node, labels.get("gpu", ""), labels.get("GPU_I_ID", "")].add((namespace, pod))
    return {key: len(named) for key, named in pods.items()}


def placeable_from_units(rows: Iterable[Series], node_of: Callable[[Series], str],
                         held_alone: Collection[Key]) -> dict[str, Framebuffer]:
    """Per node, the framebuffer of the units not held alone, from one row per unit and gauge."""
    used: dict[str, float] = defaultdict(float)
    total: dict[str, float] = defaultdict(float)
    for row in rows:
        if not (node := node_of(row)):
            continue
        total[node] += 0.0
        if (node, row.labels.get("gpu", ""), row.labels.get("GPU_I_ID", "")) in held_alone:
            continue
        metric = row.labels.get("__name__", "")
        if metric == dcgm.FB_USED:
            used[node] += row.value
            total[node] += row.value
        elif metric == dcgm.FB_FREE:
            total[node] += row.value
    return {node: Framebuffer(used[node], total[node]) for node in total}


def placeable_from_records(used: Iterable[Series], free: Iterable[Series], node_of: Callable[[Series], str],
                           nodes: Iterable[str]) -> dict[str, Framebuffer]:
    """Per node, from the recorded sums of FB_USED and FB_FREE over placeable units; a node
    without rows has none."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for index, rows in enumerate((used, free)):
        for row in rows:
            if node := node_of(row):
                sums[node][index] += row.value
    return {node: Framebuffer(sums[node][0], sum(sums[node])) if node in sums else Framebuffer(0.0, 0.0)
            for node in nodes}


def fraction(framebuffer: Framebuffer | None) -> float | None:
    """Used over total; None where no unit is placeable."""
    if framebuffer is None or framebuffer.total_mib <= 0:
        return None
    return framebuffer.used_mib / framebuffer.total_mib


def held_alone(allocated: Mapping[Key, object], pods: Mapping[Key, int]) -> set[Key]:
    """The units credited to a workload pod and named by no other pod."""
    return {key for key in allocated if pods.get(key, 1) <= 1}
