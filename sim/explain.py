"""`gpu-balancer explain`: why would this pod land there? The scheduler model on a cluster snapshot,
before and after the webhook's advice. Pure (the caller reads the files and the telemetry)."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any


from scoring.advice.placement import index_fleet
from scoring.advice.readiness import pod_startup, startup_costs, time_to_ready
from scoring.cluster.claims import PodClaims, class_of, devices_from_objects, pod_claims
from scoring.cluster.holdings import holds_units
from scoring.cluster.view import ClusterView
from scoring.cluster.workloads import BadQuantity, as_dict, as_list, parse_quantity
from scoring.heat import fleet_heat
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import BalancerPolicy, PlacementPolicy
from sim.cluster_context import NO_CONTEXT, ClusterContext
from sim.framework import NodeVerdict
from sim.node_state import NodeState
from sim.scheduler import evaluate, view_of
from webhook.admit import decide
from webhook.ledger import SteeringLedger
from webhook.review import decode_review, patched, pod_review


def check_quantities(obj: dict, where: str) -> None:
    """Raise ValueError naming the first resource quantity of a Node or Pod that is not a Kubernetes
    quantity: the scheduler model would otherwise read it as zero and explain the wrong thing."""
    def check(section: object, path: str) -> None:
        for resource, value in as_dict(section).items():
            try:
                parse_quantity(value)
            except BadQuantity as error:
                raise ValueError(f"{where}: {path}.{resource}: {error}") from None

    check(as_dict(obj.get("status")).get("allocatable"), "status.allocatable")
    spec = as_dict(obj.get("spec"))
    for key in ("containers", "initContainers"):
        for index, container in enumerate(as_list(spec.get(key))):
            resources = as_dict(as_dict(container).get("resources"))
            for section in ("requests", "limits"):
                check(resources.get(section), f"spec.{key}[{index}].resources.{section}")


def nodes_from_list(document: Any, placement: PlacementPolicy | None = None) -> list[NodeState]:
    """NodeStates with their bound pods, from `kubectl get nodes,pods -A -o json`; raises
    ValueError naming the first item that is not usable. ResourceSlices in the file add their
    GPU devices to the nodes, and ResourceClaims' allocations hold them."""
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        raise ValueError("expected the JSON of `kubectl get nodes,pods -A -o json` (a List with items)")
    nodes: dict[str, NodeState] = {}
    for position, obj in enumerate(document["items"]):
        if not isinstance(obj, dict):
            raise ValueError(f"items[{position}] is not an object")
        check_quantities(obj, f"items[{position}]")
        if obj.get("kind") == "Node":
            name = as_dict(obj.get("metadata")).get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(f"items[{position}]: a Node without metadata.name")
            nodes[name] = NodeState.from_object(obj)
    for obj in document["items"]:
        if obj.get("kind") == "Pod":
            name = as_dict(obj.get("spec")).get("nodeName")
            if (node := nodes.get(str(name))) is not None and holds_units(as_dict(obj.get("status")).get("phase"), name):
                node.bind(obj)
    inventory, held = devices_from_objects(document["items"], placement or PlacementPolicy())
    for name, devices in inventory.capacity.items():
        if name in nodes:
            nodes[name].allocatable.update(devices)
    for name, devices in held.items():
        if name in nodes:
            nodes[name].requested.update(devices)
    return list(nodes.values())


def _shape(verdicts: list[NodeVerdict], ready: dict[str, str] | None = None) -> dict:
    feasible = [v for v in verdicts if v.feasible]
    best = max((v.total for v in feasible), default=None)
    return {"nodes": [{"name": v.name, "feasible": v.feasible, "failed_filter": v.failed_filter,
                       "scores": {k: round(s, 1) for k, s in v.scores.items()}, "total": round(v.total, 1),
                       **({"ready": ready[v.name]} if ready and v.name in ready else {})}
                      for v in sorted(verdicts, key=lambda v: (-v.total, v.name))],
            "chosen": sorted(v.name for v in feasible if best is not None and v.total >= best - 1e-9)}


