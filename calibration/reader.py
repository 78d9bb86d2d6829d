"""A cluster's history as `calibration.estimate` frames: DCGM power (and its limit, where exported),
vLLM's TPOT and TTFT histograms, batch and KV-cache fill, and kube-state-metrics' allocatable
cores, read by range queries over a window. I/O only through the injected range query."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping

from scoring import dcgm
from calibration.estimate import Frame, GpuReading, NodeFrame, ReplicaReading

RangeFn = Callable[[str, float, float, float], list[tuple[Mapping[str, str], list[tuple[float, float]]]]]
"""(promql, start, end, step) → each series' labels and (time, value) points."""


def queries(step_seconds: float) -> dict[str, str]:
    # A step and a half of rate window: the last step's increase (a closed range of two steps would
    # hold three samples of a series scraped once a step, and average two increases).
    window = f"{int(1.5 * step_seconds)}s"

    def mean(histogram: str) -> str:
        return (f"sum by (namespace, pod, model_name) (rate({histogram}_sum[{window}])) / "
                f"sum by (namespace, pod, model_name) (rate({histogram}_count[{window}]))")

    return {
        "power": "DCGM_FI_DEV_POWER_USAGE",
        "limit": "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "tpot": mean("vllm:time_per_output_token_seconds"),
        "ttft": mean("vllm:time_to_first_token_seconds"),
        "running": "vllm:num_requests_running",
        "kv": "vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc",
        "cores": 'kube_node_status_allocatable{resource="cpu"}',
    }


def read_frames(range_query: RangeFn, *, start: float, end: float, step: float) -> list[Frame]:
    """Every step's frame from `start` to `end`: a node's GPUs from DCGM (pod labels place the
    replicas), each replica's serving series by namespace and pod."""
    answers = {name: [(labels, [(t, v) for t, v in points if math.isfinite(v)])
                      for labels, points in range_query(promql, start, end, step)]
               for name, promql in queries(step).items()}
    times = sorted({t for rows in answers.values() for _, points in rows for t, _ in points})
    gpus: dict[float, dict[str, dict[int, tuple[str | None, float, str]]]] = defaultdict(lambda: defaultdict(dict))
    limits: dict[tuple[str, int], dict[float, float]] = defaultdict(dict)
    for name in ("power", "limit"):
        for labels, points in answers[name]:
            node = _node(labels)
            try:
                index = int(labels.get("gpu", ""))
            except ValueError:
                continue
            if not node:
                continue
            pod = f"{labels['namespace']}/{labels['pod']}" if labels.get("pod") and labels.get("namespace") else None
            for t, value in points:
                if name == "power":
                    gpus[t][node][index] = (pod, value, labels.get("modelName", ""))
                else:
                    limits[node, index][t] = value
    serving: dict[str, dict[str, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    served_model: dict[str, str] = {}
    for name in ("tpot", "ttft", "running", "kv"):
        for labels, points in answers[name]:
            if not (labels.get("namespace") and labels.get("pod")):
                continue
            key = f"{labels['namespace']}/{labels['pod']}"
            served_model.setdefault(key, labels.get("model_name", ""))
            serving[name][key].update(points)
    cores = {labels.get("node", ""): dict(points) for labels, points in answers["cores"]}
    frames = []
    for t in times:
        frame = {}
        for node, by_index in gpus.get(t, {}).items():
            readings = tuple(GpuReading(i, pod, watts, limits.get((node, i), {}).get(t))
                             for i, (pod, watts, _) in sorted(by_index.items()))
            replicas, exporting = [], set()
            for pod in {g.pod for g in readings if g.pod}:
                values = [serving[n][pod].get(t) for n in ("tpot", "ttft", "running", "kv")]
                if any(v is not None for v in values):
                    exporting.add(pod)
                if all(v is not None for v in values):
                    replicas.append(ReplicaReading(pod, served_model.get(pod, ""), *values))
            model = next(iter(by_index.values()))[2]
            frame[node] = NodeFrame(model, readings, tuple(sorted(replicas, key=lambda r: r.pod)),
                                    cores.get(node, {}).get(t), serving=frozenset(exporting))
        frames.append(frame)
    return frames


def _node(labels: Mapping[str, str]) -> str:
    for candidate in dcgm.NODE_LABEL_CANDIDATES:
        if labels.get(candidate):
            return labels[candidate]
    return ""
