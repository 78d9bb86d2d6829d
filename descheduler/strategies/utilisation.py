"""The utilisation strategy: nodes whose GPUs have been busy over the whole window shed the pods
that best cover their excess. Pure, no I/O.

A node is a source only when it is hot now *and* has been over the window (mean and a low
quantile, with enough samples): a spike of seconds never triggers an eviction. A pod whose model
server reports its serving series is not moved on duty cycle: a continuous-batching server keeps
its GPU 89–99 % busy from its first request (issue 47), so the duty cycle says nothing of how it
serves; its own figures do, and the serving strategy reads them."""

from __future__ import annotations

from descheduler.proposals import Skip
from descheduler.strategies.base import UTILISATION, Candidate, PlanInputs, Source
from scoring.heat import FleetHeat, Tier
from scoring.ingest.telemetry import WindowStats
from scoring.plugins import NoArgs, Registration
from scoring.policy import DeschedulerPolicy

SERVES = "serves requests: moved on its serving figures (the serving strategy), not on duty cycle"
MAX_NOT_SUSTAINED_NOTES = 5
"""Nodes hot now but not sustained-hot named in the notes; the rest are counted."""


def sustained_hot(name: str, stats: WindowStats | None, policy: DeschedulerPolicy) -> str | None:
    """Why the node counts as sustained-hot, or None."""
    if stats is None or stats.coverage < policy.min_window_coverage:
        return None
    if stats.mean >= policy.sustained_util_percent and stats.low >= policy.low_quantile_util_percent:
        return (f"GPU util {stats.mean:.0f}% mean, {stats.low:.0f}% low over {policy.window_seconds / 60:.0f} min "
                f"≥ {policy.sustained_util_percent:g}%")
    return None


def not_sustained(stats: WindowStats | None, policy: DeschedulerPolicy) -> str:
    """Why a node hot now is not sustained-hot: too little history, or a window below the bars."""
    minutes = policy.window_seconds / 60
    if stats is None:
        return f"no utilisation history yet (the window needs {policy.min_window_coverage:.0%} of {minutes:.0f} min)"
    if stats.coverage < policy.min_window_coverage:
        return (f"{stats.coverage * minutes:.1f} of {minutes:.0f} min of history, and the window needs "
                f"{policy.min_window_coverage:.0%} ({policy.min_window_coverage * minutes:.0f} min)")
    return (f"GPU util {stats.mean:.0f}% mean, {stats.low:.0f}% low over {minutes:.0f} min; sustained needs "
            f"≥ {policy.sustained_util_percent:g}% mean and ≥ {policy.low_quantile_util_percent:g}% low")


class Utilisation:
    name = UTILISATION

    def windows(self, fleet: FleetHeat) -> tuple[str, ...]:
        return (UTILISATION,)

    def sources(self, inputs: PlanInputs, taken: set[str]) -> list[Source]:
        """Sustained-hot nodes, the hottest over the window first."""
        found = [(name, reason) for name, n in inputs.heat.items() if name not in taken and n.tier is Tier.HOT
                 and (reason := sustained_hot(name, inputs.utilisation.get(name), inputs.policy))]
        found.sort(key=lambda item: -inputs.utilisation[item[0]].mean)
        return [self._source(inputs, name, reason) for name, reason in found]

    def notes(self, inputs: PlanInputs, sources: set[str]) -> list[str]:
        """The nodes `status` shows hot that this run does not act on, and why."""
        notes = [] if sources else ["no node has been hot over the whole window"]
        hot_now = sorted(name for name, n in inputs.heat.items() if n.tier is Tier.HOT and name not in sources)
        notes += [f"{name} is hot now but not sustained-hot: {not_sustained(inputs.utilisation.get(name), inputs.policy)}"
                  for name in hot_now[:MAX_NOT_SUSTAINED_NOTES]]
        if len(hot_now) > MAX_NOT_SUSTAINED_NOTES:
            notes.append(f"{len(hot_now) - MAX_NOT_SUSTAINED_NOTES} more node(s) hot now but not sustained-hot")
        return notes

    @staticmethod
    def _source(inputs: PlanInputs, name: str, reason: str) -> Source:
        excess = inputs.heat[name].gpu_util - inputs.policy.sustained_util_percent

        def rank(item: Candidate) -> tuple:
            pod, share = item
            covers = share >= excess
            # Smallest pod that alone brings the node below the threshold; else the biggest.
            return (0 if covers else 1, share if covers else -share, pod.priority, -inputs.running[pod.workload],
                    pod.namespace, pod.name)

        node = inputs.snapshot.by_name.get(name)
        serving = {(r.namespace, r.pod) for r in node.serving} if node is not None else set()

        def order(candidates: list[Candidate], skipped: list[Skip]) -> list[Candidate]:
            skipped.extend(Skip(pod.namespace, pod.name, SERVES) for pod, _ in candidates
                           if (pod.namespace, pod.name) in serving)
            return sorted((c for c in candidates if (c[0].namespace, c[0].name) not in serving), key=rank)

        return Source(name, reason, excess, order, sheds=lambda share: share)


REGISTRATION = Registration(UTILISATION, NoArgs, lambda args: Utilisation())
"""Its thresholds are the descheduler's own (`sustainedUtilPercent`, `lowQuantileUtilPercent`):
`targetUtilPercent`, which every strategy's destinations share, is checked against them."""
