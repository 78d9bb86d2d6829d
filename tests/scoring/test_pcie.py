"""The PCIe signal (issue 47, item 2): a switch whose GPUs move 16 GB/s or more, with a free GPU
behind it, warms its node and says which switch and how much. Read from the serving world's own
exporter text through a real Prometheus, raw and through the recording rules, held against what
the in-process aggregate makes of the same GPUs; and from real dcgm-exporter text."""

from __future__ import annotations

from pathlib import Path

import pytest

from scoring import dcgm
from scoring.heat import Tier, fleet_heat, node_heat
from prometheus_client.parser import text_string_to_metric_families

from scoring.ingest.series import aggregate_samples, build_snapshot, gpu_samples, series_from_families
from scoring.ingest.signals.pcie import Args, Pcie, busy_switches
from scoring.ingest.signals.registry import configured
from scoring.ingest.telemetry import GpuSample, NodeTelemetry, PodRef
from scoring.policy import HeatPolicy, PolicyError, parse_policy
from sim.llm.exposition import dcgm_text, ticks
from sim.policies import observed_samples
from tests.scoring.test_throttling import read_through_prometheus
from tests.sim.test_pcie_neighbours import pcie_world

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_exporters"
GB = 10**9


def samples(moved: dict[tuple[str, int], float], free: set[tuple[str, int]]) -> list[GpuSample]:
    """Two 8-GPU nodes, every GPU moving 0.1 GB/s but those given, every GPU held but those free."""
    return [GpuSample(node=f"n{n}", gpu=str(g), util_percent=50.0,
                      pcie_rx_bytes=moved.get((f"n{n}", g), GB // 10), pcie_tx_bytes=0.0,
                      pod=None if (f"n{n}", g) in free else PodRef("ns", f"p{n}{g}"))
            for n in range(2) for g in range(8)]


def judged(found: list[GpuSample], args: Args = Args()) -> dict[str, NodeTelemetry]:
    signal = Pcie(args)
    read = signal.read(signal.aggregate(found), lambda row: row.labels.get("node", ""))
    return {name: NodeTelemetry(name, 8, util_sum=8 * 30.0, util_count=8, util_max=30.0,
                                readings=tuple(sorted(fields["readings"].items())))
            for name, fields in read.items()}


def test_a_busy_switch_with_a_free_gpu_behind_it_warms_its_node_and_says_which():
    nodes = judged(samples({("n1", 2): 164 * GB // 10}, free={("n1", 3)}))
    assert [busy_switches(n) for n in nodes.values() if busy_switches(n)] == [[("1", 165 * GB // 10, 1)]]
    heat = node_heat(nodes["n1"], HeatPolicy())
    assert heat.tier is Tier.WARM
    assert "PCIe switch 1 (GPUs 2–3) busy: 16.5 GB/s beside 1 free GPU" in heat.reasons


@pytest.mark.parametrize("moved, free", [
    ({("n1", 2): 164 * GB // 10}, {("n1", 5)}),  # busy, but the free GPU sits behind a quiet switch
    ({("n1", 2): 8 * GB}, {("n1", 3)}),  # a quiet switch: a loader or a weight load, not offload
    ({("n1", 2): 164 * GB // 10}, set()),  # busy, but no new pod can be given a GPU behind it
])
def test_no_verdict_where_no_new_pod_would_sit_behind_a_busy_switch(moved, free):
    assert not any(busy_switches(n) for n in judged(samples(moved, free)).values())


def test_the_switch_layout_and_threshold_are_arguments_with_clear_errors():
    # Four GPUs a switch: GPU 2's traffic is now beside free GPU 0.
    nodes = judged(samples({("n1", 2): 164 * GB // 10}, free={("n1", 0)}), Args(gpus_per_switch=4))
    assert busy_switches(nodes["n1"]) == [("0", 167 * GB // 10, 1)]
    four = parse_policy("heat:\n  signals:\n  - name: pcie\n    args: {gpusPerSwitch: 4}\n").heat
    assert "PCIe switch 0 (GPUs 0–3) busy: 16.7 GB/s beside 1 free GPU" in node_heat(nodes["n1"], four).reasons
    with pytest.raises(PolicyError, match="gpusPerSwitch"):
        configured(parse_policy("heat:\n  signals:\n  - name: pcie\n    args: {gpusPerSwitch: 0}\n").heat)
    with pytest.raises(PolicyError, match="busyBytesPerSecond"):
        configured(parse_policy("heat:\n  signals:\n  - name: pcie\n    args: {busyBytesPerSecond: -1}\n").heat)


def test_real_dcgm_exporter_text_gives_each_gpus_pcie_bytes():
    text = (REAL / "lke-rtx4000ada-k8s-mapping.txt").read_text()
    found = gpu_samples(series_from_families(text_string_to_metric_families(text)))
    assert found and all(s.pcie_tx_bytes is not None and s.pcie_rx_bytes is not None for s in found)
    tx = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(dcgm.PCIE_TX_BYTES + "{")]
    assert sorted(s.pcie_tx_bytes for s in found) == sorted(tx)


@pytest.mark.parametrize("recorded", [False, True])
def test_busy_switches_read_through_prometheus_as_in_process(prometheus, recorded):
    world = pcie_world()
    snapshot, policy = read_through_prometheus(prometheus, dcgm_text(world, ticks(world) - 1), recorded=recorded,
                                               record="pcie_busy_switches", metric=dcgm.PCIE_RX_BYTES)
    in_process = build_snapshot(aggregate_samples(observed_samples(world, lag=0)), taken_at=snapshot.taken_at)
    expected = {n.name: busy_switches(n) for n in in_process.nodes if busy_switches(n)}
    assert expected, "no free GPU sat behind a busy switch"
    read = {n.name: busy_switches(n) for n in snapshot.nodes if busy_switches(n)}
    assert read.keys() == expected.keys()
    for name, found in read.items():  # the exporter writes whole bytes
        assert [(s, free) for s, _, free in found] == [(s, free) for s, _, free in expected[name]]
        assert [moved for _, moved, _ in found] == pytest.approx([moved for _, moved, _ in expected[name]], rel=1e-6)
    fleet = fleet_heat(snapshot, policy.heat, now=snapshot.taken_at, staleness_limit_seconds=1e9)
    said = {n.name: [r for r in n.reasons if r.startswith("PCIe switch ")] for n in fleet.nodes}
    assert all(said[name] for name in expected)
