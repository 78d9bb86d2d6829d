"""The throttling strategy: a node where a power cap or heat has held half or more of its GPUs
below their clocks for the whole window runs every kernel there slower; it sheds its busiest pod,
one a run, since each pod moved lowers the node's draw and the next run sees whether that was
enough. Pure, no I/O."""

from __future__ import annotations

from descheduler.proposals import Skip
from descheduler.strategies.base import Candidate, PlanInputs, Source
from scoring.heat import Tier
from scoring.policy import DeschedulerPolicy
from scoring.telemetry import WindowStats


def sustained_throttling(gpus: int, stats: WindowStats | None, policy: DeschedulerPolicy) -> str | None:
    """Why the node counts as throttled over the window, or None: at the window's low quantile,
    half or more of its GPUs were held down, with enough samples."""
    if stats is None or stats.coverage < policy.min_window_coverage or 2 * stats.low < max(1, gpus):
        return None
    return (f"{stats.low:.0f} of {gpus} GPUs held below their clocks at the low quantile over "
            f"{policy.window_seconds / 60:.0f} min")


class Throttling:
    name = "throttling"

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """Nodes hot on throttling now and over the window, the most throttled first."""
        found = []
        for name, heat in inputs.heat.items():
            if name in taken or heat.tier is not Tier.HOT or not heat.throttled:
                continue
            if window := sustained_throttling(heat.gpus, inputs.throttle_window.get(name), inputs.policy):
                found.append((inputs.throttle_window[name].low / max(1, heat.gpus), name,
                              f"throttled: {heat.throttled}; {window}"))
        found.sort(key=lambda item: (-item[0], item[1]))
        return [Source(name, reason, 1.0, _busiest_first, sheds=lambda share: 1.0) for _, name, reason in found]

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        """Nodes throttled now that this run leaves, and why."""
        return [f"{name} is throttled now ({heat.throttled}) but not over the window" for name, heat in
                sorted(inputs.heat.items()) if heat.tier is Tier.HOT and heat.throttled and name not in sources
                and not sustained_throttling(heat.gpus, inputs.throttle_window.get(name), inputs.policy)]


def _busiest_first(candidates: list[Candidate], skipped: list[Skip]) -> list[Candidate]:
    """The pod whose GPUs draw most of the node's work goes first: moving it lowers the draw most."""
    return sorted(candidates, key=lambda c: (-c[1], c[0].priority, c[0].namespace, c[0].name))


STRATEGY = Throttling()
