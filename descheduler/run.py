"""One descheduler run: telemetry, cluster, ledger → plan → evictions → report (I/O at the edges)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from typing import Any

from kubernetes import client

from descheduler.cluster import Cluster, cluster_from_objects
from descheduler.evictor import Outcome, carry_out, record_run
from descheduler.ledger import EvictionRecord, LedgerState
from descheduler.ledger_store import LedgerConflict, load_ledger, record_evictions, save_summary
from descheduler import prestage, step
from descheduler.plan import Plan, PlannedEviction
from descheduler.strategies.base import SERVING, THROTTLING, UTILISATION, serve_window
from descheduler.summary import RunSummary, summarise
from scoring.ingest.prometheus import (QueryFn, read_serving_window, read_snapshot, read_throttle_window, read_window)
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import BalancerPolicy

log = logging.getLogger("gpu_balancer.descheduler")


@dataclass(frozen=True)
class Report:
    dry_run: bool
    plan: Plan
    outcomes: tuple[Outcome, ...]
    summary: RunSummary | None = None
    ledger_error: str | None = None
    """Why this run's evictions are not in the ledger (their cooldowns unrecorded), if they are not."""
    staging: tuple[prestage.Staging, ...] = ()
    """Make-before-break, one per planned eviction in order (live runs only)."""
    prestage_deadline_seconds: float = 0.0

    @cached_property
    def _staging_of(self) -> dict[PlannedEviction, prestage.Staging]:
        return dict(zip(self.plan.evictions, self.staging))

    def staged(self, eviction: PlannedEviction) -> str:
        """What was (or, in a dry run, would be) done on the eviction's destination before it."""
        found = self._staging_of.get(eviction)
        return found.describe() if found is not None else prestage.planned_staging(
            eviction, self.prestage_deadline_seconds)

    def as_dict(self) -> dict:
        def entry(outcome: Outcome) -> dict:
            e = outcome.eviction
            move = {} if e.payback is None else {"gain_seconds": round(e.payback.gain_seconds, 1),
                                                 "restart_seconds": round(e.payback.restart_seconds, 1)}
            return {"namespace": e.namespace, "pod": e.pod, "node": e.node, "reason": e.reason, **move,
                    "destination": e.destination, "prestage": self.staged(e)}

        failed = [o for o in self.outcomes if not o.done]
        return {
            "dry_run": self.dry_run,
            "hot_nodes": list(self.plan.hot_nodes),
            "evictions": [entry(o) for o in self.outcomes if o.done and o.result != "dry-run"],
            "would_evict": [entry(o) for o in self.outcomes if o.result == "dry-run"],
            "skipped": [{"namespace": s.namespace, "pod": s.pod, "reason": s.reason} for s in self.plan.skipped]
            + [{"namespace": o.eviction.namespace, "pod": o.eviction.pod, "reason": o.detail} for o in failed],
            "notes": [*self.plan.notes, *([f"ledger not updated: {self.ledger_error}"] if self.ledger_error else [])],
            **({"summary": json.loads(self.summary.to_json())} if self.summary else {}),
        }

    @property
    def errors(self) -> int:
        return sum(1 for o in self.outcomes if o.result == "error") + (1 if self.ledger_error else 0)


def live_cluster(core: client.CoreV1Api, policy: BalancerPolicy) -> Cluster:
    serialise = core.api_client.sanitize_for_serialization
    namespaces = [dict(serialise(n), kind="Namespace") for n in core.list_namespace().items]
    nodes = [dict(serialise(n), kind="Node") for n in core.list_node().items]
    pods = [dict(serialise(p), kind="Pod") for p in core.list_pod_for_all_namespaces().items]
    return cluster_from_objects(namespaces + nodes + _dra_objects(client.ResourceV1Api(core.api_client)) + pods,
                                policy.placement, policy.opt_in)


def _dra_objects(resource: client.ResourceV1Api) -> list[dict]:
    """ResourceSlices, ResourceClaims and templates; none where the cluster does not serve DRA
    (404) or the role lacks the grant (403): DRA pods then count as asking for no GPU, never moved."""
    serialise = resource.api_client.sanitize_for_serialization
    objects: list[dict] = []
    for kind, list_all in (("ResourceSlice", resource.list_resource_slice),
                           ("ResourceClaim", resource.list_resource_claim_for_all_namespaces),
                           ("ResourceClaimTemplate", resource.list_resource_claim_template_for_all_namespaces)):
        try:
            objects += [dict(serialise(o), kind=kind) for o in list_all().items]
        except client.ApiException as error:
            if error.status not in (403, 404):
                raise
            log.warning("cannot list %ss (%s): pods claiming GPUs through DRA are left alone", kind,
                        "not served" if error.status == 404 else "forbidden")
    return objects


