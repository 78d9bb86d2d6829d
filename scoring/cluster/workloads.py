"""Reading what a pod asks for and belongs to: GPU requests, owners, training groups. Pure, no I/O.

Shared by the webhook (advice) and the descheduler (eviction planning). Pod objects arrive as
untrusted JSON: every accessor tolerates missing or mistyped fields.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from scoring.cluster.objects import MAX_GPUS, as_dict, as_list
from scoring.policy import PlacementPolicy

if TYPE_CHECKING:
    from scoring.cluster.claims import PodClaims

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_SUFFIX = {None: 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


class BadQuantity(ValueError):
    pass


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes resource quantity (string or number) as a Decimal."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadQuantity(f"quantity {value!r} is neither a number nor a string")
    return _parse_text(str(value))


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """Cached: a cluster's pods repeat a few quantities ("1", "8Gi") tens of thousands of times."""
    match = _QUANTITY.match(value.strip()) if len(value) <= 64 else None
    if match is None:
        raise BadQuantity(f"quantity {str(value)[:40]!r} is not a Kubernetes quantity")
    try:
        number = Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except ArithmeticError:  # decimal.Overflow, InvalidOperation
        raise BadQuantity(f"quantity {str(value)[:40]!r} is out of range") from None
    if not number.is_finite():
        raise BadQuantity(f"quantity {str(value)[:40]!r} is not finite")
    return number


@functools.lru_cache(maxsize=4096)
def is_gpu_resource(resource: str, patterns: tuple[str, ...]) -> bool:
    """Whether `resource` is one of `patterns` (a trailing * matches a prefix). Cached: a fleet
    has a handful of resource names, read for every container of every pod."""
    return any(resource.startswith(p[:-1]) if p.endswith("*") else resource == p for p in patterns)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    resources: tuple[str, ...]
    """GPU resource names the pod asks for."""
    whole_gpus: int
    """Whole `nvidia.com/gpu`-style GPUs needed on one node. 0 for shared/MIG only."""
    units: tuple[tuple[str, int], ...] = ()
    """(resource, units needed on one node) for every GPU resource asked for in a positive amount,
    counted as the scheduler counts them (`gpu_request`); DRA devices as `deviceclass/<class>`."""
    claims: PodClaims | None = None
    """What its ResourceClaims ask for, when it names any GPU claim (`scoring.cluster.claims`)."""

    def expected_units(self) -> tuple[tuple[str, int], ...]:
        """The units it will most likely take on its node: `units`, one device of each class it
        claims with `All` (at least), and each `firstAvailable` request's first choice."""
        extra = self.claims.likely_extra() if self.claims is not None else None
        if not extra:
            return self.units
        extra.update(dict(self.units))
        return tuple(sorted(extra.items()))


def _is_whole_gpu(resource: str) -> bool:
    return "mig-" not in resource and not resource.endswith(".shared")


def _container_gpus(container: object, patterns: tuple[str, ...]) -> dict[str, Decimal]:
    """One container's GPU resources; a limit alone is the request (extended resources must have
    requests equal to limits)."""
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict) or not resources:
        return {}
    out: dict[str, Decimal] = {}
    for section in ("requests", "limits"):
        wanted = resources.get(section)
        if not isinstance(wanted, dict):
            continue
        for name, quantity in wanted.items():
            if isinstance(name, str) and is_gpu_resource(name, patterns):
                amount = parse_quantity(quantity)
                if amount < 0 or amount > MAX_GPUS:
                    raise BadQuantity(f"{name} quantity {quantity!r} is not a sane GPU count")
                out[name] = max(out.get(name, Decimal(0)), amount)
    return out


