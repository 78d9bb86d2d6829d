"""Dynamic Resource Allocation read for GPU placement: what a pod's ResourceClaims ask of the GPU
DeviceClasses, which GPU devices each node's ResourceSlices publish, and which ones claims hold.
Pure, no I/O.

A DRA pod carries no `nvidia.com/gpu` request. It names claims in `spec.resourceClaims`: directly
(`resourceClaimName`, a claim that may be shared between pods) or through a template
(`resourceClaimTemplateName`, from which the control plane makes the pod a claim of its own). A
claim's devices are counted per DeviceClass as units of the resource `deviceclass/<class>`, so
feasibility, the cluster view and the ledger count them exactly as they count extended resources.
Claims arrive as untrusted JSON: every reader tolerates missing or mistyped fields.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scoring.cluster.node_selectors import NodeSelectorTerm, selector_terms
from scoring.cluster.objects import MAX_GPUS, as_dict, as_list
from scoring.policy import GpuDeviceClass, PlacementPolicy

DEVICE_CLASS_PREFIX = "deviceclass/"

DeviceId = tuple[str, str, str]
"""(driver, pool, device): how a claim's allocation names a device."""


def class_resource(device_class: str) -> str:
    """The resource name a DeviceClass's devices are counted under."""
    return DEVICE_CLASS_PREFIX + device_class


def class_of(resource: str) -> str | None:
    """The DeviceClass a resource name counts, or None for an extended resource."""
    return resource[len(DEVICE_CLASS_PREFIX):] if resource.startswith(DEVICE_CLASS_PREFIX) else None


Units = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ClaimNeed:
    """What one ResourceClaim, or the claims one template makes, ask of the GPU DeviceClasses."""

    units: Units = ()
    """(deviceclass/<class>, devices) of its ExactCount requests."""
    all_of: tuple[str, ...] = ()
    """Classes asked for with `allocationMode: All`: every matching device of the node, so the
    node needs at least one and none of them taken."""
    alternatives: tuple[Units, ...] = ()
    """One entry per `firstAvailable` request: its subrequests in order of preference, any one of
    which will do; ("", 0) stands for a subrequest of a class that is not a GPU."""
    compute_domain: bool = False
    """It asks for a ComputeDomain channel (multi-node NVLink)."""
    allocated_to: tuple[NodeSelectorTerm, ...] | None = None
    """An allocated claim's `status.allocation.nodeSelector`: its pods can only run there. None
    while unallocated."""
    notes: tuple[str, ...] = ()
    """How requests that are not a plain count were read, for `explain`."""

    @property
    def asks_for_gpus(self) -> bool:
        return bool(self.units or self.all_of or any(r for group in self.alternatives for r, _ in group))


@dataclass(frozen=True)
class ClaimBook:
    """The ResourceClaimTemplates and ResourceClaims placement knows, by (namespace, name)."""

    templates: Mapping[tuple[str, str], ClaimNeed] = field(default_factory=dict)
    claims: Mapping[tuple[str, str], ClaimNeed] = field(default_factory=dict)


EMPTY_BOOK = ClaimBook()


def _count(spec: Mapping[str, Any]) -> int | None:
    count = spec.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GPUS:
        return None
    return count


def _classes(policy: PlacementPolicy) -> dict[str, GpuDeviceClass]:
    return {c.name: c for c in policy.gpu_device_classes}


