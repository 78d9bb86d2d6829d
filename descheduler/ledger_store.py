"""The ledger's ConfigMap in the descheduler's namespace: the eviction records and the last run's
summary, read and written through the `kubernetes` client (injected; does I/O)."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from descheduler.ledger import DATA_KEY, SUMMARY_KEY, EvictionRecord, LedgerState
from scoring.policy import DeschedulerPolicy

CONFLICT_ATTEMPTS = 5
"""Writes tried against a ledger others keep changing (409) before the run gives up on it."""


class LedgerConflict(RuntimeError):
    """The ledger changed under every attempt to add this run's records."""


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


def record_evictions(core: client.CoreV1Api, records: list[EvictionRecord], now, policy: DeschedulerPolicy,
                     read: tuple[LedgerState, str | None]) -> LedgerState:
    """Add this run's `records` to the stored ledger; `read` is what the run planned with. Another
    writer since (a run overlapping this one, an operator's edit) makes the guarded write fail with
    409: then the ledger is read again and the records added to what is there now, so neither the
    other writer's records nor this run's are lost. Returns what was stored."""
    state, version = read
    for _ in range(CONFLICT_ATTEMPTS):
        updated = state.with_evictions(records, now, policy)
        try:
            save_ledger(core, updated, version, policy)
            return updated
        except ApiException as error:
            if error.status != 409:  # 409: the resourceVersion moved on, or a create lost the race
                raise
        state, version = load_ledger(core, policy)
    raise LedgerConflict(f"ledger ConfigMap {policy.ledger_namespace}/{policy.ledger_name} changed under "
                         f"{CONFLICT_ATTEMPTS} attempts to record {len(records)} evictions")


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
