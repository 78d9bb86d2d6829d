"""The descheduler's strategies, one module each: which nodes a run moves pods from, why, how much
each must shed and in what order its pods go. Pure, no I/O. A new strategy is one module (a
`Strategy` with its `Args` and a `scoring.plugins.Registration`) and one line in `REGISTERED`;
`descheduler.strategies` in the policy turns each on, in order, with its arguments, and
`descheduler.plan` merges their sources under the limits, the opt-in, the ledger and the payback rule."""

from __future__ import annotations

from descheduler.strategies import degraded, health, serving, throttling, utilisation
from descheduler.strategies.base import WINDOWS, Candidate, PlanInputs, Source, Strategy
from scoring.plugins import Registration, build_all
from scoring.policy import DeschedulerPolicy

REGISTERED: dict[str, Registration[Strategy]] = {r.name: r for r in (
    health.REGISTRATION, degraded.REGISTRATION, utilisation.REGISTRATION, throttling.REGISTRATION,
    serving.REGISTRATION)}
"""In the order a node is offered to them: pods on a failed GPU serve nothing, so they go first;
pods on a degraded GPU are named exactly, so they come next; then nodes hot
on utilisation, on clocks held down, and last on serving figures alone."""


def configure(policy: DeschedulerPolicy) -> tuple[Strategy, ...]:
    """The strategies `descheduler.strategies` turns on, in its order, each built from its arguments.
    PolicyError naming the entry for an unknown name or an argument that does not fit."""
    return build_all(policy.strategies, REGISTERED, "descheduler.strategies", "strategy")


__all__ = ["REGISTERED", "WINDOWS", "Candidate", "PlanInputs", "Registration", "Source", "Strategy", "configure"]
