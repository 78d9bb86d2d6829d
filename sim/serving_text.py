"""Render model-server replicas as exposition text shaped like vLLM's, SGLang's, TGI's and Triton's. Pure, no I/O.

Counters and histograms are cumulative: the text for `elapsed_seconds` holds what a server would
have counted since it started, at a steady request rate with exponentially distributed latency
of the replica's mean. Prometheus's `rate` over any window then sees that rate and distribution.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from scoring.policy import DEFAULT_SERVERS
from sim.llm.state import ServingState

SERVERS = tuple(server.name for server in DEFAULT_SERVERS)
"""The servers the policy knows, each rendered here as it writes its metrics."""

VLLM_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
"""vLLM's time-to-first-token buckets (seconds)."""
VLLM_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                     40.0, 80.0)
"""vLLM's time-per-output-token buckets (seconds)."""
SGLANG_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
TGI_BUCKETS = tuple(round(0.001 * 1.5 ** i, 6) for i in range(35))
"""TGI's request-duration buckets: exponential from 1 ms, factor 1.5."""


@dataclass(frozen=True, slots=True)
class ServedReplica:
    namespace: str
    pod: str
    server: str
    """vllm, sglang, tgi or triton."""
    queue: float
    mean_latency_seconds: float
    requests_per_second: float = 5.0
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    node: str = ""
    """When set, the series carry a `node` label, as a PodMonitor relabelling the pod's node writes it."""
    kv_usage: float | None = None
    """The KV cache's used share, 0–1 (vLLM, SGLang); rendered only when set."""
    running: float | None = None
    """Requests in the running batch (vLLM, SGLang, TGI); rendered only when set."""
    tpot_mean_seconds: float | None = None
    """Mean time per output token (vLLM's histogram, exponential around it); rendered only when set."""


