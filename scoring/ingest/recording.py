"""Prometheus recording rules for what every refresh and descheduler run asks, generated from the
policy so that the recorded series equal the raw queries' answers. Pure, no I/O.

Each per-node snapshot query (`scoring.ingest.queries.snapshot_queries`) is recorded under
`gpu_balancer:snapshot_<name>`; the per-unit ones are replaced by per-node records and per-unit
rows only for units that name a pod (`scoring.ingest.queries.replacement_records`), so a refresh fetches a
few rows per node instead of one per GPU. The per-node utilisation the descheduler's window reads is under
`gpu_balancer:node_util` (evaluated every `descheduler.stepSeconds`, so the window counts the same
steps). The series selector, the utilisation gauge and the look-backs are baked into the rules, so
every recorded series carries `gpu_balancer_rules="<fingerprint>"`: the reader uses the recorded
path only when the fingerprint matches its own policy, and falls back to raw queries otherwise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from scoring.ingest.queries import RECORDED_INSTEAD, per_node_util, replacement_records, snapshot_queries
from scoring.ingest.rows import selector
from scoring.policy import BalancerPolicy

PREFIX = "gpu_balancer:"
FINGERPRINT_LABEL = "gpu_balancer_rules"
NODE_UTIL = f"{PREFIX}node_util"
SNAPSHOT_GROUP = "gpu-balancer-snapshot"
"""The rule group of what every refresh reads, evaluated every `telemetry.recordingIntervalSeconds`."""
LOOKBACK = ("seen_recently", "mig_parents")
"""Recorded in a group of their own, evaluated every `telemetry.vanishCheckSeconds`: what only
the count of vanished GPUs reads (the reporting MIG parents count as reporting)."""


METRIC_LABEL = "gpu_balancer_metric"
"""A rule's output is named after the rule, so queries grouped by metric name keep it here."""


def snapshot_record(name: str) -> str:
    return f"{PREFIX}snapshot_{name}"


def keeps_metric_name(expr: str) -> bool:
    return "by (__name__" in expr


def recorded_query(name: str, expr: str, fingerprint_: str, *matchers: str, metric: str = "",
                   memory_seconds: int = 0) -> str:
    """What the reader asks instead of `expr` (empty for a record with no raw query of its own):
    the recorded series (those `matchers` select) with the labels the raw query's rows have.
    `max without` drops the rules' fingerprint and the record name for about the cost of the bare
    selection (each series is its own group), and halves the bytes Prometheus serves and the
    reader decodes. (Two `label_replace` calls cost Prometheus half as much again.) Where `expr`
    keeps the metric name, its rows are asked one `metric` at a time, and the name set back. A row
    set a signal remembers (`memory_seconds`) is read as each row's highest over that span."""
    if not keeps_metric_name(expr):
        series = record_selector(name, fingerprint_, *matchers)
        if memory_seconds:
            series = f"max_over_time({series}[{int(memory_seconds)}s])"
        return f"max without ({FINGERPRINT_LABEL}) ({series})"
    if not metric:
        raise ValueError(f"record {name!r} keeps the metric name: ask it one metric at a time")
    series = record_selector(name, fingerprint_, *matchers, f'{METRIC_LABEL}="{metric}"')
    return f'label_replace(max without ({FINGERPRINT_LABEL}, {METRIC_LABEL}) ({series}), "__name__", "{metric}", "", "")'


def _recordable(expr: str) -> str:
    return f'label_replace({expr}, "{METRIC_LABEL}", "$1", "__name__", "(.+)")' if keeps_metric_name(expr) else expr


def node_util_selector(fingerprint_: str) -> str:
    """The recorded per-node utilisation of the rules with this fingerprint: the descheduler's window."""
    return f'{NODE_UTIL}{{{FINGERPRINT_LABEL}="{fingerprint_}"}}'


def record_selector(name: str, fingerprint_: str, *matchers: str) -> str:
    """One snapshot record's series of the rules with this fingerprint."""
    return selector(snapshot_record(name), "", f'{FINGERPRINT_LABEL}="{fingerprint_}"', *matchers)


def _queries(policy: BalancerPolicy, topology_keys: Sequence[str], fingerprint_: str = ""
             ) -> tuple[dict[str, str], str]:
    """What the snapshot and look-back groups record, in evaluation order (the replacement records
    first: later ones read earlier ones), and the window's per-node utilisation."""
    telemetry, matchers = policy.telemetry, policy.prometheus.selector_matchers
    snapshot = snapshot_queries(matchers, lookback_seconds=telemetry.vanish_lookback_seconds,
                                busy=telemetry.busy, topology_keys=topology_keys, heat=policy.heat)
    replacements = replacement_records(matchers, busy=telemetry.busy,
                                       recorded=lambda name, *extra: record_selector(name, fingerprint_, *extra))
    per_node = {name: expr for name, expr in snapshot.items() if name not in RECORDED_INSTEAD}
    return replacements | per_node, per_node_util(matchers, telemetry.busy)


def fingerprint(policy: BalancerPolicy, topology_keys: Sequence[str]) -> str:
    """A short hash of every expression the rules record (the fingerprint itself left blank), and
    the window's step."""
    snapshot, node_util = _queries(policy, topology_keys)
    text = "\n".join([*(f"{k}={v}" for k, v in snapshot.items()), node_util, str(policy.descheduler.step_seconds)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def recording_rules(policy: BalancerPolicy, topology_keys: Sequence[str]) -> dict:
    """The rule groups (Prometheus rule-file format; a PrometheusRule's `spec` is the same)."""
    ours = fingerprint(policy, topology_keys)
    snapshot, node_util = _queries(policy, topology_keys, ours)
    labels = {FINGERPRINT_LABEL: ours}

    def rules(names: Sequence[str]) -> list[dict]:
        return [{"record": snapshot_record(name), "expr": _recordable(snapshot[name]), "labels": dict(labels)}
                for name in names]

    return {"groups": [
        {"name": SNAPSHOT_GROUP, "interval": f"{int(policy.telemetry.recording_interval)}s",
         "rules": rules([name for name in snapshot if name not in LOOKBACK])},
        # The look-back scans ten minutes of every GPU's samples, the dearest rule by far; readers
        # use it only once a vanish check.
        {"name": "gpu-balancer-lookback", "interval": f"{int(policy.telemetry.vanish_check_seconds)}s",
         "rules": rules(LOOKBACK)},
        {"name": "gpu-balancer-window", "interval": f"{int(policy.descheduler.step_seconds)}s",
         "rules": [{"record": NODE_UTIL, "expr": node_util, "labels": dict(labels)}]},
    ]}