def claim_need(claim_spec: object, policy: PlacementPolicy, *, allocation: object = None) -> ClaimNeed:
    """Read a ResourceClaimSpec (`resource.k8s.io/v1`, or v1beta1's flat requests).
    `allocation` is the claim's `status.allocation`, when it has one."""
    gpu_classes = _classes(policy)
    units: Counter = Counter()
    all_of: list[str] = []
    alternatives: list[Units] = []
    compute_domain = False
    notes: list[str] = []
    for request in as_list(as_dict(as_dict(claim_spec).get("devices")).get("requests")):
        request = as_dict(request)
        name = str(request.get("name", "?"))
        exactly = as_dict(request.get("exactly")) or (request if "deviceClassName" in request else {})
        subrequests = [as_dict(s) for s in as_list(request.get("firstAvailable"))]
        for sub in ([exactly] if exactly else subrequests):
            if sub.get("deviceClassName") in policy.compute_domain_device_classes:
                compute_domain = True
        if exactly:
            device_class = str(exactly.get("deviceClassName", ""))
            if device_class not in gpu_classes:
                continue
            if exactly.get("adminAccess") is True:
                notes.append(f"request {name}: adminAccess to {device_class} devices takes none of them")
                continue
            if exactly.get("allocationMode") == "All":
                all_of.append(class_resource(device_class))
                notes.append(f"request {name}: allocationMode All takes every {device_class} device of the node, "
                             "so it needs a node where none is taken")
                continue
            count = _count(exactly)
            if count is None:
                notes.append(f"request {name}: count {exactly.get('count')!r} is not a whole number of devices "
                             f"from 1 to {MAX_GPUS}; not counted")
                continue
            units[class_resource(device_class)] += count
        elif subrequests:
            options: list[tuple[str, int]] = []
            for sub in subrequests:
                device_class = str(sub.get("deviceClassName", ""))
                if device_class not in gpu_classes:
                    options.append(("", 0))
                elif sub.get("allocationMode") == "All":
                    options.append((class_resource(device_class), 1))
                elif (count := _count(sub)) is not None:
                    options.append((class_resource(device_class), count))
            if any(resource for resource, _ in options):
                alternatives.append(tuple(options))
                notes.append(f"request {name}: firstAvailable, any of " + ", ".join(
                    f"{class_of(r)}×{n}" if r else "a device that is not a GPU" for r, n in options)
                    + "; counted as the first that fits")
    pinned = None
    allocation = as_dict(allocation)
    if allocation:
        pinned = selector_terms(allocation.get("nodeSelector")) or None
    return ClaimNeed(tuple(sorted(units.items())), tuple(sorted(set(all_of))), tuple(alternatives), compute_domain,
                     pinned, tuple(notes))


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = as_dict(obj.get("metadata"))
    return str(metadata.get("namespace", "")), str(metadata.get("name", ""))


def template_need(template: Mapping[str, Any], policy: PlacementPolicy) -> ClaimNeed:
    """A ResourceClaimTemplate: its claims' spec is at `spec.spec`."""
    return claim_need(as_dict(as_dict(template.get("spec")).get("spec")), policy)


def resource_claim_need(claim: Mapping[str, Any], policy: PlacementPolicy) -> ClaimNeed:
    return claim_need(claim.get("spec"), policy, allocation=as_dict(claim.get("status")).get("allocation"))


def book_from_objects(objects: Iterable[Mapping[str, Any]], policy: PlacementPolicy) -> ClaimBook:
    """A book from ResourceClaimTemplate and ResourceClaim objects (others are ignored)."""
    templates: dict[tuple[str, str], ClaimNeed] = {}
    claims: dict[tuple[str, str], ClaimNeed] = {}
    for obj in objects:
        if obj.get("kind") == "ResourceClaimTemplate":
            templates[_key(obj)] = template_need(obj, policy)
        elif obj.get("kind") == "ResourceClaim":
            claims[_key(obj)] = resource_claim_need(obj, policy)
    return ClaimBook(templates, claims)


# -- a pod's claims -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodClaims:
    """What all of one pod's claims ask of the GPU DeviceClasses."""

    units: Units = ()
    all_of: tuple[str, ...] = ()
    alternatives: tuple[Units, ...] = ()
    allocated_to: tuple[tuple[NodeSelectorTerm, ...], ...] = ()
    """Each allocated named claim's nodes: the pod must run on a node every entry selects."""
    whole_gpus: int = 0
    """Whole GPUs it needs on one node: ExactCount devices of whole-GPU classes, at least one for
    an All request, and a firstAvailable request's first choice."""
    named: tuple[str, ...] = ()
    """GPU claims it names directly (`resourceClaimName`): possibly shared, never moved with it."""
    templated: tuple[str, ...] = ()
    """GPU claims it gets from templates: its own, recreated with the pod."""
    missing: tuple[str, ...] = ()
    """Claims or templates it names that the book does not hold."""
    compute_domain: str = ""
    """The template (or claim) name of its ComputeDomain channel, naming the job it belongs to."""
    notes: tuple[str, ...] = ()

    @property
    def asks_for_gpus(self) -> bool:
        return bool(self.named or self.templated)

    def likely_extra(self) -> Counter:
        """Devices beyond `units` it most likely takes on its node: one of each class it claims
        with `All` (at least), and each `firstAvailable` request's first choice."""
        extra = Counter(dict.fromkeys(self.all_of, 1))
        for resource, count in (group[0] for group in self.alternatives):
            if resource:
                extra[resource] += count
        return extra


