"""The serving signal: model servers' own queue depth and latency per replica, judged against targets. Pure, no I/O.

Each supported server (vLLM, SGLang, TGI, Triton) is described by the metric names it exports
(`ServingServer`); the queries here read, per serving pod, its queue depth now and a latency figure
over a short window, and find each pod's node from the series' own node label or, failing that,
kube-state-metrics' `kube_pod_info`. `replicas_from_rows` turns the answers into `ServingReplica`s
(`scoring.ingest.telemetry`) carrying the target that applies to them, which is all the heat model
and the descheduler need.
"""

from __future__ import annotations

import math
from statistics import median
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from scoring.ingest.rows import Series, selector
from scoring.ingest.series import ksm_label_name
from scoring.ingest.telemetry import ClusterSnapshot, ServingReplica, pressure_of
from scoring.policy import ServingPolicy, ServingServer, ServingTarget

NODE_LABELS = ("node", "kubernetes_node", "nodename")
"""Where a serving series may carry its pod's node (a PodMonitor relabelling
`__meta_kubernetes_pod_node_name`). Not `hostname`: on a pod's own series that is the pod."""

JOINS = ("pod_node", "pod_workload")
"""The row sets that join serving pods to nodes and workloads through kube-state-metrics."""

FIGURES = ("queue", "latency", "kv", "running")
"""The row sets of each server's own figures (`<figure>:<server>`)."""

_POD = "namespace, pod"
_BY_POD = f"{_POD}, {', '.join(NODE_LABELS)}"


def latency_label(server: ServingServer, quantile: float) -> str:
    if server.latency_histogram:
        return f"{server.latency_name} p{quantile * 100:g}"
    return f"mean {server.latency_name}"


def latency_expression(server: ServingServer, matchers: str, *, quantile: float, window_seconds: float) -> str:
    """Per pod: the latency quantile from the server's histogram over the window, or the mean from
    its sum and count counters (Triton exports no latency histogram by default)."""
    window = f"[{int(window_seconds)}s]"
    if server.latency_histogram:
        buckets = selector(server.latency_histogram + "_bucket", matchers)
        return f"histogram_quantile({quantile:g}, sum by (le, {_BY_POD}) (rate({buckets}{window})))"
    total = f"sum by ({_BY_POD}) (rate({selector(server.latency_sum_counter, matchers)}{window}))"
    count = f"sum by ({_BY_POD}) (rate({selector(server.latency_count_counter, matchers)}{window}))"
    scale = f" * {server.latency_unit_seconds:g}" if server.latency_unit_seconds != 1 else ""
    return f"({total} / {count}){scale}"


def gauge_expression(metric: str, matchers: str) -> str:
    """Per pod, a gauge's value now (the largest where a pod exports it more than once)."""
    return f"max by ({_BY_POD}) ({selector(metric, matchers)})"


def _any_serving_series(policy: ServingPolicy, matchers: str) -> str:
    names = "|".join(s.queue_metric for s in policy.servers if s.queue_metric)
    return selector("", matchers, f'__name__=~"{names}"')


def serving_queries(policy: ServingPolicy, matchers: str, workload_label: str) -> dict[str, str]:
    """Every instant query the signal needs, by row-set name: `queue:<server>`, `latency:<server>`,
    and the joins to node (`pod_node`) and workload label (`pod_workload`)."""
    queries: dict[str, str] = {}
    for server in policy.servers:
        for kind, metric in (("queue", server.queue_metric), ("kv", server.kv_usage_metric),
                             ("running", server.running_metric)):
            if metric:
                queries[f"{kind}:{server.name}"] = gauge_expression(metric, matchers)
        if server.latency_histogram or server.latency_sum_counter:
            queries[f"latency:{server.name}"] = latency_expression(
                server, matchers, quantile=policy.quantile, window_seconds=policy.window_seconds)
    serving = _any_serving_series(policy, matchers)
    info = selector("kube_pod_info", matchers, 'node!=""')
    queries["pod_node"] = f"max by ({_POD}, node) ({info} and on ({_POD}) {serving})"
    workload = ksm_label_name(workload_label)
    labels = selector("kube_pod_labels", matchers, f'{workload}!=""')
    queries["pod_workload"] = f"max by ({_POD}, {workload}) ({labels} and on ({_POD}) {serving})"
    return queries


