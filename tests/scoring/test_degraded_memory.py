"""A degraded GPU is remembered (issue 47, item 3): once a GPU's clock under load was found well
under its peers', its node stays warm for `memorySeconds` after, though the GPU now idles and parks
its clock. Read through a real Prometheus that scraped the slow GPU busy and then idle, raw (a
subquery) and through the recording rules (`max_over_time` of the record)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scoring import dcgm
from scoring.ingest import recording
from scoring.ingest.prometheus import connect, read_snapshot
from scoring.ingest.signals.base import highest_over
from scoring.ingest.signals.degraded import Degraded, degraded_gpus
from scoring.ingest.signals.registry import memories
from scoring.policy import default_policy, parse_policy
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from tests.polling import wait_until
from tests.scoring.test_degraded import samples

SLOW = ("n1", 3)


def text(busy: bool) -> str:
    """Three busy 8-GPU nodes; n1's GPU 3 at 1,320 MHz under load, or idle at its parked clock."""
    found = samples({SLOW: 1320.0})
    if not busy:
        found = [replace(s, util_percent=0.0, sm_clock_mhz=345.0) if (s.node, int(s.gpu)) == SLOW else s
                 for s in found]
    return render_exposition(found)


def test_the_memory_is_an_argument_and_zero_turns_it_off():
    assert memories(default_policy().heat) == {"degraded_clocks": 3600}
    off = parse_policy("heat:\n  signals:\n  - name: degraded\n    args: {memorySeconds: 0}\n")
    assert memories(off.heat) == {}


@pytest.mark.parametrize("recorded", [False, True])
def test_a_slow_gpu_gone_idle_keeps_its_node_warm_through_prometheus(prometheus, recorded):
    served = {"busy": True}
    server = make_server(lambda: text(served["busy"]), port=0)
    serve_in_background(server)
    try:
        # Six minutes: the raw read's subquery then steps every 30 s, so the test waits at most that.
        heat = parse_policy("heat:\n  signals:\n  - name: degraded\n    args: {memorySeconds: 360}\n").heat
        policy = replace(default_policy(), heat=heat)
        prom = prometheus(f"127.0.0.1:{server.server_port}", recorded=recorded, policy=policy)
        policy = replace(policy, prometheus=replace(policy.prometheus, url=prom.url))
        forgetful = replace(policy, heat=parse_policy(
            "heat:\n  signals:\n  - name: degraded\n    args: {memorySeconds: 0}\n").heat)

        def slow_gpus(chosen):
            snapshot = read_snapshot(connect(chosen.prometheus), chosen)
            assert snapshot.source == ("recording rules" if recorded else "raw queries")
            return {n.name: [unit for unit, *_ in degraded_gpus(n)] for n in snapshot.nodes if degraded_gpus(n)}

        if recorded:
            prom.wait_for(recording.snapshot_record("degraded_clocks"))
        else:
            prom.wait_for(dcgm.SM_CLOCK, at_least=24)
        wait_until(lambda: slow_gpus(forgetful) == {"n1": ["3"]}, "the slow GPU read now", timeout=60, interval=0.5)
        if not recorded:  # the raw memory holds what its subquery's 30 s steps saw
            prom.wait_for(highest_over(Degraded().queries("")["degraded_clocks"], 360))
        served["busy"] = False  # the pod on it goes; the GPU idles and parks its clock
        wait_until(lambda: slow_gpus(forgetful) == {}, "the idle GPU read as not slow now", timeout=60, interval=0.5)
        assert slow_gpus(policy) == {"n1": ["3"]}  # but it was slow within the span
    finally:
        server.shutdown()
