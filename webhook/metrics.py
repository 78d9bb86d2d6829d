"""The webhook's own Prometheus metrics, on a registry per app (no globals). No I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry
    admissions: Counter
    latency: Histogram
    snapshot_age: Gauge
    telemetry_errors: Counter
    bad_requests: Counter
    reader_restarts: Counter
    certificate_swaps: Counter
    certificate_rejections: Counter
    cluster_view: Gauge
    cluster_view_states: Counter
    without_cluster_view: Counter


def create_metrics(registry: CollectorRegistry | None = None) -> WebhookMetrics:
    registry = registry or CollectorRegistry()
    return WebhookMetrics(
        registry=registry,
        admissions=Counter("gpu_balancer_admissions_total", "Admission reviews answered, by outcome and reason.",
                           ["outcome", "reason"], registry=registry),
        latency=Histogram("gpu_balancer_admission_duration_seconds", "Time to answer one admission review.",
                          buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
                          registry=registry),
        snapshot_age=Gauge("gpu_balancer_snapshot_age_seconds",
                           "Age of the telemetry behind the current snapshot (-1: none yet).", registry=registry),
        telemetry_errors=Counter("gpu_balancer_telemetry_errors_total", "Failed telemetry refreshes.",
                                 registry=registry),
        bad_requests=Counter("gpu_balancer_bad_requests_total", "Requests that were not usable AdmissionReviews.",
                             registry=registry),
        reader_restarts=Counter("gpu_balancer_telemetry_reader_restarts_total",
                                "Telemetry reader processes replaced, by why (exited, hung).", ["reason"],
                                registry=registry),
        certificate_swaps=Counter("gpu_balancer_certificate_swaps_total",
                                  "New serving certificates taken into use.", registry=registry),
        certificate_rejections=Counter("gpu_balancer_certificate_rejections_total",
                                       "Changed certificate files not taken (pair mismatched or not valid now).",
                                       registry=registry),
        cluster_view=Gauge("gpu_balancer_cluster_view_available",
                           "1 while advice uses the cluster view (feasible nodes only), 0 on telemetry alone.",
                           registry=registry),
        cluster_view_states=Counter("gpu_balancer_cluster_view_state_changes_total",
                                    "Changes of the cluster view's API access, by the state entered "
                                    "(ok, forbidden, unreachable).", ["state"], registry=registry),
        without_cluster_view=Counter("gpu_balancer_advice_without_cluster_view_total",
                                     "Pods advised on telemetry alone: no cluster view, so feasibility unchecked.",
                                     registry=registry),
    )


class CountsCollector:
    """A labelled counter read, at each scrape, from counts another component keeps (the cluster
    view's lists by kind): no second tally to keep in step."""

    def __init__(self, name: str, documentation: str, label: str, counts: Mapping[str, int]) -> None:
        self._name, self._documentation, self._label, self._counts = name, documentation, label, counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._documentation, labels=[self._label])
        for key, value in sorted(self._counts.items()):
            family.add_metric([key], value)
        yield family


def register_cluster_view_lists(registry: CollectorRegistry, relists: Mapping[str, int]) -> None:
    registry.register(CountsCollector(
        "gpu_balancer_cluster_view_lists", "Full lists the cluster view made, by kind: the first, and one "
        "after each watch the API server expired (410 Gone).", "kind", relists))


class NodeVerdictsCollector:
    """Each node's verdict from the current telemetry, read at each scrape: what a request router
    (llm-d's endpoint picker, a Gateway) can weigh endpoints by. Label values are names and short
    fixed phrases, never figures, so the series do not churn from one refresh to the next."""

    def __init__(self, current: Callable[[], Any]) -> None:
        self._current = current

    def collect(self) -> Iterator[GaugeMetricFamily]:
        telemetry = self._current()
        tier = GaugeMetricFamily("gpu_balancer_node_tier", "Each GPU node's heat tier: 0 cool, 1 warm, 2 hot, "
                                 "3 unhealthy (README, \"For request routers\").", labels=["node"])
        avoided = GaugeMetricFamily("gpu_balancer_node_avoided", "1 for each node the advice steers new pods "
                                    "away from, with why (hot or unhealthy, and the signal's phrase).",
                                    labels=["node", "reason"])
        free = GaugeMetricFamily("gpu_balancer_node_free_gpus", "Free GPUs on each node the advice may prefer "
                                 "(cool or warm, with room).", labels=["node"])
        if telemetry is not None:
            for node, level in telemetry.tiers:
                tier.add_metric([node], level)
            for avoidance in telemetry.index.avoided:
                avoided.add_metric([avoidance.node, avoidance.reason], 1)
            for _, gpus, node in telemetry.index.ranked:
                free.add_metric([node], gpus)
        yield tier
        yield avoided
        yield free


def register_node_verdicts(registry: CollectorRegistry, current: Callable[[], Any]) -> None:
    registry.register(NodeVerdictsCollector(current))