def target_for(policy: ServingPolicy, *, server: str, namespace: str, workload: str) -> ServingTarget:
    """The first target whose server, namespace and workload (each when set) all match, else the default."""
    for target in policy.targets:
        if ((not target.server or target.server == server) and (not target.namespace or target.namespace == namespace)
                and (not target.workload or target.workload == workload)):
            return target
    return policy.default_target


def _pod_key(row: Series) -> tuple[str, str] | None:
    namespace, pod = row.labels.get("namespace", ""), row.labels.get("pod", "")
    return (namespace, pod) if namespace and pod else None


def _node_of(row: Series) -> str:
    return next((row.labels[label] for label in NODE_LABELS if row.labels.get(label)), "")


def replicas_from_rows(rows: Mapping[str, Sequence[Series]], policy: ServingPolicy,
                       workload_label: str) -> dict[str, tuple[ServingReplica, ...]]:
    """Node → its serving replicas, worst first. A pod whose node nothing names is left out (it
    cannot be weighed against any node); NaN figures (no traffic in the window) are unknown."""
    nodes: dict[tuple[str, str], str] = {}
    for row in rows.get("pod_node", ()):
        if (key := _pod_key(row)) and row.labels.get("node"):
            nodes[key] = row.labels["node"]
    workload_name = ksm_label_name(workload_label)
    sanitised = workload_name.removeprefix("label_")
    workloads = {key: row.labels[workload_name] for row in rows.get("pod_workload", ())
                 if (key := _pod_key(row)) and row.labels.get(workload_name)}
    figures: dict[tuple[str, str, str], dict[str, float]] = {}
    for server in policy.servers:
        for kind in FIGURES:
            for row in rows.get(f"{kind}:{server.name}", ()):
                if (key := _pod_key(row)) is None or math.isnan(row.value) or math.isinf(row.value):
                    continue
                if node := _node_of(row):
                    nodes.setdefault(key, node)
                if row.labels.get(sanitised):
                    workloads.setdefault(key, row.labels[sanitised])
                entry = figures.setdefault((*key, server.name), {})
                entry[kind] = max(entry.get(kind, row.value), row.value)
    by_server = {server.name: server for server in policy.servers}
    per_node: dict[str, list[ServingReplica]] = {}
    for (namespace, pod, name), values in figures.items():
        node = nodes.get((namespace, pod))
        if not node:
            continue
        workload = workloads.get((namespace, pod), "")
        target = target_for(policy, server=name, namespace=namespace, workload=workload)
        per_node.setdefault(node, []).append(ServingReplica(
            namespace, pod, name, values.get("queue"), values.get("latency"),
            latency_label(by_server[name], policy.quantile), target, workload or workload_of_pod(pod),
            kv_usage=values.get("kv"), running=values.get("running")))
    return with_peers(per_node)


def queueing_workloads(snapshot: ClusterSnapshot) -> frozenset[tuple[str, str]]:
    """(namespace, workload) of every service whose replicas' median pressure is over their target
    (`ServingReplica.pressure` ≥ 1: waiting requests or latency past it): most of its replicas
    queue, so a new one serves requests that wait now."""
    groups: dict[tuple[str, str], list[float]] = {}
    for node in snapshot.nodes:
        for replica in node.serving:
            groups.setdefault((replica.namespace, replica.workload), []).append(replica.pressure)
    return frozenset(key for key, pressures in groups.items() if median(pressures) >= 1)


def workload_of_pod(pod: str) -> str:
    """A Deployment's pods are named <deployment>-<ReplicaSet hash>-<suffix>: the name less both."""
    parts = pod.rsplit("-", 2)
    return parts[0] if len(parts) == 3 else pod


