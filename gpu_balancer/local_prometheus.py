"""Start and stop a throw-away Prometheus on loopback for the demo, tests and benchmarks (process I/O)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import requests
import yaml


class PrometheusNotInstalled(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_ready(process: subprocess.Popen, url: str, timeout: float, name: str,
                     last_words: Callable[[], str]) -> None:
    """Poll `url` until it answers OK; RuntimeError with the process's `last_words` if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited: {last_words()}")
        try:
            if requests.get(url, timeout=1).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not become ready in time")


def stop_process(process: subprocess.Popen | None) -> None:
    """Terminate, and kill what does not stop within 10 s."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class ScrapeTarget:
    address: str
    """host:port of an exporter."""
    labels: dict[str, str] = field(default_factory=dict)
    """Target labels, e.g. the `pod`/`namespace` a ServiceMonitor would attach."""


def scrape_config(targets: list[ScrapeTarget], interval: str, honor_labels: bool,
                  rule_files: tuple[Path, ...] = ()) -> str:
    """The Prometheus-format scrape configuration (VictoriaMetrics reads the same file)."""
    return yaml.safe_dump({
        # VictoriaMetrics refuses unknown fields, so rule settings appear only with rule files.
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   **({"evaluation_interval": interval} if rule_files else {})},
        **({"rule_files": [str(path) for path in rule_files]} if rule_files else {}),
        "scrape_configs": [{
            "job_name": "dcgm",
            "honor_labels": honor_labels,
            "static_configs": [{"targets": [t.address], "labels": t.labels} for t in targets],
        }],
    })


@dataclass
class LocalTimeSeriesServer:
    """A time-series server process scraping `targets`, with its files in a temporary directory.
    Subclasses name the binary, its command line and its readiness path."""

    targets: list[ScrapeTarget]
    scrape_interval: str = "1s"
    honor_labels: bool = False
    """Keep the scraped series' own `job`, `instance`, `pod`... as a ServiceMonitor with
    `honorLabels: true` does."""
    rule_files: tuple[Path, ...] = ()
    """Recording or alerting rule files to load (Prometheus only)."""
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    _workdir: tempfile.TemporaryDirectory | None = None
    _log: object | None = None

    binary: ClassVar[str] = ""
    ready_path: ClassVar[str] = "/-/ready"
    missing: ClassVar[type[RuntimeError]] = RuntimeError
    install_hint: ClassVar[str] = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, binary: str, workdir: Path, config: Path) -> list[str]:
        raise NotImplementedError

    def start(self, ready_timeout: float = 30.0):
        binary = shutil.which(self.binary)
        if binary is None:
            raise self.missing(f"{self.binary} is not on PATH; {self.install_hint}")
        self._workdir = tempfile.TemporaryDirectory(prefix=f"gpu-balancer-{self.binary}-")
        workdir = Path(self._workdir.name)
        config = workdir / "scrape.yml"
        config.write_text(scrape_config(self.targets, self.scrape_interval, self.honor_labels, self.rule_files))
        log = workdir / "server.log"
        self._log = open(log, "wb")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(self.command(binary, workdir, config), stdout=subprocess.DEVNULL,
                                        stderr=self._log)
        try:
            wait_until_ready(self.process, f"{self.url}{self.ready_path}", ready_timeout, self.binary,
                             lambda: log.read_text()[-2000:])
        except RuntimeError:
            self.stop()
            raise
        return self

    def wait_for(self, promql: str, *, at_least: int = 1, timeout: float = 60.0) -> list[dict]:
        """Poll until `promql` returns at least `at_least` series, i.e. the first scrapes landed."""
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            answer = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10).json()
            result = answer.get("data", {}).get("result", [])
            if len(result) >= at_least:
                return result
            time.sleep(0.2)
        raise TimeoutError(f"{promql!r} returned {len(result)} series, wanted {at_least}")

    def stop(self) -> None:
        stop_process(self.process)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class LocalPrometheus(LocalTimeSeriesServer):
    """Debian's Prometheus, with its own config and TSDB."""

    storage: Path | None = None
    """An existing TSDB directory (e.g. backfilled blocks); a fresh temporary one otherwise."""

    binary = "prometheus"
    missing = PrometheusNotInstalled
    install_hint = "install Debian's `prometheus` package (make test does this as root)"

    def command(self, binary: str, workdir: Path, config: Path) -> list[str]:
        return [binary, f"--config.file={config}", f"--storage.tsdb.path={self.storage or workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
