"""The descheduler's own Prometheus metrics in loop mode (`deschedule --every`): runs, evictions,
skips by reason. A registry per process; `serve` starts the /metrics listener (I/O)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from descheduler.summary import RunSummary


class DeschedulerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs = Counter("gpu_balancer_descheduler_runs_total", "Descheduler runs, by result "
                            "(ok, telemetry-error, api-error).", ["result"], registry=self.registry)
        self.evictions = Counter("gpu_balancer_descheduler_evictions_total", "Pods evicted, would have been "
                                 "evicted (dry run), or whose eviction failed.", ["mode"], registry=self.registry)
        self.skips = Counter("gpu_balancer_descheduler_skips_total", "Pods on hot nodes left in place, by reason.",
                             ["reason"], registry=self.registry)
        self.hot_nodes = Gauge("gpu_balancer_descheduler_hot_nodes", "Sustained-hot GPU nodes at the last run.",
                               registry=self.registry)
        self.last_run = Gauge("gpu_balancer_descheduler_last_run_timestamp_seconds",
                              "When the last run finished, successful or not.", registry=self.registry)
        for result in ("ok", "telemetry-error", "api-error"):
            self.runs.labels(result)
        for mode in ("evicted", "would-evict", "failed"):
            self.evictions.labels(mode)

    def serve(self, port: int) -> int:
        """Serve /metrics on `port` (0: any free port); returns the port listened on."""
        server, _thread = start_http_server(port, registry=self.registry)
        return server.server_port

    def observe(self, summary: RunSummary) -> None:
        self.runs.labels("ok").inc()
        self.evictions.labels("evicted").inc(summary.evicted)
        self.evictions.labels("would-evict").inc(summary.would_evict)
        self.evictions.labels("failed").inc(summary.failed)
        for reason, pods in summary.skipped.items():
            self.skips.labels(reason).inc(pods)
        self.hot_nodes.set(summary.hot_nodes)
        self.last_run.set_to_current_time()

    def observe_failure(self, result: str) -> None:
        self.runs.labels(result).inc()
        self.last_run.set_to_current_time()