def with_peers(per_node: Mapping[str, Sequence[ServingReplica]]) -> dict[str, tuple[ServingReplica, ...]]:
    """Each replica with its workload's other replicas' median pressure (those on other nodes),
    each node's replicas worst first."""
    groups: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for node, replicas in per_node.items():
        for r in replicas:
            groups.setdefault((r.namespace, r.server, r.workload), []).append((node, r.pressure))
    out = {}
    for node, replicas in per_node.items():
        placed = []
        for r in replicas:
            others = sorted(p for n, p in groups[r.namespace, r.server, r.workload] if n != node)
            peer = others[len(others) // 2] if others else None
            placed.append(replace(r, peer_pressure=peer))
        out[node] = tuple(sorted(placed, key=lambda r: (-r.pressure, r.namespace, r.pod)))
    return out


def with_serving(snapshot: ClusterSnapshot, per_node: Mapping[str, tuple[ServingReplica, ...]]) -> ClusterSnapshot:
    """The snapshot with each node's serving replicas attached (nodes DCGM does not report are
    judged unhealthy already; their replicas add nothing)."""
    if not per_node:
        return snapshot
    return replace(snapshot, nodes=tuple(replace(node, serving=per_node[node.name]) if node.name in per_node else node
                                         for node in snapshot.nodes))


def targets_of(snapshot: ClusterSnapshot) -> dict[tuple[str, str], ServingTarget]:
    """(namespace, pod) → target, for every serving replica the snapshot shows."""
    return {(r.namespace, r.pod): r.target for node in snapshot.nodes for r in node.serving}


# --- the descheduler's window ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SustainedServing:
    """One replica's serving figures over the descheduler window, as a share of its target."""

    pressure_low: float
    """The window's low quantile of latency (or queue) over target: ≥ 1 means it stayed over."""
    coverage: float
    """Share of the window's steps with a latency figure, 0–1."""


def serving_window_queries(policy: ServingPolicy, matchers: str, *, window_seconds: float, step_seconds: float,
                           quantile: float) -> dict[str, str]:
    """Per pod and server over the descheduler window: the low quantile of the latency figure
    and of the queue, and how many steps had a latency figure."""
    span = f"[{int(window_seconds)}s:{int(step_seconds)}s]"
    queries: dict[str, str] = {}
    for server in policy.servers:
        if server.latency_histogram or server.latency_sum_counter:
            # `>= 0` drops the steps without traffic (NaN), which would otherwise count as samples.
            latency = latency_expression(server, matchers, quantile=policy.quantile,
                                         window_seconds=policy.window_seconds) + " >= 0"
            queries[f"latency:{server.name}"] = f"quantile_over_time({quantile:g}, ({latency}){span})"
            queries[f"samples:{server.name}"] = f"count_over_time(({latency}){span})"
        if server.queue_metric:
            queue = gauge_expression(server.queue_metric, matchers)
            queries[f"queue:{server.name}"] = f"quantile_over_time({quantile:g}, ({queue}){span})"
    return queries


def sustained_from_rows(rows: Mapping[str, Sequence[Series]], policy: ServingPolicy, *, steps: float,
                        targets: Mapping[tuple[str, str], ServingTarget]) -> dict[tuple[str, str], SustainedServing]:
    """(namespace, pod) → its window figures, for the pods in `targets` (those the snapshot shows)."""
    found: dict[tuple[str, str], dict[str, float]] = {}
    for server in policy.servers:
        for kind in ("latency", "samples", "queue"):
            for row in rows.get(f"{kind}:{server.name}", ()):
                key = _pod_key(row)
                if key in targets and not math.isnan(row.value):
                    entry = found.setdefault(key, {})
                    entry[kind] = max(entry.get(kind, row.value), row.value)
    out = {}
    for key, values in found.items():
        # A queue gauge has a sample at every step; only latency figures can be missing.
        coverage = min(1.0, values["samples"] / steps) if "samples" in values else (1.0 if "queue" in values else 0.0)
        out[key] = SustainedServing(pressure_of(values.get("latency"), values.get("queue"), targets[key]), coverage)
    return out
