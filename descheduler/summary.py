"""A descheduler run in a few numbers: when, hot nodes, evicted, would-evict, skipped by reason.
Pure, no I/O: `descheduler.run` stores it in the ledger ConfigMap and as an Event; `status` shows it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from collections.abc import Sequence
from typing import Protocol

from descheduler.proposals import Plan


class Outcome(Protocol):
    """What became of one planned eviction (`descheduler.evictor.Outcome`)."""

    result: str
    done: bool

MAX_NAMES = 10
"""Hot nodes named in a summary; the count is always whole."""

_REASON_CODES = (("has not opted in", "not-opted-in"), ("opt-in unknown", "not-opted-in"),
                 ("cooldown", "cooldown"), ("limit reached", "limit"), ("no cool node", "no-room"),
                 ("does not pay", "no-payback"), ("not on duty cycle", "serving"))


def reason_code(reason: str) -> str:
    """A bounded code for a skip reason (its text names pods and namespaces)."""
    return next((code for text, code in _REASON_CODES if text in reason), "not-evictable")


@dataclass(frozen=True)
class RunSummary:
    at: datetime
    dry_run: bool
    hot_nodes: int
    hot_node_names: tuple[str, ...]
    evicted: int
    would_evict: int
    failed: int
    skipped: dict[str, int] = field(default_factory=dict)
    """Skip reason code → pods."""
    staged: int = 0
    """Evictions whose replacement's images were pulled onto its destination first."""

    def line(self) -> str:
        moved = f"would evict {self.would_evict}" if self.dry_run else f"evicted {self.evicted}"
        skips = ", ".join(f"{code} {n}" for code, n in sorted(self.skipped.items())) or "none"
        failed = f", {self.failed} failed" if self.failed else ""
        staged = f" ({self.staged} pre-staged)" if self.staged else ""
        return (f"{self.at.isoformat(timespec='seconds')}{' (dry run)' if self.dry_run else ''}: "
                f"{self.hot_nodes} hot node(s), {moved}{staged}{failed}, skipped {sum(self.skipped.values())} ({skips})")

    def to_json(self) -> str:
        return json.dumps({"at": self.at.isoformat(), "dryRun": self.dry_run, "hotNodes": self.hot_nodes,
                           "hotNodeNames": list(self.hot_node_names), "evicted": self.evicted,
                           "wouldEvict": self.would_evict, "failed": self.failed, "skipped": self.skipped,
                           "staged": self.staged})

    @staticmethod
    def from_json(text: str) -> "RunSummary":
        """Raises ValueError when the stored text is not a summary."""
        try:
            d = json.loads(text)
            return RunSummary(datetime.fromisoformat(d["at"]), bool(d["dryRun"]), int(d["hotNodes"]),
                              tuple(str(n) for n in d["hotNodeNames"]), int(d["evicted"]), int(d["wouldEvict"]),
                              int(d["failed"]), {str(k): int(v) for k, v in d["skipped"].items()},
                              int(d.get("staged", 0)))  # summaries stored before make-before-break lack it
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ValueError("the stored descheduler run summary is not readable") from None


def summarise(plan: Plan, outcomes: Sequence[Outcome], *, dry_run: bool, at: datetime, staged: int = 0) -> RunSummary:
    hot = list(plan.hot_nodes)
    skipped = Counter(reason_code(skip.reason) for skip in plan.skipped)
    failed = sum(1 for outcome in outcomes if not outcome.done)
    return RunSummary(at, dry_run, len(hot), tuple(hot[:MAX_NAMES]),
                      sum(1 for o in outcomes if o.result == "evicted"),
                      sum(1 for o in outcomes if o.result == "dry-run"), failed, dict(skipped), staged)
