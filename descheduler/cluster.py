"""The cluster as the planner sees it: pods and nodes from Kubernetes JSON, frozen. Pure, no I/O.

Input is what `kubectl get namespaces,nodes,pods -A -o json` prints (or the same objects read from the API),
with DRA's ResourceSlices, ResourceClaims and ResourceClaimTemplates where the cluster has them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from scoring.cluster.claims import EMPTY_BOOK, ClaimBook, book_from_objects, devices_from_objects, pod_claims
from scoring.cluster.feasibility import NodeFacts, PodConstraints, constraints_for, node_facts
from scoring.cluster.holdings import free_units, held_per_node, holds_units
from scoring.cluster.images import pod_images
from scoring.cluster.view import node_with_devices
from scoring.cluster.workloads import BadQuantity, as_dict, as_list, gpu_request, labels_of, training_group
from scoring.policy import OptInPolicy, PlacementPolicy

DRA_KINDS = ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    node: str
    phase: str
    terminating: bool
    owner_kind: str
    owner_name: str
    priority: int
    annotations: dict[str, str] = field(hash=False, compare=False)
    gpu_resources: tuple[tuple[str, int], ...]
    """(resource, count) the pod requests, e.g. (("nvidia.com/gpu", 2),); claimed DRA devices as
    (("deviceclass/gpu.nvidia.com", 2),)."""
    local_storage: bool
    mirror: bool
    training_group: tuple[str, str] | None
    workload: str
    """namespace/kind/name of the controller that recreates it (a Deployment for ReplicaSet pods)."""
    constraints: PodConstraints = field(default_factory=PodConstraints, hash=False, compare=False)
    """Where its replacement could be scheduled: selector, affinity, tolerations, GPU units."""
    shared_claims: tuple[str, ...] = ()
    """GPU ResourceClaims it names directly: their devices stay with the claim, not the pod."""
    images: tuple[str, ...] = field(default=(), hash=False, compare=False)
    """Its containers' images in normal form: what its replacement pulls where a node lacks them."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    allocatable: dict[str, int] = field(hash=False, compare=False)
    """GPU resources the node offers (whole units)."""
    unschedulable: bool = False
    facts: NodeFacts | None = field(default=None, hash=False, compare=False)
    """Labels, taints and cordon, for feasibility; None when built without a Node object."""


@dataclass(frozen=True)
class Cluster:
    nodes: dict[str, NodeInfo]
    pods: tuple[PodInfo, ...]
    opted_in_namespaces: frozenset[str] | None = None
    """Namespaces carrying the opt-in label; None when no Namespace objects were read, so the
    opt-in cannot be checked and no pod may be evicted."""
    devices_held: dict[str, dict[str, int]] = field(default_factory=dict)
    """Node → deviceclass/<class> → DRA devices held by claims' allocations."""

    def why_namespace_excluded(self, namespace: str) -> str | None:
        """None when pods of `namespace` may be evicted; otherwise why not."""
        if self.opted_in_namespaces is None:
            return ("namespace opt-in unknown: no Namespace objects were read "
                    "(list them too: kubectl get namespaces,nodes,pods -A -o json)")
        if namespace not in self.opted_in_namespaces:
            return f"namespace {namespace} has not opted in"
        return None

    @cached_property
    def _by_node(self) -> dict[str, list[PodInfo]]:
        by_node: dict[str, list[PodInfo]] = defaultdict(list)
        for pod in self.pods:
            by_node[pod.node].append(pod)
        return by_node

    def pods_on(self, node: str) -> list[PodInfo]:
        return list(self._by_node.get(node, ()))

    def free(self) -> dict[str, Counter]:
        """Node → GPU resources not held by its pods and claims (`scoring.cluster.holdings`)."""
        held = held_per_node(((p.node, p.gpu_resources) for p in self.pods if holds_units(p.phase, p.node)),
                             self.devices_held)
        return {name: Counter(free_units(node.allocatable, held.get(name, {}))) for name, node in self.nodes.items()}

    def running_replicas(self) -> Counter:
        return Counter(p.workload for p in self.pods if p.phase == "Running" and not p.terminating)


def _workload(namespace: str, owner_kind: str, owner_name: str, labels: dict[str, str]) -> str:
    if owner_kind == "ReplicaSet" and labels.get("pod-template-hash") and \
            owner_name.endswith("-" + labels["pod-template-hash"]):
        return f"{namespace}/Deployment/{owner_name[: -len(labels['pod-template-hash']) - 1]}"
    return f"{namespace}/{owner_kind or 'Pod'}/{owner_name}"


