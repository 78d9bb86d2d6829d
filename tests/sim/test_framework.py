"""The scheduling framework the scheduler model runs in: every plugin the profile names is
registered at the points it implements, the first filter to refuse names the reason, and a node's
total is its weighted normalised scores."""

from __future__ import annotations

from sim.cluster_context import NO_CONTEXT
from sim.framework import Base, Cycle, default_normalize, run_cycle
from sim.plugins import REGISTRY
from sim.scheduler_profile import FILTERS, WEIGHTS
from tests.sim.test_scheduler import node, pod


def _overrides(plugin: Base, point: str) -> bool:
    return getattr(type(plugin), point) is not getattr(Base, point)


def test_every_plugin_the_profile_names_is_registered_at_its_points():
    assert set(REGISTRY) == set(FILTERS) | set(WEIGHTS)
    assert all(REGISTRY[name].name == name for name in REGISTRY)
    assert [name for name in FILTERS if not _overrides(REGISTRY[name], "filter")] == []
    assert [name for name in WEIGHTS if not _overrides(REGISTRY[name], "score")] == []


class _Refuses(Base):
    """Refuses the nodes it is told to; scores a node by its name's last digit."""

    def __init__(self, name: str, refused: set[str]) -> None:
        self.name, self.refused = name, refused  # type: ignore[misc]

    def filter(self, cycle: Cycle, node) -> str | None:
        return f"{self.name} says no" if node.name in self.refused else None

    def score(self, cycle: Cycle, node) -> int:
        return int(node.name[-1])

    def normalize(self, cycle: Cycle, scores: dict[str, int]) -> dict[str, int]:
        return default_normalize(scores, reverse=False)


def test_the_first_filter_to_refuse_names_the_reason_and_totals_are_weighted():
    nodes = [node("n1"), node("n2"), node("n4")]
    first, second = _Refuses("First", {"n1"}), _Refuses("Second", {"n1", "n2"})
    verdicts = {v.name: v for v in run_cycle(Cycle(pod(), nodes, NO_CONTEXT), [first, second], [(first, 3)])}
    assert verdicts["n1"].failed_filter == "First says no"
    assert verdicts["n2"].failed_filter == "Second says no"
    assert verdicts["n4"].feasible and verdicts["n4"].scores == {"First": 100.0} and verdicts["n4"].total == 300.0


def test_normalize_sees_only_the_feasible_nodes():
    nodes = [node("n1"), node("n2"), node("n4")]
    scorer = _Refuses("Scorer", set())
    verdicts = {v.name: v for v in run_cycle(Cycle(pod(), nodes, NO_CONTEXT), [_Refuses("Gate", {"n4"})],
                                             [(scorer, 1)])}
    # n4 is filtered out, so n2 holds the highest raw score and normalises to 100.
    assert verdicts["n2"].scores == {"Scorer": 100.0} and verdicts["n1"].scores == {"Scorer": 50.0}
    assert not verdicts["n4"].feasible and verdicts["n4"].total == 0.0
