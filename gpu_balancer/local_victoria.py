"""Start and stop a throw-away single-node VictoriaMetrics on loopback that scrapes exporters
through its Prometheus-compatible scrape configuration, for tests and benchmarks (process I/O)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from gpu_balancer.local_prometheus import ScrapeTarget, free_port, scrape_config


class VictoriaMetricsNotInstalled(RuntimeError):
    pass


@dataclass
class LocalVictoriaMetrics:
    targets: list[ScrapeTarget]
    scrape_interval: str = "1s"
    honor_labels: bool = False
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    _workdir: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout: float = 30.0) -> "LocalVictoriaMetrics":
        binary = shutil.which("victoria-metrics")
        if binary is None:
            raise VictoriaMetricsNotInstalled("victoria-metrics is not on PATH; install Debian's `victoria-metrics`")
        self._workdir = tempfile.TemporaryDirectory(prefix="gpu-balancer-vm-")
        workdir = Path(self._workdir.name)
        (workdir / "scrape.yml").write_text(scrape_config(self.targets, self.scrape_interval, self.honor_labels))
        self.process = subprocess.Popen(
            [binary, f"-storageDataPath={workdir / 'data'}", f"-httpListenAddr=127.0.0.1:{self.port}",
             f"-promscrape.config={workdir / 'scrape.yml'}",
             # Answer with what was just scraped: by default the newest 30 s are held back.
             "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=ERROR"],
            stdout=subprocess.DEVNULL, stderr=open(workdir / "vm.log", "wb"))  # noqa: SIM115
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"victoria-metrics exited: {(workdir / 'vm.log').read_text()[-2000:]}")
            try:
                if requests.get(f"{self.url}/health", timeout=1).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("victoria-metrics did not become ready in time")

    def wait_for(self, promql: str, *, at_least: int = 1, timeout: float = 60.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            answer = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10).json()
            result = answer.get("data", {}).get("result", [])
            if len(result) >= at_least:
                return result
            time.sleep(0.3)
        raise TimeoutError(f"{promql!r} returned {len(result)} series, wanted {at_least}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> "LocalVictoriaMetrics":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