def has_resource_claims(pod: Mapping[str, Any]) -> bool:
    return bool(as_list(as_dict(pod.get("spec")).get("resourceClaims")))


def pod_claims(pod: Mapping[str, Any], book: ClaimBook, policy: PlacementPolicy) -> PodClaims | None:
    """Resolve the pod's `spec.resourceClaims` through the book; None when it names none. A named
    claim already allocated pins the pod to its devices' nodes and needs no further devices."""
    refs = [as_dict(r) for r in as_list(as_dict(pod.get("spec")).get("resourceClaims"))]
    if not refs:
        return None
    namespace = str(as_dict(pod.get("metadata")).get("namespace", ""))
    whole = {class_resource(c.name): c.whole_gpus for c in policy.gpu_device_classes}
    units: Counter = Counter()
    all_of: set[str] = set()
    alternatives: list[Units] = []
    pinned: list[tuple[NodeSelectorTerm, ...]] = []
    named, templated, missing, notes = [], [], [], []
    compute_domain = ""
    for ref in refs:
        if isinstance(ref.get("resourceClaimName"), str):
            name, need = ref["resourceClaimName"], book.claims.get((namespace, ref["resourceClaimName"]))
        elif isinstance(ref.get("resourceClaimTemplateName"), str):
            name, need = ref["resourceClaimTemplateName"], book.templates.get((namespace,
                                                                                  ref["resourceClaimTemplateName"]))
        else:
            continue
        if need is None:
            missing.append(name)
            continue
        if need.compute_domain and not compute_domain:
            compute_domain = name
        if not need.asks_for_gpus:
            continue
        (templated if "resourceClaimTemplateName" in ref else named).append(name)
        notes.extend(f"claim {name}: {note}" for note in need.notes)
        if need.allocated_to is not None:
            pinned.append(need.allocated_to)
            notes.append(f"claim {name} is allocated: the pod can only run where its devices are")
            continue
        units.update(dict(need.units))
        all_of.update(need.all_of)
        alternatives.extend(need.alternatives)
    whole_gpus = sum(n for r, n in units.items() if whole.get(r))
    whole_gpus += sum(1 for r in all_of if whole.get(r) and r not in units)
    whole_gpus += sum(group[0][1] for group in alternatives if whole.get(group[0][0]))
    return PodClaims(tuple(sorted(units.items())), tuple(sorted(all_of)), tuple(alternatives), tuple(pinned),
                     whole_gpus, tuple(named), tuple(templated), tuple(missing), compute_domain, tuple(notes))


# -- devices: ResourceSlices and allocations ----------------------------------------------------


@dataclass(frozen=True)
class DeviceInventory:
    """GPU devices the ResourceSlices publish, per node and DeviceClass."""

    capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Node → deviceclass/<class> → devices."""
    devices: Mapping[DeviceId, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """(driver, pool, device) → (node, the deviceclass/<class> resources it counts in)."""
    unplaced: int = 0
    """GPU devices of slices that name no single node (network-attached): not counted."""


def _attribute(device: Mapping[str, Any], driver: str, name: str) -> object:
    attributes = as_dict(device.get("attributes"))
    value = as_dict(attributes.get(name) or attributes.get(f"{driver}/{name}"))
    return next(iter(value.values()), None) if value else None


def _device_classes(driver: str, device: Mapping[str, Any], classes: Iterable[GpuDeviceClass]) -> tuple[str, ...]:
    return tuple(class_resource(c.name) for c in classes
                 if c.driver == driver and (not c.device_type or _attribute(device, driver, "type") == c.device_type))


@dataclass(frozen=True, slots=True)
class PublishedSlice:
    """The part of one ResourceSlice placement keeps: its pool and its GPU devices' nodes."""

    driver: str
    pool: str
    generation: int
    devices: tuple[tuple[str, str, tuple[str, ...]], ...]
    """(device name, node or "" when it names none, deviceclass/<class> resources it counts in)."""


def published_slice(obj: Mapping[str, Any], policy: PlacementPolicy) -> PublishedSlice:
    spec = as_dict(obj.get("spec"))
    driver, pool = str(spec.get("driver", "")), as_dict(spec.get("pool"))
    generation = pool.get("generation", 0)
    slice_node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else ""
    devices = []
    for device in map(as_dict, as_list(spec.get("devices"))):
        device = {**device, **as_dict(device.get("basic"))}  # v1beta1 kept the fields under `basic`
        resources = _device_classes(driver, device, policy.gpu_device_classes)
        if resources:
            node = slice_node or device.get("nodeName")
            devices.append((str(device.get("name", "")), node if isinstance(node, str) else "", resources))
    return PublishedSlice(driver, str(pool.get("name", "")), generation if isinstance(generation, int) else 0,
                          tuple(devices))


