"""Run the NVML exporter: read GPUs on a timer, serve /metrics with prometheus-client (does I/O)."""

from __future__ import annotations

import logging
import threading
import time
from types import ModuleType

from prometheus_client import CollectorRegistry, start_http_server

from nvml_exporter.collector import DcgmCompatibleCollector
from nvml_exporter.reader import XidWatcher, read_gpus, start

log = logging.getLogger("gpu_balancer.nvml_exporter")


def run(nvml: ModuleType, *, node: str, port: int, interval: float, host: str = "0.0.0.0",
        stop: threading.Event | None = None) -> None:
    """Initialise NVML (raises `NvmlUnavailable`), then read every `interval` seconds until `stop`."""
    start(nvml)
    xids = XidWatcher(nvml)
    if not xids.start():
        log.warning("XID events are not supported here; DCGM_FI_DEV_XID_ERRORS will stay 0")
    collector = DcgmCompatibleCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    collector.samples = read_gpus(nvml, node, xids).samples
    server, _thread = start_http_server(port, addr=host, registry=registry)
    log.info("serving %d GPU series on %s:%d", len(collector.samples), host, server.server_port)
    stop = stop or threading.Event()
    try:
        while not stop.wait(interval):
            started = time.perf_counter()
            reading = read_gpus(nvml, node, xids)
            collector.samples = reading.samples
            for error in reading.errors:
                log.warning("%s", error)
            log.debug("read %d GPUs in %.1f ms", len(reading.samples), (time.perf_counter() - started) * 1000)
    finally:
        xids.stop()
        server.shutdown()
