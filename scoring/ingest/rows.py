"""What Prometheus answers, as the product reads it: one series of an instant vector, and the
selector every query is built from. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class Series(NamedTuple):
    """One series of an instant vector: its labels and its value. (A named tuple: a refresh at
    5,000 nodes makes 57,000 of them, and one costs two thirds of a frozen dataclass to build.)"""

    labels: Mapping[str, str]
    value: float


def selector(metric: str, matchers: str, *extra: str) -> str:
    """`metric{extra..., matchers}` — the policy's series selector joined into every query."""
    parts = [*extra, matchers] if matchers else list(extra)
    return f"{metric}{{{', '.join(parts)}}}"
