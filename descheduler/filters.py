""""May this pod go?" — the evictability filter, with a reason for every no. Pure, no I/O."""

from __future__ import annotations

from descheduler.cluster import SYSTEM_CRITICAL_PRIORITY, PodInfo
from scoring.policy import DeschedulerPolicy

OPT_OUT = "gpu-balancer.io/opt-out"
EVICTABLE = "gpu-balancer.io/evictable"


def why_not_evictable(pod: PodInfo, policy: DeschedulerPolicy) -> str | None:
    """None when the pod may be evicted; otherwise the reason it must stay."""
    if pod.annotations.get(OPT_OUT) == "true":
        return "opted out"
    if pod.mirror:
        return "mirror/static pod"
    if pod.owner_kind == "DaemonSet":
        return "DaemonSet pod"
    if not pod.owner_kind:
        return "no controller would recreate it"
    if pod.terminating:
        return "already terminating"
    if pod.phase != "Running":
        return f"not running ({pod.phase or 'unknown phase'})"
    if pod.priority >= SYSTEM_CRITICAL_PRIORITY:
        return "system-critical priority"
    if pod.local_storage and not policy.evict_pods_with_local_storage:
        return "uses local storage (emptyDir/hostPath)"
    if pod.training_group and pod.annotations.get(EVICTABLE) != "true":
        return f"member of distributed job {pod.training_group[1]}"
    if pod.shared_claims:
        return (f"its GPUs come from the shared ResourceClaim {', '.join(pod.shared_claims)}: the devices stay "
                "with the claim, so a replacement could only return to this node (claims made from a "
                "template move with the pod)")
    if not pod.gpu_resources:
        return "requests no GPU"
    return None
