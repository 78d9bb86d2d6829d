"""The telemetry and descheduler queries, unchanged, against a real VictoriaMetrics (Debian's
`victoria-metrics`, single node) scraping the same fake-dcgm as a real Prometheus; and the
recording rules, run by vmalert, read back into the raw queries' snapshot."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from gpu_balancer.local_prometheus import ScrapeTarget
from gpu_balancer.local_victoria import LocalVictoriaMetrics, LocalVmalert
from scoring import dcgm
from scoring.ingest import recording
from scoring.ingest.prometheus import connect, read_snapshot, read_window
from scoring.policy import default_policy
from sim.fleet import FleetSpec
from tests.conftest import read_through, require_tool, rounded, rules_evaluated_every_second

SPEC = FleetSpec(nodes=6, gpus_per_node=4, profile="skewed", seed=5)


@pytest.fixture
def victoria_metrics():
    require_tool("victoria-metrics", why="Debian package `victoria-metrics`; `make test` installs it")
    started = []

    def start(*targets: str) -> LocalVictoriaMetrics:
        instance = LocalVictoriaMetrics([ScrapeTarget(t) for t in targets]).start()
        started.append(instance)
        return instance

    yield start
    for instance in started:
        instance.stop()


def read_both(url: str):
    policy = default_policy()
    # A one-minute window at one-second steps: seconds of scrapes then fill several steps.
    policy = replace(policy, prometheus=replace(policy.prometheus, url=url),
                     descheduler=replace(policy.descheduler, window_seconds=60.0, step_seconds=1.0))
    query = connect(policy.prometheus)
    return read_snapshot(query, policy), read_window(query, policy)


@pytest.mark.parametrize("profiling", [False, True])
def test_victoria_metrics_gives_the_same_snapshot_and_window_as_prometheus(fake_dcgm, prometheus, victoria_metrics,
                                                                           profiling):
    target = fake_dcgm(SPEC, profiling=profiling)
    prom, vm = prometheus(target), victoria_metrics(target)
    units = SPEC.nodes * SPEC.gpus_per_node
    prom.wait_for(dcgm.FB_USED, at_least=units)
    vm.wait_for(dcgm.FB_USED, at_least=units)
    time.sleep(3)  # a few scrapes in both
    (p_snapshot, p_window), (v_snapshot, v_window) = read_both(prom.url), read_both(vm.url)
    assert len(v_snapshot.nodes) == SPEC.nodes and v_snapshot.node_label == p_snapshot.node_label
    # The two backends multiply a 0–1 gauge by 100 in different floating-point order (94.7 against
    # 94.69999999999999): compared to 6 significant digits.
    assert rounded(v_snapshot.nodes, 6) == rounded(p_snapshot.nodes, 6)
    assert set(v_window) == set(p_window) == {n.name for n in p_snapshot.nodes}
    for node, stats in p_window.items():
        assert v_window[node].mean == pytest.approx(stats.mean, rel=1e-6)
        assert v_window[node].low == pytest.approx(stats.low, rel=1e-6)


def test_the_recording_rules_run_under_vmalert_and_read_back_as_the_raw_queries(fake_dcgm, victoria_metrics,
                                                                                 tmp_path):
    # VictoriaMetrics runs recording rules in vmalert, which writes the recorded series back.
    vm = victoria_metrics(fake_dcgm(SPEC, profiling=True))
    vm.wait_for(dcgm.FB_USED, at_least=SPEC.nodes * SPEC.gpus_per_node)
    policy = default_policy()
    with LocalVmalert((rules_evaluated_every_second(policy, tmp_path),), vm.url):
        # vmalert reads a chained rule's input from storage, a cycle or two after it was written.
        vm.wait_for(recording.snapshot_record("pod_units"))
        time.sleep(3)
        snapshot = read_through(vm, policy, "recorded")
    assert len(snapshot.nodes) == SPEC.nodes and any(node.pods for node in snapshot.nodes)
