"""One admission decision: from a decoded request and the current telemetry to a response. No I/O.

The only state touched is the injected steering ledger. Outcomes and reasons are returned for the
metrics and logs; the response always allows the pod.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from scoring.advice.placement import NO_ADVICE, PlacementIndex, advise, advise_group, node_domains
from scoring.advice.readiness import PodStartup, StartupCosts, by_time_to_ready, pod_startup, serving_share, time_to_ready
from scoring.cluster.claims import ClaimBook, has_resource_claims, pod_claims
from scoring.cluster.feasibility import constraints_for
from scoring.cluster.images import caches_model
from scoring.cluster.view import ClusterView
from scoring.ingest.serving import workload_of_pod
from scoring.policy import PlacementPolicy
from webhook.ledger import SteeringLedger
from webhook.mutate import mutate_pod
from scoring.cluster.workloads import BadQuantity, as_dict, gpu_request, job_size, labels_of, training_group
from webhook.pods import exemption
from webhook.review import AdmissionRequest, AdmissionReviewOut, build_response


READY_CANDIDATES = 3
"""Time to ready re-ranks this many times K of the headroom ranking's best: a node that holds the
image competes with the K coolest without the admission walking every node."""


@dataclass(frozen=True, slots=True)
class Decision:
    review: AdmissionReviewOut
    outcome: str
    """"mutated" or "unchanged"."""
    reason: str
    """A short, bounded code for metrics: why the outcome."""
    detail: str = ""


def urgency(pod: dict, namespace: str, index: PlacementIndex, policy: PlacementPolicy,
            view: ClusterView | None = None) -> str:
    """Why the pod's service needs it serving soon, else empty: its replicas are over their serving
    target ("svc queueing"), or the HPA that scales it reads its load well over target
    ("svc scaling: HPA at 1.5× target"; `placement.urgentScaleRatio`), which it saw when it
    added this pod, a scrape and a rule before the serving series show it."""
    workload = admitted_workload(pod, policy)
    if (namespace, workload) in index.queueing:
        return f"{workload} queueing"
    if view is None or not view.scaling or not policy.urgent_scale_ratio:
        return ""
    for name in dict.fromkeys((workload, deployment_of(pod))):
        ratio = view.scaling.get((namespace, name), 0.0)
        if ratio >= policy.urgent_scale_ratio:
            return f"{name} scaling: HPA at {ratio:.2f}× target"
    return ""


def holds_largest_fetch(view: ClusterView, startup: PodStartup) -> Callable[[str], bool]:
    """Whether a node holds what the pod would wait longest for: its model's dataset in a Fluid
    cache where it names one (remote weights are the slowest fetch), else every image it runs."""
    if startup.model is not None:
        return lambda name: name in view.nodes and caches_model(view.nodes[name].labels, *startup.model)
    return lambda name: name in view.nodes and all(image in view.nodes[name].images for image, _ in startup.images)


def admitted_workload(pod: dict, policy: PlacementPolicy) -> str:
    """The workload a pod being created belongs to, as the serving series name it: its workload
    label, else its Deployment (`deployment_of`)."""
    return labels_of(pod).get(policy.workload_label) or deployment_of(pod)


def deployment_of(pod: dict) -> str:
    """The pod's name (or `generateName`, "<deployment>-<pod-template-hash>-") less the
    ReplicaSet's suffixes: what an HPA's `scaleTargetRef` names."""
    metadata, labels = as_dict(pod.get("metadata")), labels_of(pod)
    if isinstance(name := metadata.get("name"), str) and name:
        return workload_of_pod(name)
    stem = str(metadata.get("generateName") or "").rstrip("-")
    template = labels.get("pod-template-hash")
    return stem.removesuffix(f"-{template}") if template else stem


def decide(request: AdmissionRequest, *, index: PlacementIndex | None, telemetry_time: datetime | None,
           snapshot_age_seconds: float | None, ledger: SteeringLedger, policy: PlacementPolicy,
           now: datetime, claims: ClaimBook | None = None, startup: StartupCosts | None = None) -> Decision:
    """`claims` is where a DRA pod's claims and templates are looked up: the cluster view's live
    book, known as soon as it is listed (before any telemetry); the ledger's view's by default.
    `startup` prices each candidate node's time to ready for the pod (`scoring.advice.readiness`); None:
    nodes are ranked on headroom alone."""
    def unchanged(reason: str, detail: str = "", warnings: tuple[str, ...] = ()) -> Decision:
        return Decision(build_response(request.uid, warnings=warnings), "unchanged", reason, detail)

    if request.kind != "Pod":
        return unchanged("not-pod")
    if request.operation != "CREATE":
        return unchanged("not-create")
    pod = request.obj
    if pod is None:
        return unchanged("no-object")
    why_exempt = exemption(pod, request.namespace, policy)
    if why_exempt:
        return unchanged("exempt", why_exempt)
    view = ledger.view
    book = claims if claims is not None else (view.claims if view is not None else None)
    claimed = pod_claims(pod, book, policy) if book is not None else None
    try:
        needs = gpu_request(pod, policy, claimed)
    except BadQuantity as error:
        return unchanged("bad-quantity", str(error), (f"gpu-balancer: {error}",))
    if needs is None:
        if claimed is not None and claimed.missing:
            return unchanged("claims-unknown", "claims not in the cluster view yet: " + ", ".join(claimed.missing))
        if book is None and has_resource_claims(pod):
            return unchanged("claims-unknown", "the pod claims devices through DRA and there is no cluster view "
                                               "to tell whether they are GPUs")
        return unchanged("not-gpu")

    # With a cluster view, advice names only nodes the pod could be scheduled on; without one
    # (no API access) it falls back to telemetry alone.
    constraints = constraints_for(pod, needs) if view is not None else None
    units = needs.expected_units() or (("nvidia.com/gpu", max(1, needs.whole_gpus)),)
    timing = pod_startup(pod, view.image_sizes, startup) if startup is not None and view is not None else None
    # Time to ready re-ranks the candidates, where some node lists images or the pod names a model
    # some node may cache.
    timed = timing is not None and (bool(view.image_sizes) or timing.model is not None)
    if index is None or index.stale:
        advice = NO_ADVICE
    elif group := training_group(pod, policy, needs.claims):
        # Ordinary per-node preferences would scatter a distributed job: prefer one domain instead,
        # each node's headroom weighed by how soon it readies the pod.
        group_key = f"{request.namespace}/{group[0]}={group[1]}"
        feasible = ledger.feasible_index(index, constraints)
        ready_share = (lambda name: serving_share(time_to_ready(timing, view.nodes.get(name), startup), startup)) \
            if timed else None
        advice = advise_group(feasible, gpus_requested=needs.whole_gpus,
                              pending_gpus=ledger.pending(telemetry_time), policy=policy,
                              chosen_before=ledger.group_domain(group_key, telemetry_time),
                              fits=ledger.fits(constraints.units if constraints is not None else ()),
                              job_size=job_size(pod), topology=node_domains(feasible, view, policy),
                              ready_share=ready_share)
        if timed and advice.preferred:
            advice = replace(advice, ready=tuple((p.node, time_to_ready(timing, view.nodes.get(p.node), startup)
                                                  .describe()) for p in advice.preferred))
        if advice.domain is not None and not request.dry_run:
            ledger.remember_group(group_key, advice.domain, now)
    else:
        k = policy.max_preferred_nodes
        urgent = urgency(pod, request.namespace, index, policy, view)
        # Urgent, the nodes that hold its model (or, naming none, its image) join the pool wherever
        # their headroom ranks them. In steady state they do not: spending the cache's room on
        # replicas that can wait measured worse (BENCHMARKS, "Cold start and failures").
        cached = holds_largest_fetch(view, timing) if urgent and timed else None
        ranked, _ = ledger.top(index, telemetry_time, need=max(1, needs.whole_gpus),
                               k=k * READY_CANDIDATES if timed else k, pod=constraints, also=cached, also_k=k)
        ready: tuple[tuple[str, str], ...] = ()
        if timed:
            ranked, estimates = by_time_to_ready(ranked, timing, view.nodes, startup, k, urgent=bool(urgent))
            ready = tuple((node, estimate.describe()) for node, estimate in estimates)
        advice = advise(ledger.feasible_index(index, constraints), gpus_requested=needs.whole_gpus,
                        pending_gpus={}, policy=policy, ranked=ranked)
        if ready and advice.preferred:
            advice = replace(advice, ready=ready[:len(advice.preferred)])
        if urgent and advice.preferred:
            advice = replace(advice, urgent=urgent)
    booking = ledger.booking_id() if advice.preferred and not request.dry_run else None
    mutation = mutate_pod(pod, advice, snapshot_age_seconds=snapshot_age_seconds if index else None, policy=policy,
                          booking=booking, claims=needs.claims)
    if booking:
        ledger.record(advice.preferred[0].node, units, now, booking)
    reason = "steered" if advice.preferred else ("no-telemetry" if index is None else "no-room")
    return Decision(build_response(request.uid, mutation.patch), "mutated", reason, mutation.annotation)
