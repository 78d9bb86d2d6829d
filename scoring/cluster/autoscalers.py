"""How hard each HorizontalPodAutoscaler's workload is pushed: its metrics now over their targets. Pure, no I/O.

An HPA (`autoscaling/v2`) writes what it measured at each sync into `status.currentMetrics`, beside
the targets in `spec.metrics`. The moment it adds replicas, that status says by how much load has
outrun the target, where the serving series reach the webhook only a scrape and a recording rule
later. A metric's ratio is its current figure over its target of the same kind (utilisation,
average value or value); the HPA scales on the highest, and so does this.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from scoring.cluster.objects import as_dict, as_list
from scoring.cluster.workloads import BadQuantity, parse_quantity

SOURCES = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
           "Object": "object", "External": "external"}
"""Each metric type and the field that holds its source, in spec and status alike."""

TARGET_FIGURES = {"Utilization": "averageUtilization", "AverageValue": "averageValue", "Value": "value"}
"""A target's type and the figure it sets (the current figure has the same name)."""


def _identity(kind: str, source: Mapping[str, Any]) -> tuple[str, ...]:
    """What tells one metric of a type from another: its resource (and container), or its
    metric's name (and the object it is read from)."""
    if kind in ("Resource", "ContainerResource"):
        return str(source.get("name", "")), str(source.get("container", ""))
    described = as_dict(source.get("describedObject"))
    return (str(as_dict(source.get("metric")).get("name", "")), str(described.get("kind", "")),
            str(described.get("name", "")))


def _figure(values: Mapping[str, Any], name: str) -> Decimal | None:
    try:
        return parse_quantity(values[name]) if name in values else None
    except BadQuantity:
        return None


def load_ratio(hpa: Mapping[str, Any]) -> float | None:
    """The highest of the HPA's metrics over its target, from its last sync; None where no metric
    has both a target and a reading (a new HPA, a metric that cannot be fetched)."""
    spec, status = as_dict(hpa.get("spec")), as_dict(hpa.get("status"))
    current: dict[tuple[str, tuple[str, ...]], Mapping[str, Any]] = {}
    for reading in as_list(status.get("currentMetrics")):
        kind = str(as_dict(reading).get("type", ""))
        if (field := SOURCES.get(kind)) is not None:
            source = as_dict(as_dict(reading).get(field))
            current[kind, _identity(kind, source)] = as_dict(source.get("current"))
    ratios = []
    for metric in as_list(spec.get("metrics")):
        kind = str(as_dict(metric).get("type", ""))
        if (field := SOURCES.get(kind)) is None:
            continue
        source = as_dict(as_dict(metric).get(field))
        target = as_dict(source.get("target"))
        name = TARGET_FIGURES.get(str(target.get("type", "")))
        reading = current.get((kind, _identity(kind, source)))
        if name is None or reading is None:
            continue
        wanted, now = _figure(target, name), _figure(reading, name)
        if wanted is not None and now is not None and wanted > 0:
            ratios.append(float(now / wanted))
    return max(ratios) if ratios else None


def scaled_workload(hpa: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the workload the HPA scales (a Deployment, StatefulSet or any scalable
    kind: the pods' workload name is the same)."""
    namespace = as_dict(hpa.get("metadata")).get("namespace")
    name = as_dict(as_dict(hpa.get("spec")).get("scaleTargetRef")).get("name")
    if isinstance(namespace, str) and isinstance(name, str) and name:
        return namespace, name
    return None