class PrometheusTelemetry:
    """What a run reads, from Prometheus (`descheduler.step.DeschedulerTelemetry`)."""

    def __init__(self, query: QueryFn, policy: BalancerPolicy) -> None:
        self._query, self._policy = query, policy
        self.where = f"Prometheus at {policy.prometheus.url}"

    def snapshot(self) -> ClusterSnapshot:
        return read_snapshot(self._query, self._policy)

    def window(self, name: str, snapshot: ClusterSnapshot) -> Mapping[Any, Any]:
        query, policy = self._query, self._policy
        return serve_window({UTILISATION: lambda: read_window(query, policy),
                             SERVING: lambda: read_serving_window(query, policy, snapshot),
                             THROTTLING: lambda: read_throttle_window(query, policy)}, name, "Prometheus")


def run_once(policy: BalancerPolicy, *, query: QueryFn, cluster: Cluster, now: Callable[[], datetime],
             core: client.CoreV1Api | None = None, events: client.EventsV1Api | None = None,
             dry_run: bool = True) -> Report:
    """Plan and (unless `dry_run` or no API) evict. Raises `TelemetryError` — zero evictions —
    when Prometheus cannot be read or its telemetry is stale."""
    source = PrometheusTelemetry(query, policy)
    found = step.assess(source, policy, now)
    taken = found.at
    ledger, version = load_ledger(core, policy.descheduler) if core is not None else (LedgerState(), None)
    plan = step.plan(source, found, cluster=cluster, ledger=ledger, policy=policy)
    deadline = policy.descheduler.prestage_deadline_seconds
    # Make-before-break: the replacements' images go to their destinations before the pods go.
    staging = prestage.stage(core, plan.evictions, namespace=policy.descheduler.ledger_namespace,
                             deadline_seconds=deadline) if not dry_run and core is not None and plan.evictions else ()
    outcomes = carry_out(plan, core, events, dry_run=dry_run, now=taken)
    evicted = [o.eviction for o in outcomes if o.result == "evicted"]
    ledger_error = None
    if evicted and core is not None:
        records = [EvictionRecord(e.workload, e.namespace, e.pod, e.node, taken) for e in evicted]
        try:
            record_evictions(core, records, taken, policy.descheduler, read=(ledger, version))
        except LedgerConflict as error:  # the evictions happened: report them, and say what was not kept
            log.error("%s: their cooldowns are not recorded", error)
            ledger_error = str(error)
    report = Report(dry_run or core is None, plan, tuple(outcomes), ledger_error=ledger_error, staging=staging,
                    prestage_deadline_seconds=deadline)
    summary = summarise(plan, report.outcomes, dry_run=report.dry_run, at=taken,
                        staged=sum(1 for s in staging if s.result == "pulled"))
    if core is not None:
        # Every run, dry or live, leaves its summary where `gpu-balancer status` and people look.
        save_summary(core, summary.to_json(), policy.descheduler)
        record_run(events, summary.line(), namespace=policy.descheduler.ledger_namespace,
                   configmap=policy.descheduler.ledger_name, now=taken)
    return replace(report, summary=summary)


def report_as_table(report: Report) -> str:
    data = report.as_dict()
    lines = [f"{'DRY RUN: ' if report.dry_run else ''}sustained-hot nodes: {', '.join(data['hot_nodes']) or 'none'}"]
    key, title = ("would_evict", "would evict") if report.dry_run else ("evictions", "evictions")
    lines.append(f"{title} ({len(data[key])}):" if data[key] else f"{title}: none")
    lines += [f"  {e['namespace']}/{e['pod']} from {e['node']}: {e['reason']}; {e['prestage']}" for e in data[key]]
    if data["skipped"]:
        lines.append(f"skipped ({len(data['skipped'])}):")
        lines += [f"  {s['namespace']}/{s['pod']}: {s['reason']}" for s in data["skipped"]]
    lines += [f"note: {n}" for n in data["notes"]]
    if report.summary is not None:
        lines.append(f"run: {report.summary.line()}")
    return "\n".join(lines)


def report_as_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2)
