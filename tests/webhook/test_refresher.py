"""Telemetry read in a child process: snapshots and errors come back to the webhook process."""

import socket
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from scoring import dcgm
from scoring.ingest.prometheus import TelemetryError, connect, read_snapshot
from scoring.policy import default_policy
from sim.fleet import FleetSpec
from webhook.refresh import assess
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
        telemetry = reader()
    finally:
        reader.close()
    assert telemetry.nodes == 3
    # The child's assessment is the one this process would make of the same Prometheus.
    policy = policy_for(prom.url)
    here = assess(read_snapshot(connect(policy.prometheus), policy), policy, datetime.now(timezone.utc))
    assert telemetry.index == here.index
    assert abs(telemetry.age_seconds(datetime.now(timezone.utc)) - here.age_seconds(datetime.now(timezone.utc))) < 30
