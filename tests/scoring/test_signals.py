"""The node-signal seam: every registered signal reads the same from a real Prometheus answering
its own queries as from its in-memory aggregate of the same GPUs (the simulator's path), and its
verdicts reach the node's heat. A signal that forgot one side would fail here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scoring import dcgm
from scoring.heat import Tier, node_heat
from scoring.ingest.prometheus import connect, run_queries
from scoring.ingest.signals import registry
from scoring.ingest.telemetry import NodeTelemetry
from scoring.policy import HeatPolicy, default_policy
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec, generate_fleet

SPEC = FleetSpec(nodes=4, gpus_per_node=4, profile="failing", seed=3)


def samples():
    """The failing fleet (one node with XID 79), with clocks held down on some GPUs: by the
    power cap on node 1's first three, by heat on node 2's first; node 0's GPU 3 an outlier whose
    clock under load is 1,320 MHz where its peers boost to 1,980; idle GPUs parked at 345; and a
    fifth node whose GPU 0 moves 20 GB/s over PCIe (an offloading trainer's) beside its free GPU 1."""
    found = []
    for s in generate_fleet(SPEC):
        index = int(s.gpu)
        reasons = 0x4 if s.node.endswith("01") and index < 3 else 0x20 if s.node.endswith("02") and index == 0 else 0
        clock = 345.0 if not s.util_percent else 1320.0 if s.node.endswith("00") and index == 3 else 1980.0
        found.append(replace(s, clock_reasons=reasons, sm_clock_mhz=clock))
    trainer, free = (replace(s, node=SPEC.node_name(4), uuid=f"{s.uuid}-4") for s in found[:2])
    return found + [replace(trainer, pcie_rx_bytes=12e9, pcie_tx_bytes=8e9),
                    replace(free, util_percent=0.0, sm_clock_mhz=345.0, pod=None)]


@pytest.mark.parametrize("signal", [s for s in registry.SIGNALS if "dcgm-exporter" in s.exporters],
                         ids=lambda s: s.name)
def test_a_signal_reads_the_same_through_prometheus_as_from_its_own_aggregate(prometheus, signal):
    # A signal of other exporters' series (host_cpu, tpot) is held against their own text instead
    # (tests/scoring/test_host_cpu.py).
    gpus = samples()
    text = render_exposition(gpus)
    server = make_server(text, port=0)
    serve_in_background(server)
    try:
        prom = prometheus(f"127.0.0.1:{server.server_port}")
        prom.wait_for(dcgm.GPU_TEMP, at_least=len(gpus))
        base = default_policy()
        query = connect(replace(base.prometheus, url=prom.url))
        through_prometheus = signal.read(run_queries(query, signal.queries("")), lambda r: r.labels.get("Hostname", ""))
    finally:
        server.shutdown()
    in_memory = signal.read(signal.aggregate(gpus), lambda r: r.labels.get("node", ""))
    assert through_prometheus == in_memory
    assert in_memory, f"{signal.name}: the fleet should give it something to read"


def test_every_signal_judges_through_the_heat_model_and_explains_itself():
    read = registry.read(registry.aggregate(samples()), lambda r: r.labels.get("node", ""))
    heats = {name: node_heat(NodeTelemetry(name, 4, util_sum=40.0, util_count=4, util_max=10.0, **fields),
                             HeatPolicy()) for name, fields in read.items()}
    capped, warm = heats[SPEC.node_name(1)], heats[SPEC.node_name(2)]
    assert capped.tier is Tier.HOT and registry.explain(capped.reasons) == "throttled: power cap"
    assert warm.tier is Tier.WARM and warm.throttled == "heat"
    sick = [h for h in heats.values() if h.tier is Tier.UNHEALTHY]
    assert len(sick) == 1 and sick[0].failed_gpus and registry.explain(sick[0].reasons) is None
    shared = heats[SPEC.node_name(4)]
    assert shared.tier is Tier.WARM and registry.explain(shared.reasons) == "PCIe busy: switch 0"
