"""Node selectors as the scheduler reads them: requirements and ORed terms. Pure, no I/O.

Shared by a pod's required node affinity (`scoring.cluster.feasibility`) and a ResourceClaim's allocation,
which pins the claim's pods to the nodes that hold its devices (`scoring.cluster.claims`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scoring.cluster.objects import as_dict, as_list


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, value: str | None) -> bool:
        """`value` is the node's label (or field) value, None when absent."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt") and value is not None and len(self.values) == 1:
            # The scheduler parses both sides as integers; anything else never matches.
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if op == "Gt" else have < bound
        return False


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    """Only `metadata.name` is a node field the scheduler knows."""

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term selects nothing
        return (all(r.matches(labels.get(r.key)) for r in self.expressions)
                and all(r.matches(name if r.key == "metadata.name" else None) for r in self.fields))



def _strings(values: object) -> tuple[str, ...]:
    return tuple(str(v) for v in as_list(values) if isinstance(v, (str, int, float)) and not isinstance(v, bool))


def _requirements(items: object) -> tuple[Requirement, ...]:
    return tuple(Requirement(str(e.get("key", "")), str(e.get("operator", "")), _strings(e.get("values")))
                 for e in as_list(items) if isinstance(e, dict))



def selector_terms(selector: object) -> tuple[NodeSelectorTerm, ...]:
    """The ORed terms of a NodeSelector (`{nodeSelectorTerms: [...]}`); tolerant of mistyped fields."""
    return tuple(NodeSelectorTerm(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
                 for t in as_list(as_dict(selector).get("nodeSelectorTerms")) if isinstance(t, dict))
