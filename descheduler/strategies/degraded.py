"""The degraded strategy: a pod on a GPU whose clock under load sits well under its model's median
(`scoring.ingest.signals.degraded`), or whose replica's TPOT runs well over its like peers'
(`scoring.ingest.signals.tpot`), serves every step slower than its peers; it moves where the
payback rule, priced on the share of its service the slow clock costs, says the move pays. Pure,
no I/O.

The share a move recovers is 1 − the GPU's clock over its peers' median (a step stretches as the
clock falls: the assumption the serving world's degraded GPUs make too). Judged on what the signal
reads, which remembers a slow GPU for its `memorySeconds`: an outlier GPU stays slow, and a
hardware slowdown short enough not to pay is priced by the same rule's horizon. A slow replica
still serves; evicting it serves nothing until its replacement is ready, so it stays where its
workload's other replicas could not take its traffic meanwhile (the serving strategy's rule,
`would_overload_peers`)."""

from __future__ import annotations

from functools import partial

from descheduler.strategies.base import PlanInputs, Source
from descheduler.strategies.serving import keep_peers_serving
from scoring.heat import FleetHeat
from scoring.ingest.signals.degraded import NAME, degraded_gpus
from scoring.ingest.signals.tpot import slow_gpus
from scoring.ingest.telemetry import NodeTelemetry
from scoring.plugins import NoArgs, Registration


def _lost(node: NodeTelemetry) -> dict[str, float]:
    """Unit → the share of a step its slowness costs: 1 − its clock over its peers', or 1 − its
    replica's peers' TPOT over its own (the TPOT signal), the larger where both found it."""
    lost = {unit: 1.0 - clock / peers for unit, clock, peers in degraded_gpus(node) if peers > 0}
    for unit, ratio in slow_gpus(node):
        lost[unit] = max(lost.get(unit, 0.0), 1.0 - 1.0 / ratio)
    return lost


class Degraded:
    name = NAME

    def windows(self, fleet: FleetHeat) -> tuple[str, ...]:
        return ()

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """Nodes with a workload pod on a degraded GPU, the slowest GPU first."""
        found = []
        for name, node in inputs.snapshot.by_name.items():
            if name in taken or not (lost := _lost(node)):
                continue
            on_slow = {(p.namespace, p.name): max(lost.get(g, 0.0) for g in p.gpu_ids) for p in node.pods
                       if lost.keys() & set(p.gpu_ids)}
            if on_slow:
                said = ", ".join([f"GPU {unit} at {clock:,.0f} of {peers:,.0f} MHz" for unit, clock, peers in
                                  degraded_gpus(node)] + [f"GPU {unit}'s replica at {ratio:.2f}× its peers' TPOT"
                                                          for unit, ratio in slow_gpus(node)])
                replicas = {(r.namespace, r.pod): r for r in node.serving}
                # The slowest GPU's pod first; one whose peers could not take its traffic stays.
                order = partial(keep_peers_serving, rank={key: (-share, *key) for key, share in on_slow.items()},
                                replicas=replicas, running=inputs.running)
                found.append((max(on_slow.values()), name, Source(
                    name, f"degraded: {said} under load", float(len(on_slow)), order,
                    sheds=lambda share: 1.0, recovers=lambda pod, on_slow=on_slow: on_slow[pod.namespace, pod.name])))
        found.sort(key=lambda item: (-item[0], item[1]))
        return [source for *_, source in found]

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        """Degraded GPUs no workload pod is named on: the next pod given one will be slow there."""
        return [f"{name} has a degraded GPU ({', '.join(f'GPU {u}' for u, *_ in slow)}) and no workload pod on it "
                "to move" for name, node in sorted(inputs.snapshot.by_name.items())
                if name not in sources and (slow := degraded_gpus(node))]


REGISTRATION = Registration(NAME, NoArgs, lambda args: Degraded())
"""On by default since the signal remembers slow GPUs: a replacement is no longer steered to a node
whose slow GPU idles unseen, and on `llm-degraded-gpus` gpu-balancer's mean TTFT p99 fell from
13,181 ms with it off to 9,625 with it on (BENCHMARKS, "A degraded GPU remembered")."""
