"""The host-CPU signal (issue 47, item 2): node_exporter's CPU pressure and the kubelet's cAdvisor
CFS counters, from their own exposition text (tests/fixtures/real_exporters), read through a real
Prometheus beside a real dcgm-exporter's, and judged into the node's heat."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest

from scoring.heat import Tier, node_heat
from scoring.ingest.prometheus import _series, connect, read_snapshot
from scoring.ingest.signals import registry
from scoring.ingest.signals.host_cpu import THROTTLED, WAITING, Args, HostCpu
from scoring.ingest.telemetry import NodeTelemetry
from scoring.policy import HeatPolicy, PolicyError, default_policy, parse_policy
from sim.fake_dcgm import make_server, serve_in_background
from tests.conftest import FIXTURES
from gpu_balancer.local_prometheus import ScrapeTarget

REAL = FIXTURES / "real_exporters"
NODE = "lke529760-766837-0a634ab30000"
"""The node of the LKE dcgm-exporter file, whose GPU 0 is held by default/cuda-75454ffb9f-8ljq7."""
GPU_POD = 'namespace="default",pod="cuda-75454ffb9f-8ljq7",container="cuda"'
WAITING_SHARE, THROTTLED_SHARE = 0.4, 0.3
"""What the served counters grow by: tasks wait for a CPU 40 % of the time, and the GPU pod's
container is throttled in 30 % of its CFS periods (ten 100 ms periods a second)."""


def host_text(seconds: float) -> str:
    """node_exporter's and cAdvisor's lines from the fixtures, the counters advanced by `seconds`
    of the shares above, the cAdvisor container given the kubelet's pod labels, no timestamps."""
    psi = (REAL / "node-exporter-e2e-pressure-cpu.txt").read_text()
    psi = re.sub(r"^(node_pressure_cpu_waiting_seconds_total) (\S+)$",
                 lambda m: f"{m[1]} {float(m[2]) + WAITING_SHARE * seconds}", psi, flags=re.M)
    growth = {"container_cpu_cfs_periods_total": 10.0, "container_cpu_cfs_throttled_periods_total": 10 * THROTTLED_SHARE}

    def advance(m: re.Match) -> str:
        return f"{m[1]}{{{m[2]},{GPU_POD}}} {float(m[3]) + growth[m[1]] * seconds}"

    cfs = re.sub(r"^(container_cpu_cfs_\w+)\{(.*)\} (\S+) \d+$", advance,
                 (REAL / "cadvisor-testdata-cpu-cfs.txt").read_text(), flags=re.M)
    return psi + cfs


def test_the_fixtures_keep_their_real_shape():
    text = host_text(10.0)
    assert "node_pressure_cpu_waiting_seconds_total 18.03678" in text
    assert ('container_cpu_cfs_throttled_periods_total{container_env_foo_env="prod",container_label_foo_label="bar",'
            'id="testcontainer",image="test",name="testcontaineralias",zone_name="hello",' + GPU_POD + "} 48.0") in text


@pytest.fixture
def scraped(prometheus):
    """A real Prometheus scraping the LKE dcgm-exporter text and the host text (its node named by
    the target label `node`, as kube-prometheus relabels both exporters)."""
    started = time.monotonic()
    dcgm_server = make_server((REAL / "lke-rtx4000ada-k8s-mapping.txt").read_text(), port=0)
    host_server = make_server(lambda: host_text(time.monotonic() - started), port=0)
    for server in (dcgm_server, host_server):
        serve_in_background(server)
    try:
        prom = prometheus(f"127.0.0.1:{dcgm_server.server_port}",
                          ScrapeTarget(f"127.0.0.1:{host_server.server_port}", {"node": NODE}))
        prom.wait_for("container_cpu_cfs_periods_total")
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL")
        time.sleep(6)  # a few scrapes, for rates over a 5 s window
        yield prom
    finally:
        for server in (dcgm_server, host_server):
            server.shutdown()


def test_a_node_whose_cpus_are_contended_is_hot_and_a_throttled_gpu_pod_is_said_not_blamed_on_it(scraped):
    signal = HostCpu(Args(rate_window_seconds=5))
    query = connect(replace(default_policy().prometheus, url=scraped.url))
    rows = {name: _series(query(expr)) for name, expr in signal.queries("").items()}
    found = signal.read(rows, node_of=lambda row: "")
    readings = found[NODE]["readings"]
    assert readings[WAITING] == pytest.approx(WAITING_SHARE, abs=0.05)
    assert readings[THROTTLED] == pytest.approx(THROTTLED_SHARE, abs=0.05)
    node = NodeTelemetry(NODE, 1, util_sum=0.0, util_count=1, readings=tuple(sorted(readings.items())))
    said = signal.verdicts(node, HeatPolicy())
    assert [tier for tier, _ in said] == [Tier.HOT, Tier.COOL]
    assert said[0][1] == "host CPU: tasks waiting for a CPU 40% of the time ≥ 25%"
    assert said[1][1] == ("host CPU: a GPU pod's CPU throttled 30% of the time ≥ 25% at its own limit "
                          "(raise the limit; moving it does not help)")


