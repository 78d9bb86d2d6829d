"""The descheduler's strategies, one module each: which nodes a run moves pods from, why, how much
each must shed and in what order its pods go. Pure, no I/O. A new strategy is one module (a
`Strategy`, `strategies.base`) and one line in `STRATEGIES`; `descheduler.plan` merges their
sources under the limits, the opt-in, the ledger and the payback rule."""

from __future__ import annotations

from descheduler.strategies import health, serving, throttling, utilisation
from descheduler.strategies.base import Candidate, PlanInputs, Source, Strategy

STRATEGIES: tuple[Strategy, ...] = (health.STRATEGY, utilisation.STRATEGY, throttling.STRATEGY, serving.STRATEGY)
"""In order: a node an earlier strategy claims is not offered to a later one. Pods on a failed GPU
serve nothing, so they go first; then nodes hot on utilisation, on clocks held down, and last on
their serving figures alone."""

__all__ = ["STRATEGIES", "Candidate", "PlanInputs", "Source", "Strategy"]
