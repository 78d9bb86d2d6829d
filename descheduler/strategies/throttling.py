"""The throttling strategy: a node where a power cap or heat has held half or more of its GPUs
below their clocks for the whole window runs every kernel there slower; it sheds its busiest pod,
one a run, since each pod moved lowers the node's draw and the next run sees whether that was
enough. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from descheduler.proposals import Skip
from descheduler.strategies.base import THROTTLING, Candidate, PlanInputs, Source
from scoring.heat import FleetHeat, Tier
from scoring.ingest.telemetry import WindowStats
from scoring.plugins import Registration
from scoring.policy import DeschedulerPolicy


@dataclass(frozen=True)
class Args:
    min_share_held: float = 0.5
    """The share of a node's GPUs that must have been held down at the window's low quantile."""

    def validate(self) -> list[str]:
        return [] if 0 < self.min_share_held <= 1 else [f"minShareHeld: must be in (0, 1], got {self.min_share_held}"]


def sustained_throttling(gpus: int, stats: WindowStats | None, policy: DeschedulerPolicy,
                         args: Args = Args()) -> str | None:
    """Why the node counts as throttled over the window, or None: at the window's low quantile,
    `minShareHeld` of its GPUs (half, by default) or more were held down, with enough samples."""
    if stats is None or stats.coverage < policy.min_window_coverage or stats.low < args.min_share_held * max(1, gpus):
        return None
    return (f"{stats.low:.0f} of {gpus} GPUs held below their clocks at the low quantile over "
            f"{policy.window_seconds / 60:.0f} min")


class Throttling:
    name = THROTTLING

    def __init__(self, args: Args = Args()) -> None:
        self.args = args

    def windows(self, fleet: FleetHeat) -> tuple[str, ...]:
        """Only a node throttled now can be a source: no range query over every GPU otherwise."""
        return (THROTTLING,) if any(node.throttled for node in fleet.nodes) else ()

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """Nodes hot on throttling now and over the window, the most throttled first."""
        found = []
        for name, heat in inputs.heat.items():
            if name in taken or heat.tier is not Tier.HOT or not heat.throttled:
                continue
            if window := sustained_throttling(heat.gpus, inputs.throttling.get(name), inputs.policy, self.args):
                found.append((inputs.throttling[name].low / max(1, heat.gpus), name,
                              f"throttled: {heat.throttled}; {window}"))
        found.sort(key=lambda item: (-item[0], item[1]))
        return [Source(name, reason, 1.0, _busiest_first, sheds=lambda share: 1.0) for _, name, reason in found]

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        """Nodes throttled now that this run leaves, and why."""
        return [f"{name} is throttled now ({heat.throttled}) but not over the window" for name, heat in
                sorted(inputs.heat.items()) if heat.tier is Tier.HOT and heat.throttled and name not in sources
                and not sustained_throttling(heat.gpus, inputs.throttling.get(name), inputs.policy, self.args)]


def _busiest_first(candidates: list[Candidate], skipped: list[Skip]) -> list[Candidate]:
    """The pod whose GPUs draw most of the node's work goes first: moving it lowers the draw most."""
    return sorted(candidates, key=lambda c: (-c[1], c[0].priority, c[0].namespace, c[0].name))


REGISTRATION = Registration(THROTTLING, Args, Throttling)
