"""The anti-thrash ledger: what was evicted, from where and when; cooldowns and back-off. Pure,
no I/O: `descheduler.ledger_store` keeps it in a ConfigMap."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from scoring.policy import DeschedulerPolicy

DATA_KEY = "evictions.json"
SUMMARY_KEY = "last-run.json"
"""Where `descheduler.summary.RunSummary` of the last run is kept, in the same ConfigMap."""


@dataclass(frozen=True, slots=True)
class EvictionRecord:
    workload: str
    namespace: str
    pod: str
    node: str
    at: datetime


@dataclass(frozen=True)
class LedgerState:
    records: tuple[EvictionRecord, ...] = ()

    def cooldown_until(self, workload: str, now: datetime, policy: DeschedulerPolicy) -> datetime | None:
        """When the workload may be evicted again, or None if it may be now.

        Each earlier eviction within the back-off window means a replacement landed on a hot
        node again (we only ever look at pods on hot nodes), so the cooldown grows by the
        back-off factor each time.
        """
        window_start = now - timedelta(seconds=policy.backoff_window_seconds)
        recent = [r.at for r in self.records if r.workload == workload and r.at >= window_start]
        if not recent:
            return None
        cooldown = policy.cooldown_seconds * policy.backoff_factor ** (len(recent) - 1)
        until = max(recent) + timedelta(seconds=cooldown)
        return until if until > now else None

    def with_evictions(self, records: list[EvictionRecord], now: datetime, policy: DeschedulerPolicy) -> "LedgerState":
        """Add records and forget those older than the back-off window."""
        oldest = now - timedelta(seconds=policy.backoff_window_seconds)
        return LedgerState(tuple(r for r in (*self.records, *records) if r.at >= oldest))

    def to_json(self) -> str:
        return json.dumps([{"workload": r.workload, "namespace": r.namespace, "pod": r.pod, "node": r.node,
                            "at": r.at.isoformat()} for r in self.records], separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "LedgerState":
        """Raises ValueError on unreadable content: better no run than one that forgets its cooldowns."""
        try:
            rows = json.loads(text)
            return LedgerState(tuple(EvictionRecord(r["workload"], r["namespace"], r["pod"], r["node"],
                                                    datetime.fromisoformat(r["at"])) for r in rows))
        except (ValueError, KeyError, TypeError):
            raise ValueError("ledger ConfigMap content is not a list of eviction records") from None
