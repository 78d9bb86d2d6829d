"""What a node's GPUs hold and what it has free: the one rule the webhook's cluster view, the
descheduler's cluster model and the simulator's view share. Pure, no I/O.

As kube-scheduler's cache counts them: a pod holds its GPU requests from the moment it is bound
until it ends (Succeeded or Failed) or is deleted, terminating or not, whatever its phase says
otherwise. A DRA device is held by its claim's allocation, not by the pods that name the claim,
so a shared claim counts once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from scoring.cluster.claims import class_of

Units = tuple[tuple[str, int], ...]


def holds_units(phase: object, node: object) -> bool:
    """Whether a pod in `phase`, bound to `node` (empty or None: not bound), holds what it requests."""
    return isinstance(node, str) and bool(node) and phase not in ("Succeeded", "Failed")


def pod_units(units: Units) -> Units:
    """The units a pod holds itself: its extended resources (claimed devices are the claims')."""
    return tuple((resource, count) for resource, count in units if class_of(resource) is None)


def held_per_node(pods: Iterable[tuple[str, Units]],
                  devices: Mapping[str, Mapping[str, int]]) -> dict[str, Counter]:
    """Node → resource → units held, from (node, requested units) of every pod that holds its
    units and the devices the claims' allocations hold per node."""
    held: dict[str, Counter] = {}
    for node, held_devices in devices.items():
        held.setdefault(node, Counter()).update(held_devices)
    for node, units in pods:
        held.setdefault(node, Counter()).update(dict(pod_units(units)))
    return held


def free_units(allocatable: Mapping[str, int], held: Mapping[str, int]) -> dict[str, int]:
    """Each resource the node offers, less what is held of it (negative when over-committed)."""
    return {resource: count - held.get(resource, 0) for resource, count in allocatable.items()}
