"""A node's heat tier, and what one signal's verdict is. Pure, no I/O."""

from __future__ import annotations

import enum


class Tier(enum.IntEnum):
    """Ordered so that `max()` over verdicts gives the worst one."""

    COOL = 0
    WARM = 1
    HOT = 2
    UNHEALTHY = 3

    def __str__(self) -> str:
        return self.name.lower()


Verdict = tuple[Tier, str]
"""A tier and the reason for it, as a signal judges a node."""
