"""What a cluster says beyond its nodes and pods that the scheduler model reads: namespaces'
labels, the controllers that select pods, DRA claims, which DeviceClasses are GPUs, and the
scheduler profile. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scoring.cluster.claims import EMPTY_BOOK, ClaimBook, book_from_objects
from scoring.cluster.objects import as_dict
from scoring.policy import PlacementPolicy
from sim.kube_match import Labels, Selector, label_selector
from sim.scheduler_profile import DEFAULT_PROFILE, Profile

CONTROLLER_KINDS = ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")

@dataclass(frozen=True)
class ClusterContext:
    """What else a cluster file says that the scheduler reads: namespaces' labels (for pod
    affinity's namespaceSelector) and the workload controllers whose selectors give the default
    spreading. Empty in the simulator, where a pod's controller is known by its owner reference."""

    namespace_labels: Mapping[str, Labels] = field(default_factory=dict)
    controllers: tuple[tuple[str, Selector], ...] = ()
    """(namespace, selector) of each Service, ReplicationController, ReplicaSet and StatefulSet."""
    claims: ClaimBook = EMPTY_BOOK
    """ResourceClaimTemplates and ResourceClaims, for DynamicResources."""
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    """Which DeviceClasses are GPUs."""
    profile: Profile = DEFAULT_PROFILE
    """The scheduler's plugins and weights (`sim.scheduler_profile`)."""

    @staticmethod
    def from_objects(objects: list[Mapping[str, Any]], placement: PlacementPolicy | None = None) -> "ClusterContext":
        placement = placement or PlacementPolicy()
        namespaces, controllers = {}, []
        for obj in objects:
            metadata = as_dict(obj.get("metadata"))
            kind = obj.get("kind")
            if kind == "Namespace":
                namespaces[str(metadata.get("name", ""))] = {k: str(v) for k, v in as_dict(metadata.get("labels")).items()}
            elif kind in CONTROLLER_KINDS:
                raw = as_dict(obj.get("spec")).get("selector")
                if kind in ("Service", "ReplicationController"):  # a plain label map
                    raw = {"matchLabels": raw} if isinstance(raw, dict) and raw else None
                elif not as_dict(raw).get("matchLabels") and not as_dict(raw).get("matchExpressions"):
                    raw = None  # selects nothing to spread by
                if raw is not None:
                    controllers.append((str(metadata.get("namespace") or "default"), label_selector(raw)))
        return ClusterContext(namespaces, tuple(controllers), book_from_objects(objects, placement), placement)


NO_CONTEXT = ClusterContext()
