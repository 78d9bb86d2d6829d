"""GPU memory where it says something about room: the framebuffer of the GPUs a new pod could take
or share — those no pod holds, and those several pods share — not of GPUs one pod holds alone. Pure,
no I/O.

A model server preallocates: vLLM takes 90 % of its GPU's framebuffer whatever its load
(`--gpu-memory-utilization`, default 0.9), so a fleet of idle replicas reads as full memory. A GPU
one pod holds cannot take another pod however much of its memory is free, so its memory is
neither pressure nor room. Memory used on a free GPU (a process outside Kubernetes, a leak) is
room lost, and on a shared GPU (a shared DRA claim, or time-slicing where dcgm-exporter writes a
series per pod) it is what the next replica's KV cache must fit beside.

dcgm-exporter names one pod per time-sliced GPU by default (its issues #151, #307; a copy per
replica only with `KUBERNETES_VIRTUAL_GPUS`), so where kube-state-metrics shows more GPUs
allocatable than report, the node's GPUs count as shared and its whole framebuffer stands
(`scoring.ingest.series.build_snapshot`).

Prometheus sums it per node (`scoring.ingest.queries.placeable_memory_queries`, recorded as it is); the
simulator and `explain` sum their samples by the same rule (`placeable_rows`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from scoring.ingest.rows import Series
from scoring.ingest.telemetry import Framebuffer, GpuSample


def placeable_per_node(used: Iterable[Series], free: Iterable[Series], node_of: Callable[[Series], str],
                       nodes: Iterable[str]) -> dict[str, Framebuffer]:
    """Per node, from the sums of FB_USED and FB_FREE over placeable units; a node without rows
    has none."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for index, rows in enumerate((used, free)):
        for row in rows:
            if node := node_of(row):
                sums[node][index] += row.value
    return {node: Framebuffer(sums[node][0], sum(sums[node])) if node in sums else Framebuffer(0.0, 0.0)
            for node in nodes}


def placeable_rows(samples: Iterable[GpuSample]) -> dict[str, list[Series]]:
    """The rows Prometheus would give for these GPUs (node label `node`): a unit is held alone
    where its samples name exactly one pod (a shared GPU has a sample per pod)."""
    pods: dict[tuple[str, str, str], set] = defaultdict(set)
    figures: dict[tuple[str, str, str], GpuSample] = {}
    for s in samples:
        key = (s.node, s.gpu, s.mig_instance)
        figures.setdefault(key, s)
        if s.pod is not None:
            pods[key].add((s.pod.namespace, s.pod.name))
    sums: dict[tuple[str, str], float] = defaultdict(float)
    for key, s in figures.items():
        if len(pods[key]) == 1:
            continue
        for part, value in (("used", s.fb_used_mib), ("free", s.fb_free_mib)):
            if value is not None:
                sums[key[0], part] += value
    return {f"fb_placeable_{part}": [Series({"node": node}, value) for (node, p), value in sums.items() if p == part]
            for part in ("used", "free")}