def _labels(replica: ServedReplica, own: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    target = [("namespace", replica.namespace), ("pod", replica.pod)]
    return [*own, *target, *((("node", replica.node),) if replica.node else ())]


def _text(labels: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels)


OwnLabels = Callable[[ServedReplica], list[tuple[str, str]]]
"""The labels a server itself puts on its series (model name, engine, version)."""

_OWN: dict[str, OwnLabels] = {
    "vllm": lambda r: [("engine", "0"), ("model_name", r.model)],
    "sglang": lambda r: [("model_name", r.model)],
    "tgi": lambda r: [],
    "triton": lambda r: [("model", r.model.rsplit("/", 1)[-1]), ("version", "1")],
}


_HISTOGRAM_SERVERS = (
    ("vllm", "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
     "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", VLLM_BUCKETS),
    ("sglang", "sglang:num_queue_reqs", "The number of requests in the waiting queue",
     "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", SGLANG_BUCKETS),
    ("tgi", "tgi_queue_size", "Current queue size",
     "tgi_request_duration", "Total time spent processing the request (e2e latency)", TGI_BUCKETS),
)
"""(server, queue gauge and its help, latency histogram and its help, its buckets), as each writes them."""

_LOAD_GAUGES = (
    ("vllm", "kv_usage", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
    ("vllm", "running", "vllm:num_requests_running", "Number of requests in model execution batches."),
    ("sglang", "kv_usage", "sglang:token_usage", "The token usage"),
    ("sglang", "running", "sglang:num_running_reqs", "The number of running requests"),
    ("tgi", "running", "tgi_batch_current_size", "Current batch size"),
)
"""(server, figure, gauge, its help): the load gauges as vLLM v1, SGLang and TGI write them."""


def _histogram(name: str, help_text: str, buckets: Sequence[float], replicas: Sequence[ServedReplica],
               own: OwnLabels, elapsed: float, mean: Callable[[ServedReplica], float] | None = None) -> list[str]:
    """An exponential distribution around each replica's `mean` (its mean latency unless given)."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for replica in replicas:
        labels = _labels(replica, own(replica))
        count = replica.requests_per_second * elapsed
        average = mean(replica) if mean else replica.mean_latency_seconds
        for le in buckets:
            share = 1 - math.exp(-le / average)
            lines.append(f'{name}_bucket{{{_text([("le", repr(float(le))), *labels])}}} {count * share!r}')
        lines.append(f'{name}_bucket{{{_text([("le", "+Inf"), *labels])}}} {count!r}')
        lines.append(f"{name}_count{{{_text(labels)}}} {count!r}")
        lines.append(f"{name}_sum{{{_text(labels)}}} {count * average!r}")
    return lines


def _gauge(name: str, help_text: str, kind: str, rows: Iterable[tuple[list[tuple[str, str]], float]]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
            *(f"{name}{{{_text(labels)}}} {value!r}" for labels, value in rows)]


def render_serving(replicas: Sequence[ServedReplica], elapsed_seconds: float) -> str:
    """One text for all replicas, each family once with its `# HELP` and `# TYPE`."""
    by_server = {name: [r for r in replicas if r.server == name] for name in SERVERS}
    elapsed = max(elapsed_seconds, 0.0)
    lines: list[str] = []
    for server, queue, queue_help, histogram, histogram_help, buckets in _HISTOGRAM_SERVERS:
        if served := by_server[server]:
            own = _OWN[server]
            lines += _gauge(queue, queue_help, "gauge", ((_labels(r, own(r)), float(r.queue)) for r in served))
            lines += _histogram(histogram, histogram_help, buckets, served, own, elapsed)
            for gauge_server, figure, name, help_text in _LOAD_GAUGES:
                rows = [(_labels(r, own(r)), float(getattr(r, figure))) for r in served
                        if gauge_server == server and getattr(r, figure) is not None]
                if rows:
                    lines += _gauge(name, help_text, "gauge", rows)
            if server == "vllm" and (timed := [r for r in served if r.tpot_mean_seconds]):
                lines += _histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in "
                                    "seconds.", VLLM_TPOT_BUCKETS, timed, own, elapsed,
                                    mean=lambda r: r.tpot_mean_seconds)
    if triton := by_server["triton"]:
        own = _OWN["triton"]
        lines += _gauge("nv_inference_request_success", "Number of successful inference requests, all batch sizes",
                        "counter", ((_labels(r, own(r)), r.requests_per_second * elapsed) for r in triton))
        lines += _gauge("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds "
                        "(includes cached requests)", "counter",
                        ((_labels(r, own(r)), r.requests_per_second * elapsed * r.mean_latency_seconds * 1e6)
                         for r in triton))
        lines += _gauge("nv_inference_pending_request_count", "Instantaneous number of pending requests awaiting "
                        "execution per-model.", "gauge", ((_labels(r, own(r)), float(r.queue)) for r in triton))
    return "\n".join(lines) + "\n"


def pod_info(replicas: Sequence[ServedReplica], node_of: dict[str, str]) -> str:
    """kube-state-metrics' `kube_pod_info` for the replicas in `node_of` (pod → node)."""
    rows = [([("namespace", r.namespace), ("pod", r.pod), ("node", node_of[r.pod]), ("created_by_kind", "ReplicaSet")],
             1.0) for r in replicas if r.pod in node_of]
    return "\n".join(_gauge("kube_pod_info", "Information about pod.", "gauge", rows)) + "\n"



def synthetic_replicas(node_names: Sequence[str], *, replicas: int, server: str, slow: int, seed: int
                       ) -> list[ServedReplica]:
    """`replicas` pods of one workload spread round-robin over the nodes, the first `slow` of them
    queueing (mean latency 2 s, 30 waiting) and the rest answering in 0.1–0.3 s."""
    if server not in SERVERS:
        raise ValueError(f"unknown server {server!r}; choose one of {', '.join(SERVERS)}")
    rng = random.Random(seed)
    out = []
    for i in range(replicas):
        queueing = i < slow
        out.append(ServedReplica("inference", f"{server}-5d4f8b-{i:05d}", server, queue=30.0 if queueing else 1.0,
                                 mean_latency_seconds=2.0 if queueing else rng.uniform(0.1, 0.3),
                                 node=node_names[i % len(node_names)]))
    return out


def served_from_world(observed: dict[str, ServingState]) -> list[ServedReplica]:
    """A simulator tick's replicas (`World.serving`) as vLLM replicas: the exponential TTFT whose
    p95 that is (mean = p95 / ln 20), and the batch and KV cache where the world reports them."""
    return [ServedReplica(key.split("/", 1)[0], key.split("/", 1)[1], "vllm", queue=state.waiting,
                          mean_latency_seconds=state.ttft_p95_s / math.log(20), node=state.node,
                          kv_usage=state.kv_usage, running=state.running, tpot_mean_seconds=state.tpot_mean_s)
            for key, state in sorted(observed.items())]