def pod_info(obj: dict[str, Any], policy: PlacementPolicy, book: ClaimBook = EMPTY_BOOK) -> PodInfo:
    metadata, spec, status = as_dict(obj.get("metadata")), as_dict(obj.get("spec")), as_dict(obj.get("status"))
    owner = next((r for r in as_list(metadata.get("ownerReferences")) if isinstance(r, dict) and r.get("controller")),
                 {})
    annotations = {k: v for k, v in as_dict(metadata.get("annotations")).items() if isinstance(v, str)}
    labels = labels_of(obj)
    claims = pod_claims(obj, book, policy)
    try:
        request = gpu_request(obj, policy, claims)
    except BadQuantity:
        request = None
    constraints = constraints_for(obj, request)
    volumes = as_list(spec.get("volumes"))
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    owner_kind, owner_name = str(owner.get("kind", "")), str(owner.get("name", ""))
    return PodInfo(
        namespace=namespace, name=name, node=str(spec.get("nodeName", "")), phase=str(status.get("phase", "")),
        terminating=bool(metadata.get("deletionTimestamp")), owner_kind=owner_kind, owner_name=owner_name,
        priority=int(spec.get("priority", 0) or 0), annotations=annotations,
        gpu_resources=request.expected_units() if request else (),
        local_storage=any(isinstance(v, dict) and ("emptyDir" in v or "hostPath" in v) for v in volumes),
        mirror="kubernetes.io/config.mirror" in annotations,
        training_group=training_group(obj, policy, claims),
        workload=_workload(namespace, owner_kind, owner_name, labels),
        constraints=constraints,
        shared_claims=claims.named if claims else (),
        images=pod_images(obj),
    )


def node_info(obj: dict[str, Any], policy: PlacementPolicy) -> NodeInfo:
    return _node_info_of(node_facts(obj, policy))


def _node_info_of(facts: NodeFacts) -> NodeInfo:
    return NodeInfo(facts.name, {k: v for k, v in facts.allocatable.items() if v > 0}, facts.unschedulable, facts)


def namespace_object(name: str, opt_in: OptInPolicy | None = None) -> dict[str, Any]:
    """A Namespace as `kubectl get -o json` prints it, opted in when `opt_in` is given."""
    labels = {} if opt_in is None else {opt_in.label: opt_in.value}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def cluster_from_objects(items: Iterable[dict[str, Any]], policy: PlacementPolicy,
                         opt_in: OptInPolicy | None = None) -> Cluster:
    """Pods are read once every claim and template is known (a list may name them in any order)."""
    opt_in = opt_in or OptInPolicy()
    nodes: dict[str, NodeInfo] = {}
    pod_objects: list[dict[str, Any]] = []
    dra_objects: list[dict[str, Any]] = []
    namespaces: set[str] | None = None
    for obj in items:
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if kind in DRA_KINDS:
            dra_objects.append(obj)
        if kind == "Namespace":
            namespaces = set() if namespaces is None else namespaces
            metadata = as_dict(obj.get("metadata"))
            if labels_of(obj).get(opt_in.label) == opt_in.value and isinstance(metadata.get("name"), str):
                namespaces.add(metadata["name"])
        elif kind == "Node":
            node = node_info(obj, policy)
            nodes[node.name] = node
        elif kind == "Pod":
            pod_objects.append(obj)
    book = book_from_objects(dra_objects, policy)
    inventory, held = devices_from_objects(dra_objects, policy)
    for name in inventory.capacity.keys() & nodes.keys():
        if (facts := nodes[name].facts) is not None:
            nodes[name] = _node_info_of(node_with_devices(facts, inventory.capacity[name]))
    pods = tuple(pod_info(obj, policy, book) for obj in pod_objects)
    return Cluster(nodes, pods, None if namespaces is None else frozenset(namespaces),
                   {node: dict(devices) for node, devices in held.items()})


def cluster_from_list(document: Any, policy: PlacementPolicy, opt_in: OptInPolicy | None = None) -> Cluster:
    """From `kubectl get namespaces,nodes,pods -A -o json` output (add `resourceslices,resourceclaims,
    resourceclaimtemplates` on a DRA cluster); raises ValueError on anything else."""
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        raise ValueError("expected the JSON of `kubectl get namespaces,nodes,pods -A -o json` (a List with items)")
    return cluster_from_objects(document["items"], policy, opt_in)