def gpu_request(pod: dict[str, Any], policy: PlacementPolicy, claims: PodClaims | None = None) -> GpuRequest | None:
    """The pod's GPU needs, or None when it asks for no GPU resource and no GPU claim. Raises
    `BadQuantity`. `claims` is the pod's resolved ResourceClaims (`scoring.cluster.claims.pod_claims`).

    Counted as the scheduler counts a pod: app containers summed, sidecars (init containers with
    `restartPolicy: Always`) added to them and to every later init container, and each ordinary
    init container only raising the peak. Claimed devices come on top: a claim is allocated for
    the whole pod, whichever containers use it."""
    spec = as_dict(pod.get("spec"))
    patterns = policy.gpu_resources
    total: dict[str, Decimal] = {}
    for container in as_list(spec.get("containers")):
        for name, amount in _container_gpus(container, patterns).items():
            total[name] = total.get(name, Decimal(0)) + amount
    sidecars: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    for container in as_list(spec.get("initContainers")):
        wanted = _container_gpus(container, patterns)
        if as_dict(container).get("restartPolicy") == "Always":
            for name, amount in wanted.items():
                sidecars[name] = sidecars.get(name, Decimal(0)) + amount
                total[name] = total.get(name, Decimal(0)) + amount
            wanted = sidecars
        else:
            wanted = {n: wanted.get(n, Decimal(0)) + sidecars.get(n, Decimal(0)) for n in {*wanted, *sidecars}}
        for name, amount in wanted.items():
            peak[name] = max(peak.get(name, Decimal(0)), amount)
    claimed = claims if claims is not None and claims.asks_for_gpus else None
    if not total and not peak and claimed is None:
        return None
    units = {name: math.ceil(max(total.get(name, Decimal(0)), peak.get(name, Decimal(0)))) for name in {*total, *peak}}
    whole = sum(count for name, count in units.items() if _is_whole_gpu(name))
    if claimed is not None:
        for name, count in claimed.units:
            units[name] = units.get(name, 0) + count
        whole += claimed.whole_gpus
    if any(count > MAX_GPUS for count in units.values()):
        raise BadQuantity(f"pod asks for {max(units.values())} units of a GPU resource")
    if whole > MAX_GPUS:
        raise BadQuantity(f"pod asks for {whole} GPUs")
    resources = {*units, *(claimed.all_of if claimed else ()), *(r for group in (claimed.alternatives if claimed else ())
                                                                for r, _ in group if r)}
    return GpuRequest(tuple(sorted(resources)), whole, tuple(sorted((r, n) for r, n in units.items() if n > 0)),
                      claimed)


def labels_of(pod: dict[str, Any]) -> dict[str, str]:
    labels = as_dict(as_dict(pod.get("metadata")).get("labels"))
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def owner_kind(pod: dict[str, Any]) -> str:
    for ref in as_list(as_dict(pod.get("metadata")).get("ownerReferences")):
        if isinstance(ref, dict) and ref.get("controller") is True and isinstance(ref.get("kind"), str):
            return ref["kind"]
    return ""


COMPUTE_DOMAIN_LABEL = "gpu-balancer.io/compute-domain"
"""Set by the webhook on a pod whose ComputeDomain channel claim names its job, so the packing
terms can select the job's pods by label."""


def training_group(pod: dict[str, Any], policy: PlacementPolicy,
                   claims: PodClaims | None = None) -> tuple[str, str] | None:
    """(label key, value) naming the distributed job this pod belongs to, if any: a job label, else
    the claim template of its ComputeDomain channel (`claims`)."""
    labels = labels_of(pod)
    if labels.get(COMPUTE_DOMAIN_LABEL):
        return COMPUTE_DOMAIN_LABEL, labels[COMPUTE_DOMAIN_LABEL]
    for key in policy.training_label_keys:
        if labels.get(key):
            if key == "batch.kubernetes.io/job-name" and "batch.kubernetes.io/job-completion-index" not in labels \
                    and "batch.kubernetes.io/job-completion-index" not in as_dict(
                        as_dict(pod.get("metadata")).get("annotations")):
                continue  # a plain Job's pods are independent; only Indexed Jobs are groups
            return key, labels[key]
    if claims is not None and claims.compute_domain:
        return COMPUTE_DOMAIN_LABEL, compute_domain_label_value(claims.compute_domain)
    return None


JOB_SIZE_KEYS = ("gpu-balancer.io/job-size", "kueue.x-k8s.io/pod-group-total-count",
                 "leaderworkerset.sigs.k8s.io/size")
"""Annotations (or labels) giving how many pods a distributed job has: ours, Kueue's pod groups',
LeaderWorkerSet's (the group's size, leader included)."""


def job_size(pod: dict[str, Any]) -> int | None:
    """How many pods the pod's distributed job has, where the pod says; None where it does not."""
    metadata = as_dict(pod.get("metadata"))
    for key in JOB_SIZE_KEYS:
        for source in (as_dict(metadata.get("annotations")), as_dict(metadata.get("labels"))):
            value = source.get(key)
            if isinstance(value, str) and value.isdigit() and 0 < int(value) <= 100_000:
                return int(value)
    return None


def compute_domain_label_value(name: str) -> str:
    """A label value (≤ 63 characters) naming a claim template; long names keep a hash."""
    if len(name) <= 63:
        return name
    return f"{name[:50].rstrip('.-_')}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
