"""The health strategy: a GPU that reported a critical XID (double-bit ECC, fallen off the bus…)
needs a reset, and the pods the exporter names on it serve nothing there: they move, all in one
run, whatever the payback rule says. Pure, no I/O.

dcgm-exporter's XID gauge holds the last code until the exporter restarts, so a pod placed on the
GPU after the fault would be moved too; the workload cooldown bounds that to one move a cooldown,
and the device plugin, which marks such a GPU unhealthy, keeps new pods off it."""

from __future__ import annotations

from descheduler.proposals import Skip
from descheduler.strategies.base import Candidate, PlanInputs, Source
from scoring.heat import FleetHeat
from scoring.plugins import NoArgs, Registration


class Health:
    name = "health"

    def windows(self, fleet: FleetHeat) -> tuple[str, ...]:
        return ()

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """Nodes with a workload pod on a failed GPU, by name."""
        found = []
        for name, heat in sorted(inputs.heat.items()):
            node = inputs.snapshot.by_name.get(name)
            if name in taken or node is None or not heat.failed_gpus:
                continue
            failed = dict(heat.failed_gpus)
            stranded = {(p.namespace, p.name) for p in node.pods if failed.keys() & set(p.gpu_ids)}
            if stranded:
                xids = ", ".join(f"GPU {gpu} XID {xid}" for gpu, xid in heat.failed_gpus)
                found.append(Source(name, f"failed GPU: {xids}", float(len(stranded)), self._order(stranded),
                                    sheds=lambda share: 1.0, weigh_payback=False))
        return found

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        """Failed GPUs no workload pod is named on: nothing to move, the node needs its GPU reset."""
        return [f"{name} has a failed GPU ({', '.join(f'GPU {g} XID {x}' for g, x in heat.failed_gpus)}) and no "
                "workload pod on it to move" for name, heat in sorted(inputs.heat.items())
                if heat.failed_gpus and name not in sources]

    @staticmethod
    def _order(stranded: set[tuple[str, str]]):
        def order(candidates: list[Candidate], skipped: list[Skip]) -> list[Candidate]:
            return [(pod, share) for pod, share in candidates if (pod.namespace, pod.name) in stranded]
        return order


REGISTRATION = Registration("health", NoArgs, lambda args: Health())