def context_from_list(document: dict, placement: PlacementPolicy | None = None) -> ClusterContext:
    """Namespaces, workload controllers and DRA claims in the same file (optional: `kubectl get
    nodes,pods,namespaces,services,replicasets,statefulsets,resourceslices,resourceclaims,
    resourceclaimtemplates -A -o json` gives them)."""
    return ClusterContext.from_objects([obj for obj in document["items"] if isinstance(obj, dict)], placement)


def explain(pod: dict, nodes: list[NodeState], *, snapshot: ClusterSnapshot | None, policy: BalancerPolicy,
            now: datetime, context: ClusterContext = NO_CONTEXT) -> dict:
    """Per node: feasibility, the failed filter, each plugin's score and the total; the top node(s).
    With a snapshot, the same after the webhook's advice (`advised`), and the advice itself. A
    pod that names ResourceClaims gets `claims`: how they were read (GPU devices counted, `All`,
    `firstAvailable`, allocated, not found)."""
    view = view_of(nodes, now, context.claims)
    ready = _time_to_ready(pod, view, policy)
    result = _shape(evaluate(pod, nodes, context=context), ready)
    result["profile"] = context.profile.describe()
    if (claims := pod_claims(pod, context.claims, context.placement)) is not None:
        result["claims"] = _claim_lines(claims)
    if snapshot is None:
        return result
    fleet = fleet_heat(snapshot, policy.heat, now=now, staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
    index = None if fleet.stale else index_fleet(fleet)
    # The webhook's cluster view, from the same file: advice names only nodes the pod can use.
    ledger = SteeringLedger(policy.placement.settle_seconds)
    if index is not None:
        ledger.prepare(index, view)
    decision = decide(decode_review(json.dumps(pod_review(pod, uid="explain")).encode()), index=index,
                      telemetry_time=snapshot.newest_sample_at, snapshot_age_seconds=snapshot.age_seconds(now),
                      ledger=ledger, policy=policy.placement, now=now, claims=context.claims,
                      startup=startup_costs(policy))
    advised = patched(copy.deepcopy(pod), decision.review)
    result["advised"] = _shape(evaluate(advised, nodes, context=context), ready)
    result["advice"] = decision.detail or decision.reason
    return result


def _time_to_ready(pod: dict, view: ClusterView, policy: BalancerPolicy) -> dict[str, str]:
    """Each node's estimated time to ready for the pod, as the advice weighs it (none where the
    policy turns it off)."""
    if (costs := startup_costs(policy)) is None:
        return {}
    startup = pod_startup(pod, view.image_sizes, costs)
    return {name: time_to_ready(startup, facts, costs).describe() for name, facts in view.nodes.items()}


def _claim_lines(claims: PodClaims) -> list[str]:
    devices = ", ".join(f"{class_of(r)}×{n}" for r, n in claims.units)
    lines = [f"GPU claims {', '.join((*claims.templated, *claims.named))}: {devices or 'no fixed count'}"
             ] if claims.asks_for_gpus else ["no claim asks for a GPU DeviceClass"]
    return lines + list(claims.notes) + [f"claim {name}: not in the cluster file" for name in claims.missing]


def as_table(result: dict) -> str:
    def block(title: str, shape: dict) -> list[str]:
        lines = [title, f"{'NODE':24s} {'FEASIBLE':9s} {'TOTAL':>7s}  SCORES / FAILED FILTER"]
        for n in shape["nodes"]:
            detail = ", ".join(f"{k} {v:.0f}" for k, v in n["scores"].items()) if n["feasible"] else n["failed_filter"]
            ready = f"; ready {n['ready']}" if "ready" in n else ""
            lines.append(f"{n['name']:24s} {'yes' if n['feasible'] else 'no':9s} {n['total']:7.1f}  {detail}{ready}")
        lines.append(f"chosen: {', '.join(shape['chosen']) or 'none (the pod stays Pending)'}")
        return lines

    lines = [f"claims: {line}" for line in result.get("claims", ())]
    lines += block(f"stock scheduler ({result['profile']}):", result)
    if "advised" in result:
        lines += ["", f"after gpu-balancer's advice ({result['advice']}):", *block("", result["advised"])[1:]]
    return "\n".join(lines)


