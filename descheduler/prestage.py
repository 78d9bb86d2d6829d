"""Make-before-break: a moved pod's images pulled onto its destination first. Does I/O (kubernetes client).

Through the injected client, except `prepull_pod`, `pulled` and `planned_staging`, which are pure.

A replacement that lands where its image is not waits minutes for the pull (a 20 GB serving image:
5–6 min to pull and 3–4 to extract, BentoML as issue 46 quotes it) while its service runs a
replica short. So before a live eviction, a short-lived pod pinned to the node the plan reserved
(`PlannedEviction.destination`) pulls the images that node does not list, and the eviction waits
until they are there or `descheduler.prestageDeadlineSeconds` has passed. The pod lives in the
descheduler's own namespace, so its Role there is all it needs (create, get and delete pods);
it asks for no GPU, runs as nobody under the restricted Pod Security Standard, and exits at once.

Where the pull fails (a registry that needs the moved pod's own pull secrets, which live in its
namespace, not ours) the eviction goes ahead at once: no worse than without pre-staging.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from descheduler.proposals import PlannedEviction

log = logging.getLogger("gpu_balancer.descheduler")

COMPONENT = "prepull"
"""`app.kubernetes.io/component` of the pre-pull pods (`kubectl get pods -l ...` finds any left)."""
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                           "RegistryUnavailable"})
POLL_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Staging:
    """What became of one eviction's pre-staging."""

    node: str
    images: int
    result: str
    """"present" (the node lists them all), "pulled", "deadline", "failed" or "off"."""
    seconds: float = 0.0
    detail: str = ""

    @property
    def waited(self) -> bool:
        return self.result in ("pulled", "deadline")

    def describe(self) -> str:
        """e.g. "pulled 1 image on gpu-7 in 42 s, then evicted"."""
        what = f"{self.images} image{'s' if self.images != 1 else ''} on {self.node}"
        return {"present": f"image already on {self.node}",
                "pulled": f"pulled {what} in {self.seconds:.0f} s, then evicted",
                "deadline": f"{what} still pulling after {self.seconds:.0f} s: evicted at the deadline",
                "failed": f"could not pre-stage {what} ({self.detail}): evicted at once",
                "off": "not pre-staged (prestageDeadlineSeconds 0)"}.get(self.result, self.result)


def planned_staging(eviction: PlannedEviction, deadline_seconds: float) -> str:
    """What a live run would do before this eviction (for a dry run's report)."""
    if deadline_seconds <= 0 or not eviction.destination:
        return "not pre-staged"
    if not eviction.stage:
        return f"image already on {eviction.destination}"
    count = len(eviction.stage)
    return (f"would pull {count} image{'s' if count != 1 else ''} on {eviction.destination} first "
            f"(up to {deadline_seconds:.0f} s)")


def prepull_name(eviction: PlannedEviction) -> str:
    """One name per (pod, destination), so a run that finds an earlier run's pod reuses it."""
    digest = hashlib.sha256(f"{eviction.namespace}/{eviction.pod}@{eviction.destination}".encode()).hexdigest()
    return f"gpu-balancer-prepull-{digest[:12]}"


def prepull_pod(eviction: PlannedEviction, namespace: str, deadline_seconds: float) -> dict[str, Any]:
    """The pod that pulls `eviction.stage` onto `eviction.destination`: pinned by `nodeName`
    (the scheduler has no say, and no GPU is asked for), tolerating every taint, each image run
    as a container that exits at once (an image without a shell fails to start, after its pull,
    which is all that matters). `activeDeadlineSeconds` ends it should the run die before
    deleting it."""
    tiny = {"cpu": "10m", "memory": "32Mi"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": prepull_name(eviction), "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "gpu-balancer", "app.kubernetes.io/component": COMPONENT},
            "annotations": {"gpu-balancer.io/prestage-for": f"{eviction.namespace}/{eviction.pod}"},
        },
        "spec": {
            "nodeName": eviction.destination,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(deadline_seconds) + 60,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": f"image-{i}", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "exit 0"],
                "resources": {"requests": tiny, "limits": tiny},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            } for i, image in enumerate(eviction.stage)],
        },
    }


def pulled(status: Mapping[str, Any], containers: int) -> str | None:
    """"pulled" once every container's image is on the node (it ran, or has an image ID),
    "failed: <why>" once one cannot be, else None (still pulling). `status`: the pod's, as JSON."""
    if status.get("phase") == "Failed" and not status.get("containerStatuses"):
        return f"failed: {status.get('reason') or 'the kubelet rejected the pod'}"
    states = status.get("containerStatuses") or []
    for state in states:
        waiting = (state.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURES:
            return f"failed: {waiting['reason']}"
    done = [s for s in states if s.get("imageID") or {"running", "terminated"} & set((s.get("state") or {}))]
    return "pulled" if len(done) >= containers else None


def stage(core: client.CoreV1Api, evictions: Sequence[PlannedEviction], *, namespace: str,
          deadline_seconds: float, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> tuple[Staging, ...]:
    """Pre-stage every eviction's images at once and wait for all of them (or the deadline);
    one `Staging` per eviction, in order. The pre-pull pods are deleted before it returns."""
    if deadline_seconds <= 0:
        return tuple(Staging(e.destination, len(e.stage), "off") for e in evictions)
    start = clock()
    results: dict[int, Staging] = {}
    waiting: dict[int, str] = {}  # eviction's position → its pre-pull pod, while it pulls
    created: list[str] = []
    try:
        for i, eviction in enumerate(evictions):
            if not eviction.destination or not eviction.stage:
                results[i] = Staging(eviction.destination, 0, "present")
                continue
            body = prepull_pod(eviction, namespace, deadline_seconds)
            try:
                core.create_namespaced_pod(namespace, body)
            except ApiException as error:
                if error.status != 409:  # 409: an earlier run's pod for the same move, still there
                    results[i] = Staging(eviction.destination, len(eviction.stage), "failed", 0.0,
                                         f"{error.status} {error.reason}")
                    log.warning("could not create the pre-pull pod for %s/%s on %s: %s %s", eviction.namespace,
                                eviction.pod, eviction.destination, error.status, error.reason)
                    continue
            waiting[i] = body["metadata"]["name"]
            created.append(waiting[i])
            log.info("pre-staging %s on %s before evicting %s/%s", ", ".join(eviction.stage), eviction.destination,
                     eviction.namespace, eviction.pod)
        while waiting:
            for i, name in list(waiting.items()):
                eviction = evictions[i]
                try:
                    status = core.api_client.sanitize_for_serialization(
                        core.read_namespaced_pod(name, namespace).status) or {}
                except ApiException as error:
                    status = {"phase": "Failed", "reason": f"{error.status} {error.reason}"}
                found = pulled(status, len(eviction.stage))
                if found is not None:
                    result, _, detail = found.partition(": ")
                    results[i] = Staging(eviction.destination, len(eviction.stage), result, clock() - start, detail)
                    del waiting[i]
            if waiting and clock() - start >= deadline_seconds:
                for i in waiting:
                    results[i] = Staging(evictions[i].destination, len(evictions[i].stage), "deadline",
                                         clock() - start)
                break
            if waiting:
                sleep(POLL_SECONDS)
    finally:
        for name in created:
            _delete(core, name, namespace)
    return tuple(results[i] for i in range(len(evictions)))


def _delete(core: client.CoreV1Api, name: str, namespace: str) -> None:
    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as error:
        if error.status != 404:
            log.warning("could not delete the pre-pull pod %s/%s: %s %s (its activeDeadlineSeconds ends it)",
                        namespace, name, error.status, error.reason)
