"""Start and stop a throw-away single-node VictoriaMetrics on loopback that scrapes exporters
through its Prometheus-compatible scrape configuration, for tests and benchmarks (process I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_balancer.local_prometheus import LocalTimeSeriesServer


class VictoriaMetricsNotInstalled(RuntimeError):
    pass


@dataclass
class LocalVictoriaMetrics(LocalTimeSeriesServer):
    binary = "victoria-metrics"
    ready_path = "/health"
    missing = VictoriaMetricsNotInstalled
    install_hint = "install Debian's `victoria-metrics` package (make test does this as root)"

    def command(self, binary: str, workdir: Path, config: Path) -> list[str]:
        return [binary, f"-storageDataPath={workdir / 'data'}", f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-promscrape.config={config}",
                # Answer with what was just scraped: by default the newest 30 s are held back.
                "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=ERROR"]
