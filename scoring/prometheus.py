"""The Prometheus adapter: the one module of `scoring` that does I/O (HTTP queries to Prometheus).

Errors, all `TelemetryError`:
    TelemetryError
    ├── PrometheusUnreachable   connection refused, DNS, TLS or timeout
    └── PrometheusQueryError    Prometheus answered, but not with a usable result
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from scoring import dcgm
from scoring.policy import BalancerPolicy, PrometheusConnection
from scoring.series import Readings, Series, build_snapshot, detect_node_label
from scoring.telemetry import ClusterSnapshot


class TelemetryError(RuntimeError):
    """Telemetry could not be read; steering must stop."""


class PrometheusUnreachable(TelemetryError):
    def __init__(self, url: str, cause: object) -> None:
        super().__init__(f"cannot reach Prometheus at {url}: {cause}")
        self.url = url


class PrometheusQueryError(TelemetryError):
    def __init__(self, url: str, query: str, cause: object) -> None:
        super().__init__(f"Prometheus at {url} rejected query {query!r}: {cause}")
        self.url = url
        self.query = query


QueryFn = Callable[[str], list[dict]]
"""Runs one instant PromQL query and returns Prometheus's `data.result` list."""

_NODE_LABELS = ", ".join(dcgm.NODE_LABEL_CANDIDATES)
_IDENTITY_BY = ", ".join((*dcgm.NODE_LABEL_CANDIDATES, *dcgm.IDENTITY_LABELS, *dcgm.WORKLOAD_LABELS))
_VALUE_BY = ", ".join((*dcgm.NODE_LABEL_CANDIDATES, "gpu", "GPU_I_ID"))
_IDENTITY_METRIC = dcgm.FB_USED
"""The one metric whose query carries every identity and workload label; the others carry only
the join key, which keeps the answer for a 40,000-GPU fleet small."""


def selector(metric: str, matchers: str, *extra: str) -> str:
    """`metric{extra..., matchers}` — the policy's series selector joined into every query."""
    parts = [*extra, matchers] if matchers else list(extra)
    return f"{metric}{{{', '.join(parts)}}}"


def snapshot_queries(matchers: str, lookback_seconds: float) -> dict[str, str]:
    """Every instant query a snapshot needs, by name. Aggregation drops labels nobody reads."""
    queries = {
        metric: f"max by ({_IDENTITY_BY if metric == _IDENTITY_METRIC else _VALUE_BY}) ({selector(metric, matchers)})"
        for metric in dcgm.GPU_METRICS
    }
    ident = selector(_IDENTITY_METRIC, matchers)
    window = f"{int(lookback_seconds)}s"
    queries["seen_recently"] = (f"count by ({_NODE_LABELS}) (count by ({_VALUE_BY}) "
                                f"(last_over_time({ident}[{window}])))")
    queries["newest_sample"] = f"max(timestamp({ident}))"
    requests_sel = selector("kube_pod_container_resource_requests", matchers,
                            'resource="nvidia_com_gpu"', 'node!=""')
    phase_sel = selector("kube_pod_status_phase", matchers, 'phase=~"Pending|Running"')
    queries["ksm_allocated"] = (f"sum by (node) ({requests_sel} * on (namespace, pod) group_left () "
                                f"max by (namespace, pod) ({phase_sel}))")
    allocatable_sel = selector("kube_node_status_allocatable", matchers, 'resource="nvidia_com_gpu"')
    queries["ksm_allocatable"] = f"max by (node) ({allocatable_sel})"
    return queries


def connect(connection: PrometheusConnection) -> QueryFn:
    """A `QueryFn` over HTTP(S) with the connection's auth, CA, headers and timeout; no retries,
    because the next refresh is the retry."""
    session = requests.Session()
    session.verify = connection.ca_file or not connection.insecure_skip_verify
    auth = None
    if connection.basic_auth.username:
        password = Path(connection.basic_auth.password_file).read_text().strip()
        auth = (connection.basic_auth.username, password)
    client = PrometheusConnect(url=connection.url.rstrip("/"), session=session, auth=auth,
                               retry=Retry(total=0), timeout=connection.timeout_seconds)

    def query(promql: str) -> list[dict]:
        headers = dict(connection.headers)
        if connection.bearer_token_file:
            # Re-read every time: projected service-account tokens rotate.
            headers["Authorization"] = "Bearer " + Path(connection.bearer_token_file).read_text().strip()
        client.headers = headers
        try:
            return client.custom_query(promql)
        except PrometheusApiClientException as error:
            raise PrometheusQueryError(connection.url, promql, error) from None
        except requests.RequestException as error:
            raise PrometheusUnreachable(connection.url, _short(error)) from None
        except ValueError as error:  # a body that is not JSON: not Prometheus at that URL
            raise PrometheusQueryError(connection.url, promql, f"answer is not JSON ({error})") from None

    return query


def _short(error: Exception) -> str:
    text = str(error)
    return text if len(text) < 200 else text[:200] + "…"


def _series(result: Sequence[dict]) -> list[Series]:
    return [Series(row["metric"], float(row["value"][1])) for row in result]


def read_snapshot(query: QueryFn, policy: BalancerPolicy, *,
                  now: Callable[[], datetime] | None = None) -> ClusterSnapshot:
    """Run the snapshot queries and build a `ClusterSnapshot`."""
    clock = now or (lambda: datetime.now(timezone.utc))
    taken_at = clock()
    queries = snapshot_queries(policy.prometheus.selector_matchers, policy.telemetry.vanish_lookback_seconds)
    # All queries at once: a refresh then costs one round trip, and a silent Prometheus one timeout.
    pool = ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix="promql")
    try:
        answers = dict(zip(queries, pool.map(query, queries.values())))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    readings: Readings = {metric: _series(answers[metric]) for metric in dcgm.GPU_METRICS}
    label = detect_node_label(readings, policy.telemetry.node_label)
    newest = answers["newest_sample"]
    return build_snapshot(
        readings,
        taken_at=taken_at,
        node_label=label or policy.telemetry.node_label,
        use_profiling_metrics=policy.telemetry.use_profiling_metrics,
        gpus_seen_recently=_per_node(answers["seen_recently"], label),
        allocatable_gpus=_per_node(answers["ksm_allocatable"], "node") or None,
        allocated_gpus=_per_node(answers["ksm_allocated"], "node") or None,
        newest_sample_at=datetime.fromtimestamp(float(newest[0]["value"][1]), tz=timezone.utc) if newest else None,
    )


def _per_node(result: Sequence[dict], label: str) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for row in result:
        node = row["metric"].get(label, "") if label else ""
        if node:
            totals[node] += int(float(row["value"][1]))
    return dict(totals)
