"""Shared fixtures: real exporters and a real Prometheus on loopback, started and stopped per test."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from gpu_balancer.local_prometheus import LocalPrometheus, ScrapeTarget
from scoring.ingest import recording
from scoring.ingest.prometheus import connect, read_snapshot
from scoring.ingest.queries import topology_keys
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import BalancerPolicy, default_policy
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec, generate_fleet

FIXTURES = Path(__file__).parent / "fixtures"


def require_tool(*names: str, why: str) -> str:
    """The path of the first of `names` on PATH. Missing, the test is skipped on a developer's
    machine and fails under `CI=true`, where `make test` was to install it."""
    for name in names:
        if path := shutil.which(name):
            return path
    message = f"{names[0]} is not installed ({why})"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " — under CI a missing tool is a failure, not a skip")
    pytest.skip(message)


def _require_prometheus() -> None:
    require_tool("prometheus", why="Debian package `prometheus`; `make test` installs it as root")


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


def rules_evaluated_every_second(policy: BalancerPolicy, directory: Path) -> Path:
    """The policy's recording rules in a file, evaluated every second so a test need not wait 15."""
    rules = recording.recording_rules(policy, topology_keys(policy))
    for group in rules["groups"]:
        group["interval"] = "1s"
    path = directory / "recording.rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    return path


@pytest.fixture
def prometheus(tmp_path) -> Iterator[Callable[..., LocalPrometheus]]:
    """Start a real Prometheus scraping the given targets every second (with the recording rules
    of `policy`, else the default policy, when `recorded`); stopped after the test."""
    _require_prometheus()
    started: list[LocalPrometheus] = []

    def start(*targets: ScrapeTarget | str, honor_labels: bool = False, recorded: bool = False,
              policy: BalancerPolicy | None = None) -> LocalPrometheus:
        rules = (rules_evaluated_every_second(policy or default_policy(), tmp_path),) if recorded else ()
        instance = LocalPrometheus([t if isinstance(t, ScrapeTarget) else ScrapeTarget(t) for t in targets],
                                   honor_labels=honor_labels, rule_files=rules)
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


def rounded(value, digits: int = 9):
    """Floats to `digits` significant digits, through dataclass fields, dicts, tuples and lists:
    Prometheus adds a node's figures in its own order, so sums may differ in their last bits."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {key: rounded(item, digits) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(item, digits) for item in value]
    if dataclasses.is_dataclass(value):
        return rounded(dataclasses.asdict(value), digits)
    return value


def read_through(prom: LocalPrometheus, policy: BalancerPolicy, path: str) -> ClusterSnapshot:
    """The snapshot `read_snapshot` gives through `path` ("raw" or "recorded"). Through the
    recording rules (a Prometheus started with `recorded=True`) it must equal the raw one."""
    configured = dataclasses.replace(policy, prometheus=dataclasses.replace(policy.prometheus, url=prom.url))
    query = connect(configured.prometheus)
    if path == "raw":
        return read_snapshot(query, configured, raw=True)
    prom.wait_for(recording.snapshot_record("node_units"))
    time.sleep(2.2)  # an evaluation after the last series landed
    snapshot, raw = read_snapshot(query, configured), read_snapshot(query, configured, raw=True)
    assert snapshot.source == "recording rules" and raw.source == "raw queries"
    assert rounded(snapshot.nodes) == rounded(raw.nodes)
    assert (snapshot.node_label, snapshot.vanished_nodes, snapshot.warnings) == (
        raw.node_label, raw.vanished_nodes, raw.warnings)
    return snapshot