def inventory_from_slices(slices: Iterable[Mapping[str, Any] | PublishedSlice],
                          policy: PlacementPolicy) -> DeviceInventory:
    """Count the GPU devices of each node. Only a pool's newest generation counts, as the
    scheduler does while a driver republishes its slices."""
    published = [s if isinstance(s, PublishedSlice) else published_slice(s, policy) for s in slices]
    newest: dict[tuple[str, str], int] = {}
    for s in published:
        newest[s.driver, s.pool] = max(newest.get((s.driver, s.pool), 0), s.generation)
    capacity: dict[str, Counter] = defaultdict(Counter)
    devices: dict[DeviceId, tuple[str, tuple[str, ...]]] = {}
    unplaced = 0
    for s in published:
        if s.generation != newest[s.driver, s.pool]:
            continue
        for name, node, resources in s.devices:
            if not node:
                unplaced += 1
                continue
            capacity[node].update(dict.fromkeys(resources, 1))
            devices[s.driver, s.pool, name] = (node, resources)
    return DeviceInventory({n: dict(c) for n, c in capacity.items()}, devices, unplaced)


def allocated_devices(claim: Mapping[str, Any]) -> tuple[DeviceId, ...]:
    """The devices a ResourceClaim's allocation holds (admin access holds none)."""
    results = as_list(as_dict(as_dict(as_dict(claim.get("status")).get("allocation")).get("devices")).get("results"))
    return tuple((str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
                 for r in map(as_dict, results) if r.get("adminAccess") is not True)


def held_devices(allocations: Iterable[Iterable[DeviceId]], inventory: DeviceInventory) -> dict[str, Counter]:
    """Node → deviceclass/<class> → devices held by the given claims' allocations (each device
    once, however many claims name it)."""
    held: dict[str, Counter] = defaultdict(Counter)
    for device in {d for allocation in allocations for d in allocation}:
        if (found := inventory.devices.get(device)) is not None:
            held[found[0]].update(dict.fromkeys(found[1], 1))
    return dict(held)


def devices_from_objects(objects: Iterable[Mapping[str, Any]], policy: PlacementPolicy
                         ) -> tuple[DeviceInventory, dict[str, Counter]]:
    """The inventory of a listing's ResourceSlices and the devices its ResourceClaims hold (other
    kinds are ignored): what a cluster file says of DRA devices."""
    objects = list(objects)
    inventory = inventory_from_slices((o for o in objects if o.get("kind") == "ResourceSlice"), policy)
    claims = (allocated_devices(o) for o in objects if o.get("kind") == "ResourceClaim")
    return inventory, held_devices(claims, inventory)


class HeldDevices:
    """`held_devices` kept up to date as claims come and go, for a watch: each claim's allocation
    is set or cleared as its events arrive, and the per-node counts follow without a recount.
    Not thread-safe: the caller holds its own lock."""

    def __init__(self) -> None:
        self._by_claim: dict[tuple[str, str], tuple[DeviceId, ...]] = {}
        self._refs: Counter = Counter()
        self._inventory = DeviceInventory()
        self.per_node: dict[str, Counter] = defaultdict(Counter)
        """Node → deviceclass/<class> → devices held."""

    def set_claim(self, key: tuple[str, str], devices: tuple[DeviceId, ...]) -> None:
        """The claim's allocation now (empty: unallocated or deleted)."""
        for device in self._by_claim.pop(key, ()):
            self._refs[device] -= 1
            if not self._refs[device]:
                del self._refs[device]
                self._count(device, -1)
        if devices:
            self._by_claim[key] = devices
            for device in devices:
                self._refs[device] += 1
                if self._refs[device] == 1:
                    self._count(device, +1)

    def clear(self) -> None:
        self._by_claim.clear()
        self._refs.clear()
        self.per_node.clear()

    def use(self, inventory: DeviceInventory) -> None:
        """Count against new slices (a device a slice no longer publishes holds nothing)."""
        self._inventory = inventory
        self.per_node.clear()
        for device in self._refs:
            self._count(device, +1)

    def _count(self, device: DeviceId, sign: int) -> None:
        if (found := self._inventory.devices.get(device)) is not None:
            self.per_node[found[0]].update(dict.fromkeys(found[1], sign))