def test_the_snapshot_reads_the_signal_beside_dcgm_exporters_series(scraped):
    # The shipped queries (a 120 s window) run in every refresh: the node carries both readings.
    policy = replace(default_policy(), prometheus=replace(default_policy().prometheus, url=scraped.url))
    snapshot = read_snapshot(connect(policy.prometheus), policy)
    (node,) = snapshot.nodes
    assert node.name == NODE and node.reading(WAITING) is not None and node.reading(THROTTLED) is not None


def test_a_container_that_holds_no_gpu_is_not_counted(scraped):
    # The same counters for a pod dcgm-exporter does not name: throttled, but no GPU pod's.
    signal = HostCpu(Args(rate_window_seconds=5))
    expr = signal.queries("")[THROTTLED].replace('"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_GPU_UTIL"', '"no_such_metric"')
    assert connect(replace(default_policy().prometheus, url=scraped.url))(expr) == []


@pytest.mark.parametrize("share, tier", [(0.05, None), (0.12, Tier.WARM), (0.25, Tier.HOT)])
def test_the_bars(share, tier):
    node = NodeTelemetry("n", 8, util_sum=0.0, util_count=8, readings=((WAITING, share),))
    said = HostCpu().verdicts(node, HeatPolicy())
    assert [t for t, _ in said] == ([] if tier is None else [tier])


def test_a_node_with_host_pressure_is_hot_in_its_heat_and_a_pod_steered_away_hears_why():
    node = NodeTelemetry("n", 8, util_sum=8 * 20.0, util_count=8, readings=((WAITING, 0.5), (THROTTLED, 0.5)))
    heat = node_heat(node, HeatPolicy())
    assert heat.tier is Tier.HOT and "host CPU: tasks waiting for a CPU 50% of the time ≥ 25%" in heat.reasons
    assert registry.explain(heat.reasons) == "host CPU contended"


def test_a_pod_throttled_at_its_own_limit_leaves_its_node_cool_and_says_so():
    """A CFS quota binds wherever the pod runs and takes nothing from its neighbours: the node is
    no worse for a new pod, and marking it hot sent replicas onto contended nodes (BENCHMARKS)."""
    node = NodeTelemetry("n", 8, util_sum=8 * 20.0, util_count=8, readings=((THROTTLED, 0.5),))
    heat = node_heat(node, HeatPolicy())
    assert heat.tier is Tier.COOL
    assert any(r.startswith("host CPU: a GPU pod's CPU throttled 50% of the time") for r in heat.reasons)
    assert registry.explain(heat.reasons) is None


def test_a_bad_argument_is_named():
    assert Args(warm_share=0.3, hot_share=0.2).validate() == [
        "warmShare: must satisfy 0 < warmShare < hotShare <= 1, got 0.3, 0.2"]
    assert Args(rate_window_seconds=10).validate()[0].startswith("rateWindowSeconds: must be at least 30")
    assert Args(node_label="kubernetes.io/hostname").validate()[0].startswith("nodeLabel: not a Prometheus label")


def test_readings_are_kept_by_name():
    node = NodeTelemetry("n", 8, readings=((THROTTLED, 0.5), (WAITING, 0.1)))
    assert node.reading(WAITING) == 0.1 and node.reading("no_such_signal") is None


def test_the_policy_turns_the_signal_off_or_moves_its_bars():
    node = NodeTelemetry("n", 8, util_sum=8 * 20.0, util_count=8, readings=((WAITING, 0.3),))
    assert node_heat(node, HeatPolicy()).tier is Tier.HOT
    off = parse_policy("heat:\n  signals: [{name: temperature}, {name: throttling}, {name: health}]").heat
    assert node_heat(node, off).tier is Tier.COOL
    higher = parse_policy("heat:\n  signals: [{name: host_cpu, args: {hotShare: 0.5}}]").heat
    assert node_heat(node, higher).tier is Tier.WARM


def test_a_bad_signal_entry_is_named_in_one_line():
    for text, message in (
            ("[{name: host-cpu}]", "heat.signals[0].name: unknown signal 'host-cpu' (known: temperature, throttling, "
                                   "health, host_cpu, degraded, pcie, tpot)"),
            ("[{name: host_cpu, args: {hotShare: 2}}]", "heat.signals[0].args.warmShare: must satisfy"),
            ("[{name: temperature, args: {hot: 1}}]", "heat.signals[0].args.hot: unknown field (known: )")):
        with pytest.raises(PolicyError) as error:
            registry.configured(parse_policy(f"heat:\n  signals: {text}").heat)
        assert message in str(error.value), str(error.value)
