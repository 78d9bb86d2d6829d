"""The anti-thrash ledger: what was evicted, from where and when; cooldowns and back-off.

`LedgerState` and its decisions are pure; `load_ledger` / `save_ledger` keep it in a ConfigMap in
the descheduler's namespace (I/O through the `kubernetes` client, injected).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from kubernetes import client
from kubernetes.client.rest import ApiException

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


def _read(core: client.CoreV1Api, policy: DeschedulerPolicy) -> client.V1ConfigMap | None:
    """The ledger ConfigMap, or None when it does not exist yet."""
    try:
        return core.read_namespaced_config_map(policy.ledger_name, policy.ledger_namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _create(core: client.CoreV1Api, data: dict[str, str], policy: DeschedulerPolicy) -> None:
    core.create_namespaced_config_map(policy.ledger_namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=policy.ledger_name, labels={"app.kubernetes.io/part-of": "gpu-balancer"}),
        data=data))


def load_ledger(core: client.CoreV1Api, policy: DeschedulerPolicy) -> tuple[LedgerState, str | None]:
    """The stored ledger and its resourceVersion (None when the ConfigMap does not exist yet)."""
    configmap = _read(core, policy)
    if configmap is None:
        return LedgerState(), None
    return LedgerState.from_json((configmap.data or {}).get(DATA_KEY, "[]")), configmap.metadata.resource_version or ""


def save_ledger(core: client.CoreV1Api, state: LedgerState, resource_version: str | None,
                policy: DeschedulerPolicy) -> None:
    data = {DATA_KEY: state.to_json()}
    if resource_version is None:
        _create(core, data, policy)
    else:
        # With the resourceVersion read, a concurrent run's write makes this one fail, not overwrite.
        metadata = {"resourceVersion": resource_version} if resource_version else {}
        core.patch_namespaced_config_map(policy.ledger_name, policy.ledger_namespace,
                                         {"metadata": metadata, "data": data})


def save_summary(core: client.CoreV1Api, summary_json: str, policy: DeschedulerPolicy) -> None:
    """Store the last run's summary beside the evictions (one key, merge-patched: no conflict with
    the ledger's own resourceVersion-guarded write)."""
    data = {SUMMARY_KEY: summary_json}
    try:
        core.patch_namespaced_config_map(policy.ledger_name, policy.ledger_namespace, {"data": data})
    except ApiException as error:
        if error.status != 404:
            raise
        _create(core, data, policy)


def load_summary(core: client.CoreV1Api, policy: DeschedulerPolicy) -> str | None:
    """The last run's stored summary (JSON), or None when no run has stored one."""
    configmap = _read(core, policy)
    return None if configmap is None else (configmap.data or {}).get(SUMMARY_KEY)
