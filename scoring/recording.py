"""Prometheus recording rules for what every refresh and descheduler run asks, generated from the
policy so that the recorded series equal the raw queries' answers. Pure, no I/O.

Each snapshot query (`scoring.prometheus.snapshot_queries`) is recorded under
`gpu_balancer:snapshot_<name>`, and the per-node utilisation the descheduler's window reads under
`gpu_balancer:node_util` (evaluated every `descheduler.stepSeconds`, so the window counts the same
steps). The series selector, the utilisation gauge and the look-backs are baked into the rules, so
every recorded series carries `gpu_balancer_rules="<fingerprint>"`: the reader uses the recorded
path only when the fingerprint matches its own policy, and falls back to raw queries otherwise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from scoring.policy import BalancerPolicy

PREFIX = "gpu_balancer:"
FINGERPRINT_LABEL = "gpu_balancer_rules"
NODE_UTIL = f"{PREFIX}node_util"
SNAPSHOT_INTERVAL_SECONDS = 15


METRIC_LABEL = "gpu_balancer_metric"
"""A rule's output is named after the rule, so queries grouped by metric name keep it here."""


def snapshot_record(name: str) -> str:
    return f"{PREFIX}snapshot_{name}"


def keeps_metric_name(expr: str) -> bool:
    return "by (__name__" in expr


def recorded_query(name: str, expr: str, fingerprint_: str) -> str:
    """What the reader asks instead of `expr`: the recorded series, with the metric name put back."""
    series = f'{snapshot_record(name)}{{{FINGERPRINT_LABEL}="{fingerprint_}"}}'
    return f'label_replace({series}, "__name__", "$1", "{METRIC_LABEL}", "(.+)")' if keeps_metric_name(expr) else series


def _recordable(expr: str) -> str:
    return f'label_replace({expr}, "{METRIC_LABEL}", "$1", "__name__", "(.+)")' if keeps_metric_name(expr) else expr


def _queries(policy: BalancerPolicy, topology_keys: Sequence[str]) -> tuple[dict[str, str], str]:
    from scoring.prometheus import per_node_util, snapshot_queries

    telemetry = policy.telemetry
    snapshot = snapshot_queries(policy.prometheus.selector_matchers, lookback_seconds=telemetry.vanish_lookback_seconds,
                                use_profiling_metrics=telemetry.use_profiling_metrics, topology_keys=topology_keys)
    return snapshot, per_node_util(policy.prometheus.selector_matchers, telemetry.use_profiling_metrics)


def fingerprint(policy: BalancerPolicy, topology_keys: Sequence[str]) -> str:
    """A short hash of every expression the rules record, and the window's step."""
    snapshot, node_util = _queries(policy, topology_keys)
    text = "\n".join([*(f"{k}={v}" for k, v in sorted(snapshot.items())), node_util,
                      str(policy.descheduler.step_seconds)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def recording_rules(policy: BalancerPolicy, topology_keys: Sequence[str]) -> dict:
    """The rule groups (Prometheus rule-file format; a PrometheusRule's `spec` is the same)."""
    snapshot, node_util = _queries(policy, topology_keys)
    labels = {FINGERPRINT_LABEL: fingerprint(policy, topology_keys)}
    return {"groups": [
        {"name": "gpu-balancer-snapshot", "interval": f"{SNAPSHOT_INTERVAL_SECONDS}s",
         "rules": [{"record": snapshot_record(name), "expr": _recordable(expr), "labels": dict(labels)}
                   for name, expr in snapshot.items()]},
        {"name": "gpu-balancer-window", "interval": f"{int(policy.descheduler.step_seconds)}s",
         "rules": [{"record": NODE_UTIL, "expr": node_util, "labels": dict(labels)}]},
    ]}
