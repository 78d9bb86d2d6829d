"""What the scheduler reserves for a pod, and what it scores with. Pure, no I/O.

As the scheduler's resource helper computes it: app containers summed; sidecars (init containers
with `restartPolicy: Always`) added to them and to every later init container; each ordinary init
container (plus the sidecars started before it) only raises the peak; `spec.overhead` on top. A
container's missing request is its limit (the API server's defaulting). For scoring, a container
that requests no CPU or memory counts as 100m and 200Mi (the scheduler's non-zero defaults).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from scoring.cluster.workloads import BadQuantity, as_dict, as_list, parse_quantity

DEFAULT_CPU_CORES = 0.1
DEFAULT_MEMORY_BYTES = 200 * 2**20
NON_ZERO_DEFAULTS = {"cpu": DEFAULT_CPU_CORES, "memory": DEFAULT_MEMORY_BYTES}


def quantity(value: Any) -> float:
    try:
        return float(parse_quantity(value))
    except BadQuantity:
        return 0.0


def container_requests(container: object, *, non_zero: bool = False) -> Counter:
    resources = as_dict(as_dict(container).get("resources"))
    merged = {**as_dict(resources.get("limits")), **as_dict(resources.get("requests"))}
    wanted = Counter({name: quantity(value) for name, value in merged.items()})
    if non_zero:
        for name, default in NON_ZERO_DEFAULTS.items():
            if name not in merged:
                wanted[name] = default
    return wanted


def _peak(a: Counter, b: Counter) -> Counter:
    return Counter({name: max(a[name], b[name]) for name in set(a) | set(b)})


def pod_requests(pod: Mapping[str, Any], *, non_zero: bool = False) -> Counter:
    """The pod's effective requests (cpu in cores, memory in bytes, devices in units)."""
    spec = as_dict(pod.get("spec"))
    total: Counter = Counter()
    for container in as_list(spec.get("containers")):
        total.update(container_requests(container, non_zero=non_zero))
    sidecars: Counter = Counter()
    init_peak: Counter = Counter()
    for container in as_list(spec.get("initContainers")):
        wanted = container_requests(container, non_zero=non_zero)
        if as_dict(container).get("restartPolicy") == "Always":
            total.update(wanted)
            sidecars.update(wanted)
            init_peak = _peak(init_peak, sidecars)
        else:
            init_peak = _peak(init_peak, wanted + sidecars)
    total = _peak(total, init_peak)
    total.update({name: quantity(value) for name, value in as_dict(spec.get("overhead")).items()})
    return total
