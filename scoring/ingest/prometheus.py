"""The Prometheus adapter: the one module of `scoring` that does I/O (HTTP queries to Prometheus);
the queries it sends are built in `scoring.ingest.queries`.

Errors, all `TelemetryError`:
    TelemetryError
    ├── PrometheusUnreachable   connection refused, DNS, TLS or timeout
    └── PrometheusQueryError    Prometheus answered, but not with a usable result
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import copy
import gc
import threading
import time
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import orjson
import requests
from prometheus_api_client import PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from scoring.errors import TelemetryError
from scoring.ingest import recording, serving
from scoring.ingest.signals import registry as signals
from scoring.ingest.signals.base import remembered
from scoring.ingest.queries import (RECORDED_INSTEAD, REPLACEMENT_ROWS, snapshot_queries, throttle_window_queries,
                                    topology_keys, window_queries)
from scoring.ingest.series import SUMMED, Series, build_snapshot, detect_node_label
from scoring.ingest.telemetry import ClusterSnapshot, WindowStats
from scoring.policy import BalancerPolicy, PrometheusConnection


class PrometheusUnreachable(TelemetryError):
    def __init__(self, url: str, cause: object) -> None:
        super().__init__(f"cannot reach Prometheus at {url}: {root_cause(cause)[:200]}")
        self.url = url


def root_cause(error: object) -> str:
    """The innermost reason of a connection failure ("Connection refused", "Name or service not
    known", a TLS verification failure), not the HTTP library's wrapping of it."""
    seen = error
    while isinstance(seen, BaseException):
        inner = seen.__cause__ or seen.__context__ or next(
            (a for a in getattr(seen, "args", ()) if isinstance(a, BaseException)), None)
        reason = getattr(seen, "reason", None)
        if inner is None and isinstance(reason, BaseException):
            inner = reason
        if inner is None:
            break
        seen = inner
    text = getattr(seen, "strerror", None) or str(seen)
    # urllib3 wraps the OS error's text as "<...>: Failed to establish a new connection: [Errno 111] ..."
    return text.rsplit("] ", 1)[-1] if "[Errno" in text else text


class PrometheusQueryError(TelemetryError):
    def __init__(self, url: str, query: str, cause: object) -> None:
        super().__init__(f"Prometheus at {url} rejected query {query!r}: {cause}")
        self.url = url
        self.query = query


PARALLEL_QUERIES = 16
"""The most queries a refresh has in flight at once."""

QueryFn = Callable[[str], list[dict]]
"""Runs one instant PromQL query and returns Prometheus's `data.result` list."""

def connect(connection: PrometheusConnection) -> PrometheusClient:
    """A `QueryFn` over HTTP(S) with the connection's auth, CA, headers and timeout; no retries,
    because the next refresh is the retry."""
    return PrometheusClient(connection)


class PrometheusClient:
    """Instant queries to one Prometheus: called, the answer's rows (a `QueryFn`); `series()`, the
    rows as lean `Series`. Does I/O."""

    def __init__(self, connection: PrometheusConnection) -> None:
        self._connection = connection
        self._session = requests.Session()
        self._session.verify = connection.ca_file or not connection.insecure_skip_verify
        self._auth = None
        if connection.basic_auth.username:
            password = Path(connection.basic_auth.password_file).read_text().strip()
            self._auth = (connection.basic_auth.username, password)
        # The client sets the session up (no retries mounted); the query itself is ours, so that the
        # answer is decoded by orjson: at 40,000 rows the standard decoder cost more than Prometheus.
        client = PrometheusConnect(url=connection.url.rstrip("/"), session=self._session, auth=self._auth,
                                   retry=Retry(total=0), timeout=connection.timeout_seconds)
        # One kept connection per query of a refresh in flight (the default keeps 10, and reopens the rest).
        self._session.mount(client.url, HTTPAdapter(max_retries=Retry(total=0), pool_maxsize=PARALLEL_QUERIES))
        self._endpoint = f"{client.url}/api/v1/query"
        self._range_endpoint = f"{client.url}/api/v1/query_range"
        self._decoding = threading.Lock()
        self._time: float | None = None

    def at(self, timestamp: float) -> PrometheusClient:
        """This client (its connection shared), its queries evaluated at `timestamp` (seconds since
        the epoch) instead of now: the API's `time` parameter, which every Prometheus-compatible
        backend takes."""
        pinned = copy.copy(self)
        pinned._time = timestamp
        return pinned

    def __call__(self, promql: str) -> list[dict]:
        return _result(self._connection.url, promql, self._body(promql))

    def series(self, promql: str) -> list[Series]:
        """The answer as `Series`. Answers arrive in parallel, but are decoded one at a time: a
        decoded answer is several times its lean rows, and at 15,000 nodes a refresh's answers
        decoded side by side were most of the reader's peak memory. (Decoding holds the GIL
        anyway, so nothing is lost.)"""
        body = self._body(promql)
        with self._decoding:
            return _series(_result(self._connection.url, promql, body))

    def range(self, promql: str, start: float, end: float, step: float
              ) -> list[tuple[Mapping[str, str], list[tuple[float, float]]]]:
        """A range query (`/api/v1/query_range`): each series' labels and its (time, value) points."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        rows = _result(self._connection.url, promql, self._get(self._range_endpoint, params, promql))
        try:
            return [(row["metric"], [(float(t), float(v)) for t, v in row["values"]]) for row in rows]
        except (KeyError, TypeError, ValueError) as error:
            raise PrometheusQueryError(self._connection.url, promql, f"not a range answer ({error!r})") from None

    def _body(self, promql: str) -> bytes:
        params = {"query": promql} if self._time is None else {"query": promql, "time": f"{self._time:.3f}"}
        return self._get(self._endpoint, params, promql)

    def _get(self, endpoint: str, params: Mapping[str, str], promql: str) -> bytes:
        connection = self._connection
        headers = dict(connection.headers)
        if connection.bearer_token_file:
            # Re-read every time: projected service-account tokens rotate.
            headers["Authorization"] = "Bearer " + Path(connection.bearer_token_file).read_text().strip()
        try:
            response = self._session.get(endpoint, params=params, headers=headers, auth=self._auth,
                                         timeout=connection.timeout_seconds)
        except requests.RequestException as error:
            raise PrometheusUnreachable(connection.url, error) from None
        if response.status_code != 200:
            raise PrometheusQueryError(connection.url, promql,
                                       f"HTTP Status Code {response.status_code} ({response.content[:500]!r})")
        return response.content


def _result(url: str, promql: str, body: bytes) -> list[dict]:
    """`data.result` of a query answer; a body that is not one means it was not Prometheus that answered."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise PrometheusQueryError(url, promql, f"answer is not JSON ({error})") from None
    data = answer.get("data") if isinstance(answer, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise PrometheusQueryError(url, promql, f"answer has no data.result list: {body[:200]!r}")
    return result


def _series(result: Sequence[dict]) -> list[Series]:
    """The rows as `Series`, each repeated label value held once (a fleet repeats its namespaces,
    containers and GPU indices row after row). A row of one or two labels (a node's record) is
    kept as decoded: its values differ from row to row, and holding them cost more than it saved."""
    held: dict[str, str] = {}
    hold = held.setdefault
    rows = []
    for row in result:
        labels = row["metric"]
        if len(labels) > 2:
            labels = {key: hold(value, value) for key, value in labels.items()}
        rows.append(Series(labels, float(row["value"][1])))
    return rows


Fetch = Callable[[str], list[Series]]
"""Runs one instant PromQL query and returns its rows as `Series`."""


def _as_series(query: QueryFn) -> Fetch:
    return query.series if isinstance(query, PrometheusClient) else lambda promql: _series(query(promql))


def _evaluated_at(query: QueryFn, timestamp: float | None) -> QueryFn:
    """`query` asking as of `timestamp` where it is a Prometheus client; any other `QueryFn` (a
    test's, the simulator's) answers from data of its own and is asked as it is."""
    return query.at(timestamp) if timestamp is not None and isinstance(query, PrometheusClient) else query


def run_queries(query: QueryFn, queries: dict[str, str]) -> dict[str, list[Series]]:
    """Each named instant query's rows, one after another."""
    fetch = _as_series(query)
    return {name: fetch(promql) for name, promql in queries.items()}



def read_snapshot(query: QueryFn, policy: BalancerPolicy, *,
                  now: Callable[[], datetime] | None = None, raw: bool = False) -> ClusterSnapshot:
    """Run the snapshot queries (recorded ones where Prometheus has this policy's recording
    rules, unless `raw`) and build a `ClusterSnapshot`."""
    recorded = None if raw else recorded_fingerprint(query, policy)
    evaluated_at = recorded_at(query, recorded) if recorded else None
    return _read(query, policy, now=now, seen_recently=None, recorded=recorded, evaluated_at=evaluated_at)[0]


class _CyclesUncollected:
    """Python's cyclic garbage collector paused while any refresh runs, and resumed as it was when
    the last one ends. A refresh allocates hundreds of thousands of rows, none in a cycle, so the
    collector finds nothing in them, yet its passes over them cost a third of the reader's CPU at
    5,000 nodes. Reference counting frees the rows as usual."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._running == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._running += 1

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0 and self._was_enabled:
                gc.enable()


_cycles_uncollected = _CyclesUncollected()


def _read(query: QueryFn, policy: BalancerPolicy, *, now: Callable[[], datetime] | None,
          seen_recently: Sequence[Series] | None, recorded: str | None, evaluated_at: float | None
          ) -> tuple[ClusterSnapshot, Sequence[Series]]:
    """The snapshot and the look-back answer it used: `seen_recently` when given (that query
    then does not run), else Prometheus' fresh one.

    Through the rules, the records are read as of `evaluated_at`, the rules' last evaluation
    (`recorded_at`). Prometheus writes each rule's output as that rule finishes, so a read made
    while the rules run would otherwise mix this evaluation's records with the last one's (a node
    just joined counted without its utilisation)."""
    with _cycles_uncollected:
        return _read_rows(query, policy, now=now, seen_recently=seen_recently, recorded=recorded,
                          evaluated_at=evaluated_at)


def _read_rows(query: QueryFn, policy: BalancerPolicy, *, now: Callable[[], datetime] | None,
               seen_recently: Sequence[Series] | None, recorded: str | None, evaluated_at: float | None
               ) -> tuple[ClusterSnapshot, Sequence[Series]]:
    clock = now or (lambda: datetime.now(timezone.utc))
    taken_at = clock()
    keys = topology_keys(policy)
    queries = snapshot_queries(policy.prometheus.selector_matchers,
                               lookback_seconds=policy.telemetry.vanish_lookback_seconds,
                               busy=policy.telemetry.busy, topology_keys=keys, heat=policy.heat)
    memory = signals.memories(policy.heat)
    if recorded:
        # Each record by the raw query it stands for (a replacement record has none).
        stands_for = {name: expr for name, expr in queries.items() if name not in RECORDED_INSTEAD}
        stands_for |= dict.fromkeys(REPLACEMENT_ROWS, "")
        queries = {part: recording.recorded_query(name, expr, recorded, *matchers, metric=metric,
                                                  memory_seconds=memory.get(name, 0))
                   for name, expr in stands_for.items() for part, matchers, metric in _parts(name)}
    else:
        queries |= {name: remembered(queries[name], seconds) for name, seconds in memory.items() if name in queries}
    if seen_recently is not None:
        del queries["seen_recently"]
    asked = _asking(_evaluated_at(query, evaluated_at) if recorded else query, queries)
    joins: dict[str, str] = {}
    if policy.serving.enabled:  # read raw, as of now: the model servers' own scrapes
        joins = serving.serving_queries(policy.serving, policy.prometheus.selector_matchers,
                                        policy.placement.workload_label)
        asked |= _asking(query, {name: expr for name, expr in joins.items() if name not in serving.JOINS})
    answers = _joined_shards(_all_at_once(asked))
    newest = answers.pop("newest_sample")
    serving_rows = {name: answers.pop(name) for name in joins if name in answers}
    if any(serving_rows.values()):
        # The joins scan kube-state-metrics' every pod: only worth it where some server reports.
        serving_rows |= _all_at_once(_asking(query, {name: joins[name] for name in serving.JOINS}))
    if seen_recently is None:
        seen_recently = answers.pop("seen_recently")
    snapshot = build_snapshot(
        answers,
        taken_at=taken_at,
        node_label=policy.telemetry.node_label,
        gpus_seen_recently=seen_recently,
        allocatable_gpus=(allocatable := answers.pop("ksm_allocatable")),
        allocated_gpus=answers.pop("ksm_allocated"),
        # kube-state-metrics is scraped when it shows any GPU node; then it names the GPU pods.
        gpu_pods=answers.pop("ksm_gpu_pods") if allocatable else None,
        node_labels=answers.pop("node_labels", ()),
        topology_keys=keys,
        newest_sample_at=datetime.fromtimestamp(newest[0].value, tz=timezone.utc) if newest else None,
        busy=policy.telemetry.busy,
    )
    replicas = serving.replicas_from_rows(serving_rows, policy.serving, policy.placement.workload_label)
    snapshot = serving.with_serving(snapshot, replicas)
    return replace(snapshot, source="recording rules" if recorded else "raw queries"), seen_recently


SHARD_MARK = "#"
_BY_LAST_DIGIT = (*(f'gpu=~".*{digit}"' for digit in "0123456789"), 'gpu!~".*[0-9]"')
SHARDS: dict[str, tuple[tuple[str, str], ...]] = {
    # The largest answers of a recorded refresh, asked for in parts that select every row exactly
    # once, each an (extra matcher, metric name) pair: answers are decoded one at a time, so the
    # reader's peak memory follows the largest part, not the largest answer (at 15,000 nodes:
    # 55,000 pod rows and 45,000 sums). The sums come a metric at a time anyway
    # (`recording.recorded_query`).
    "pod_units": tuple((matcher, "") for matcher in _BY_LAST_DIGIT),
    "sums": tuple(("", metric) for metric in SUMMED),
}


def _parts(name: str) -> list[tuple[str, tuple[str, ...], str]]:
    """The queries one recorded answer is asked in: (part name, extra matchers, metric name)."""
    if name not in SHARDS:
        return [(name, (), "")]
    return [(f"{name}{SHARD_MARK}{index}", (matcher,) if matcher else (), metric)
            for index, (matcher, metric) in enumerate(SHARDS[name])]


def _joined_shards(answers: dict[str, list[Series]]) -> dict[str, list[Series]]:
    joined: dict[str, list[Series]] = {}
    for name, rows in answers.items():
        joined.setdefault(name.split(SHARD_MARK, 1)[0], []).extend(rows)
    return joined


def _asking(query: QueryFn, queries: Mapping[str, str]) -> dict[str, tuple[Fetch, str]]:
    """Each named query with the function that asks it."""
    fetch = _as_series(query)
    return {name: (fetch, promql) for name, promql in queries.items()}


def _all_at_once(asked: Mapping[str, tuple[Fetch, str]]) -> dict[str, list[Series]]:
    """Every query in parallel: a refresh then costs one round trip, and a silent Prometheus one timeout."""
    pool = ThreadPoolExecutor(max_workers=min(PARALLEL_QUERIES, len(asked)), thread_name_prefix="promql")
    try:
        return dict(zip(asked, pool.map(lambda pair: pair[0](pair[1]), asked.values())))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


class SnapshotReader:
    """`read_snapshot` for a process that refreshes every few seconds: the look-back query for
    vanished GPUs runs at most every `telemetry.vanishCheckSeconds`, its answer reused between.
    Through the recording rules, a refresh that finds them not re-evaluated since the last one
    (the rules run every `telemetry.recordingIntervalSeconds`, 30 s; a webhook refreshes every 5 s)
    asks one row and returns the last snapshot, even where the look-back is due (it then runs at
    the next evaluation), unless that snapshot showed model-server series: those are read raw, on
    their own scrapes.
    Stateful (the reused answers); the I/O is `query`'s."""

    def __init__(self, query: QueryFn, policy: BalancerPolicy, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._query = query
        self._policy = policy
        self._monotonic = monotonic
        self._seen_recently: list[Series] | None = None
        self._checked_at = 0.0
        self._recorded: str | None = None
        self._last: tuple[float, ClusterSnapshot] | None = None
        """The rules' last evaluation time and the snapshot read from it."""

    def __call__(self) -> ClusterSnapshot:
        started = self._monotonic()
        reuse = (self._seen_recently is not None
                 and started - self._checked_at < self._policy.telemetry.vanish_check_seconds)
        if not reuse:  # look for recording rules as often as for vanished GPUs
            self._recorded = recorded_fingerprint(self._query, self._policy)
        evaluated_at = recorded_at(self._query, self._recorded) if self._recorded else None
        if self._recorded and evaluated_at is None:  # the rules went away: read raw from now on
            self._recorded = recorded_fingerprint(self._query, self._policy)
        if evaluated_at is not None and self._last is not None and self._last[0] == evaluated_at:
            # A due look-back waits for the next evaluation too: a read of unchanged records would
            # only cost Prometheus, and every read then comes just after an evaluation.
            return self._last[1]
        snapshot, seen = _read(self._query, self._policy, now=None,
                               seen_recently=self._seen_recently if reuse else None, recorded=self._recorded,
                               evaluated_at=evaluated_at)
        if not reuse:
            self._seen_recently, self._checked_at = list(seen), started
        reusable = evaluated_at is not None and not serving.targets_of(snapshot)
        self._last = (evaluated_at, snapshot) if reusable else None
        return snapshot


def recorded_at(query: QueryFn, fingerprint_: str) -> float | None:
    """When the rules with this fingerprint last recorded a snapshot (seconds since the epoch), or
    None where they have not."""
    rows = query(f"timestamp({recording.record_selector('newest_sample', fingerprint_)})")
    return max((float(row["value"][1]) for row in rows), default=None)


def recorded_fingerprint(query: QueryFn, policy: BalancerPolicy) -> str | None:
    """This policy's fingerprint when Prometheus holds recording rules generated for it, else None
    (no rules, or rules generated for another selector, gauge or look-back)."""
    ours = recording.fingerprint(policy, topology_keys(policy))
    rows = query(f"count by ({recording.FINGERPRINT_LABEL}) ({recording.snapshot_record('newest_sample')})")
    present = {row.get("metric", {}).get(recording.FINGERPRINT_LABEL) for row in rows}
    return ours if ours in present else None


def read_window(query: QueryFn, policy: BalancerPolicy) -> dict[str, WindowStats]:
    """Node → utilisation statistics over the descheduler's window."""
    d = policy.descheduler
    queries = window_queries(policy.prometheus.selector_matchers, window_seconds=d.window_seconds,
                             step_seconds=d.step_seconds, quantile=d.low_quantile,
                             busy=policy.telemetry.busy, recorded=(fingerprint := recorded_fingerprint(query, policy))
                             and recording.node_util_selector(fingerprint))
    return _window_stats(run_queries(query, queries), policy)


def read_throttle_window(query: QueryFn, policy: BalancerPolicy) -> dict[str, WindowStats]:
    """Node → its count of GPUs held below their clocks over the descheduler's window."""
    d = policy.descheduler
    queries = throttle_window_queries(policy.prometheus.selector_matchers, window_seconds=d.window_seconds,
                                      step_seconds=d.step_seconds, quantile=d.low_quantile)
    return _window_stats(run_queries(query, queries), policy)


def _window_stats(answers: Mapping[str, list[Series]], policy: BalancerPolicy) -> dict[str, WindowStats]:
    d = policy.descheduler
    label = detect_node_label(answers["mean"], policy.telemetry.node_label)
    steps = d.window_seconds / d.step_seconds
    by_node: dict[str, dict[str, float]] = {}
    for name, rows in answers.items():
        for row in rows:
            if node := row.labels.get(label, ""):
                by_node.setdefault(node, {})[name] = row.value
    return {node: WindowStats(v.get("mean", 0.0), v.get("low", 0.0), min(1.0, v.get("samples", 0.0) / steps))
            for node, v in by_node.items()}


def read_serving_window(query: QueryFn, policy: BalancerPolicy, snapshot: ClusterSnapshot
                        ) -> dict[tuple[str, str], serving.SustainedServing]:
    """(namespace, pod) → serving figures over the descheduler's window, for the serving replicas
    in `snapshot`; no queries at all when it shows none (no server exports the series)."""
    targets = serving.targets_of(snapshot)
    if not policy.serving.enabled or not targets:
        return {}
    d = policy.descheduler
    queries = serving.serving_window_queries(policy.serving, policy.prometheus.selector_matchers,
                                             window_seconds=d.window_seconds, step_seconds=d.step_seconds,
                                             quantile=d.low_quantile)
    rows = run_queries(query, queries)
    return serving.sustained_from_rows(rows, policy.serving, steps=d.window_seconds / d.step_seconds, targets=targets)
