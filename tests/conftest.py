"""Shared fixtures: real exporters and a real Prometheus on loopback, started and stopped per test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_balancer.local_prometheus import LocalPrometheus, ScrapeTarget
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec, generate_fleet

FIXTURES = Path(__file__).parent / "fixtures"


def _require_prometheus() -> None:
    if shutil.which("prometheus"):
        return
    message = "prometheus is not installed (Debian package `prometheus`); `make test` installs it as root"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " — under CI a missing Prometheus is a failure")
    pytest.skip(message)


@pytest.fixture
def fake_dcgm() -> Iterator[Callable[..., str]]:
    """Start fake-dcgm servers: `fake_dcgm(spec, hostname_label=..., profiling=...)` → "host:port"."""
    servers = []

    def start(spec: FleetSpec, **render_options) -> str:
        server = make_server(render_exposition(generate_fleet(spec), **render_options), port=0)
        serve_in_background(server)
        servers.append(server)
        return f"127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def prometheus() -> Iterator[Callable[..., LocalPrometheus]]:
    """Start a real Prometheus scraping the given targets every second; stopped after the test."""
    _require_prometheus()
    started: list[LocalPrometheus] = []

    def start(*targets: ScrapeTarget | str) -> LocalPrometheus:
        instance = LocalPrometheus([t if isinstance(t, ScrapeTarget) else ScrapeTarget(t) for t in targets])
        started.append(instance.start())
        return instance

    yield start
    for instance in started:
        instance.stop()
