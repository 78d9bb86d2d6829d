"""Telemetry read in a child process: snapshots and errors come back to the webhook process."""

import socket
from dataclasses import replace

import pytest

from scoring import dcgm
from scoring.policy import default_policy
from scoring.prometheus import TelemetryError
from sim.fleet import FleetSpec
from webhook.refresher import ChildProcessReader


def policy_for(url):
    policy = default_policy()
    return replace(policy, prometheus=replace(policy.prometheus, url=url, timeout_seconds=2))


def test_an_unreachable_prometheus_is_a_telemetry_error_in_the_parent():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    reader = ChildProcessReader(policy_for(url))
    try:
        with pytest.raises(TelemetryError, match=url):
            reader()
        with pytest.raises(TelemetryError):
            reader()  # the child survives its errors and answers again
    finally:
        reader.close()


def test_the_child_reads_a_real_prometheus(fake_dcgm, prometheus):
    prom = prometheus(fake_dcgm(FleetSpec(nodes=3, gpus_per_node=2)))
    prom.wait_for(dcgm.FB_USED, at_least=6)
    reader = ChildProcessReader(policy_for(prom.url))
    try:
        snapshot = reader()
    finally:
        reader.close()
    assert [n.name for n in snapshot.nodes] == ["gpu-node-00", "gpu-node-01", "gpu-node-02"]
    assert all(n.gpus == 2 for n in snapshot.nodes)
