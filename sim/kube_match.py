"""Kubernetes matching rules the scheduler model filters and scores with: label selectors, node
selector terms, tolerations. Pure, no I/O.

Deliberately separate from `scoring.cluster.feasibility` (which the webhook runs): the scheduler model is
the oracle that the webhook's feasibility is tested against, so it must not share its code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scoring.cluster.workloads import as_dict, as_list

Labels = Mapping[str, str]
Selector = Callable[[Labels], bool]

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def nothing(_labels: Labels) -> bool:
    return False


def everything(_labels: Labels) -> bool:
    return True


def valid_key(key: object) -> bool:
    """A qualified label key: an optional DNS-subdomain prefix and a name of at most 63 characters."""
    if not isinstance(key, str) or not key:
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_NAME.match(name))


def valid_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_VALUE.match(value))


def _requirement(expression: Mapping[str, Any], *, numeric: bool) -> Callable[[Labels], bool] | None:
    """One requirement as the API machinery parses it, or None where it is invalid."""
    key, operator = expression.get("key"), expression.get("operator")
    values = expression.get("values") or []
    if not valid_key(key) or not isinstance(values, list):
        return None
    if operator in ("In", "NotIn"):
        if not values or not all(valid_value(v) for v in values):
            return None
        allowed = frozenset(values)
        if operator == "In":
            return lambda labels: key in labels and labels[key] in allowed
        return lambda labels: key not in labels or labels[key] not in allowed
    if operator in ("Exists", "DoesNotExist"):
        if values:
            return None
        return (lambda labels: key in labels) if operator == "Exists" else (lambda labels: key not in labels)
    if numeric and operator in ("Gt", "Lt") and len(values) == 1:
        bound = _integer(values[0])
        if bound is None:
            return None

        def compare(labels: Labels) -> bool:
            value = _integer(labels.get(key))
            return value is not None and (value > bound if operator == "Gt" else value < bound)
        return compare
    return None


def _integer(value: object) -> int | None:
    if not isinstance(value, str) or not re.fullmatch(r"[-+]?\d+", value.strip()):
        return None
    return int(value)


def label_selector(selector: object) -> Selector:
    """A metav1.LabelSelector: absent (None) selects nothing, `{}` everything, an invalid one nothing."""
    if selector is None or not isinstance(selector, dict):
        return nothing
    checks: list[Callable[[Labels], bool]] = []
    for key, value in as_dict(selector.get("matchLabels")).items():
        if not valid_key(key) or not valid_value(value):
            return nothing
        checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
    for expression in as_list(selector.get("matchExpressions")):
        check = _requirement(as_dict(expression), numeric=False)
        if check is None:
            return nothing
        checks.append(check)
    if not checks:
        return everything
    return lambda labels: all(check(labels) for check in checks)


def with_label_keys(selector: Selector, labels: Labels, match_keys: Iterable[object],
                    mismatch_keys: Iterable[object] = ()) -> Selector:
    """`matchLabelKeys` / `mismatchLabelKeys`: the selector narrowed by the pod's own values."""
    same = {k: labels[k] for k in match_keys if isinstance(k, str) and k in labels}
    different = {k: labels[k] for k in mismatch_keys if isinstance(k, str) and k in labels}
    if not same and not different:
        return selector
    return lambda other: (selector(other) and all(other.get(k) == v for k, v in same.items())
                          and all(other.get(k) != v for k, v in different.items()))


def node_selector_term(term: object) -> Callable[[str, Labels], bool]:
    """One NodeSelectorTerm as a predicate on a node's name (for matchFields) and labels. An
    empty term, or one with any invalid requirement, matches nothing."""
    term = as_dict(term)
    expressions = [_requirement(as_dict(e), numeric=True) for e in as_list(term.get("matchExpressions"))]
    fields = [_field(as_dict(f)) for f in as_list(term.get("matchFields"))]
    if (not expressions and not fields) or None in expressions or None in fields:
        return lambda _name, _labels: False
    return lambda name, labels: (all(f(name) for f in fields)  # type: ignore[misc]
                                 and all(e(labels) for e in expressions))  # type: ignore[misc]


def _field(expression: Mapping[str, Any]) -> Callable[[str], bool] | None:
    values = expression.get("values") or []
    if expression.get("key") != "metadata.name" or not isinstance(values, list) or len(values) != 1:
        return None
    if expression.get("operator") == "In":
        return lambda name: name == values[0]
    if expression.get("operator") == "NotIn":
        return lambda name: name != values[0]
    return None


def tolerates(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any toleration tolerates the taint (key, effect, then Equal or Exists)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        if toleration.get("key") and toleration.get("key") != taint.get("key"):
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")):
            return True
    return False
