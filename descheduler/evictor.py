"""The evictor: carries out a plan through the Eviction API and leaves an Event per eviction.

Does I/O with the official `kubernetes` client (APIs injected). It alone owns dry-run: with
`dry_run` it evicts nothing, and its only write is a `WouldEvict` Event per planned eviction
(when it has the Events API), so the choices show in `kubectl get events` before it acts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from descheduler.plan import Plan, PlannedEviction

log = logging.getLogger("gpu_balancer.descheduler")
REPORTER = "gpu-balancer.io/descheduler"


@dataclass(frozen=True, slots=True)
class Outcome:
    eviction: PlannedEviction
    result: str
    """"evicted", "dry-run", "gone" (already deleted: done), "blocked" (PDB, 429) or "error"."""
    detail: str = ""

    @property
    def done(self) -> bool:
        return self.result in ("evicted", "dry-run", "gone")


def _event(kind: str, name: str, namespace: str, *, action: str, reason: str, note: str, now: datetime,
           instance: str) -> client.EventsV1Event:
    return client.EventsV1Event(
        # Named as kubelet names its Events (object, a dot, a hex time): unique per object and run.
        metadata=client.V1ObjectMeta(name=f"{name}.{int(now.timestamp() * 1e9):x}", namespace=namespace),
        event_time=now, action=action, reason=reason, type="Normal", note=note[:1024],
        reporting_controller=REPORTER, reporting_instance=instance,
        regarding=client.V1ObjectReference(api_version="v1", kind=kind, name=name, namespace=namespace))


def _eviction_event(eviction: PlannedEviction, now: datetime, instance: str, *, dry_run: bool = False
                    ) -> client.EventsV1Event:
    what = ("Would be evicted by gpu-balancer (dry run: nothing was evicted)" if dry_run
            else "Evicted by gpu-balancer")
    return _event("Pod", eviction.pod, eviction.namespace, action="Evict",
                  reason="WouldEvict" if dry_run else "GpuNodeSustainedHot", now=now, instance=instance,
                  note=f"{what} from {eviction.node} so its controller recreates it on a cooler node: "
                       f"{eviction.reason}")


def _create(events: client.EventsV1Api, event: client.EventsV1Event) -> None:
    try:
        events.create_namespaced_event(event.metadata.namespace, event)
    except ApiException as error:  # a missing Event is not worth failing the run for
        log.warning("could not record an Event for %s %s/%s: %s", event.regarding.kind, event.metadata.namespace,
                    event.regarding.name, error.status)


def carry_out(plan: Plan, core: client.CoreV1Api | None, events: client.EventsV1Api | None, *, dry_run: bool,
              now: datetime, instance: str = "gpu-balancer-descheduler") -> list[Outcome]:
    outcomes = []
    for eviction in plan.evictions:
        if dry_run or core is None:
            outcomes.append(Outcome(eviction, "dry-run"))
            log.info("would evict %s/%s from %s: %s", eviction.namespace, eviction.pod, eviction.node, eviction.reason)
            _record(events, eviction, now, instance, dry_run=True)
            continue
        # Typed in full: the client sends no apiVersion or kind unless told, and a server that
        # reads the body as some other version would not treat it as an Eviction.
        body = client.V1Eviction(api_version="policy/v1", kind="Eviction",
                                 metadata=client.V1ObjectMeta(name=eviction.pod, namespace=eviction.namespace))
        try:
            core.create_namespaced_pod_eviction(eviction.pod, eviction.namespace, body)
        except ApiException as error:
            if error.status == 404:
                outcomes.append(Outcome(eviction, "gone", "pod already deleted"))
            elif error.status == 429:
                # A PodDisruptionBudget allows no disruption now; not retried in this run.
                outcomes.append(Outcome(eviction, "blocked", "a PodDisruptionBudget allows no disruption now"))
            elif error.status == 500:
                log.error("eviction of %s/%s failed with 500: its PodDisruptionBudgets are misconfigured "
                          "(several select it?)", eviction.namespace, eviction.pod)
                outcomes.append(Outcome(eviction, "error", "500 from the API server: misconfigured PodDisruptionBudget"))
            else:
                log.error("eviction of %s/%s failed: %s %s", eviction.namespace, eviction.pod, error.status, error.reason)
                outcomes.append(Outcome(eviction, "error", f"{error.status} {error.reason}"))
            continue
        outcomes.append(Outcome(eviction, "evicted"))
        log.info("evicted %s/%s from %s: %s", eviction.namespace, eviction.pod, eviction.node, eviction.reason)
        _record(events, eviction, now, instance, dry_run=False)
    return outcomes


def _record(events: client.EventsV1Api | None, eviction: PlannedEviction, now: datetime, instance: str, *,
            dry_run: bool) -> None:
    if events is not None:
        _create(events, _eviction_event(eviction, now, instance, dry_run=dry_run))


def record_run(events: client.EventsV1Api | None, line: str, *, namespace: str, configmap: str, now: datetime,
               instance: str = "gpu-balancer-descheduler") -> None:
    """One Event per run, on the ledger ConfigMap, with the run's summary line."""
    if events is not None:
        _create(events, _event("ConfigMap", configmap, namespace, action="Deschedule", reason="DeschedulerRun",
                               note=line, now=now, instance=instance))
