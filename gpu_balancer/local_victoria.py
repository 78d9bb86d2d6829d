"""Start and stop a throw-away single-node VictoriaMetrics on loopback that scrapes exporters
through its Prometheus-compatible scrape configuration, and a vmalert running recording rules
against it, for tests and benchmarks (process I/O)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gpu_balancer.local_prometheus import LocalTimeSeriesServer, free_port, stop_process, wait_until_ready


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


@dataclass
class LocalVmalert:
    """A throw-away vmalert evaluating rule files against a VictoriaMetrics and writing the
    recorded series back into it, as a VictoriaMetrics install runs recording rules (process I/O)."""

    rule_files: tuple[Path, ...]
    datasource_url: str
    evaluation_interval: str = "1s"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    def start(self, ready_timeout: float = 30.0) -> LocalVmalert:
        binary = shutil.which("vmalert")
        if binary is None:
            raise VictoriaMetricsNotInstalled("vmalert is not on PATH; install Debian's `victoria-metrics` package")
        self.process = subprocess.Popen(
            [binary, *(f"-rule={path}" for path in self.rule_files), f"-datasource.url={self.datasource_url}",
             f"-remoteWrite.url={self.datasource_url}", f"-evaluationInterval={self.evaluation_interval}",
             f"-remoteWrite.flushInterval={self.evaluation_interval}", f"-httpListenAddr=127.0.0.1:{self.port}",
             "-loggerLevel=ERROR"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_until_ready(self.process, f"http://127.0.0.1:{self.port}/health", ready_timeout, "vmalert",
                             lambda: self.process.stderr.read().decode()[-2000:])
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_process(self.process)

    def __enter__(self) -> LocalVmalert:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
