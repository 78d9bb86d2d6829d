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
def exposition_server() -> Iterator[Callable[[str], str]]:
    """Serve exposition text on loopback: `exposition_server(text)` → "host:port"."""
    servers = []

    def start(text: str) -> str:
        server = make_server(text, port=0)
        serve_in_background(server)
        servers.append(server)
        return f"127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_dcgm(exposition_server) -> Callable[..., str]:
    """Start fake-dcgm servers: `fake_dcgm(spec, hostname_label=..., profiling=...)` → "host:port"."""

    def start(spec: FleetSpec, **render_options) -> str:
        return exposition_server(render_exposition(generate_fleet(spec), **render_options))

    return start


@pytest.fixture
def prometheus() -> Iterator[Callable[..., LocalPrometheus]]:
    """Start a real Prometheus scraping the given targets every second; stopped after the test."""
    _require_prometheus()
    started: list[LocalPrometheus] = []

    def start(*targets: ScrapeTarget | str, honor_labels: bool = False) -> LocalPrometheus:
        instance = LocalPrometheus([t if isinstance(t, ScrapeTarget) else ScrapeTarget(t) for t in targets],
                                   honor_labels=honor_labels)
        started.append(instance.start())
        return instance

    yield start
    for instance in started:
        instance.stop()


@pytest.fixture
def kube():
    """A stateful Kubernetes API stand-in (kmock's emulator) on loopback, and a real `kubernetes`
    ApiClient pointed at it: yields (api_client, emulator)."""
    import asyncio
    import threading

    import kmock
    from kubernetes import client

    box: dict = {}
    ready = threading.Event()

    def serve() -> None:
        async def main() -> None:
            async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
                box.update(emulator=emulator, url=str(server.url), loop=asyncio.get_running_loop())
                ready.set()
                while not box.get("stop"):
                    await asyncio.sleep(0.02)
        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10), "kmock did not start"
    configuration = client.Configuration()
    configuration.host = box["url"]
    api = client.ApiClient(configuration)
    yield api, box["emulator"]
    api.close()
    box["stop"] = True
    thread.join(timeout=5)
