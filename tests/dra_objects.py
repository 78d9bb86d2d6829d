"""DRA objects shaped as `resource.k8s.io/v1` serves them, for tests: claim templates, claims,
ResourceSlices of NVIDIA's DRA driver, and pods that claim GPUs through them."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.nvidia.com"
GPU_CLASS, MIG_CLASS = "gpu.nvidia.com", "mig.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"


def exactly(device_class: str = GPU_CLASS, count: int | None = 1, *, name: str = "gpu",
            mode: str | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if mode is not None:
        spec["allocationMode"] = mode
    if count is not None and mode != "All":
        spec["count"] = count
    return {"name": name, "exactly": spec}


def first_available(*choices: tuple[str, int], name: str = "gpu") -> dict[str, Any]:
    return {"name": name, "firstAvailable": [
        {"name": f"choice-{i}", "deviceClassName": c, "count": n} for i, (c, n) in enumerate(choices)]}


def template(name: str, *requests: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def claim(name: str, *requests: dict[str, Any], namespace: str = "ml",
          allocated: list[tuple[str, str]] | None = None, node: str | None = None,
          owner_pod: str | None = None) -> dict[str, Any]:
    """A ResourceClaim; `allocated` lists (pool, device) results of the GPU driver on `node`."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner_pod:  # made from a template for this pod
        metadata["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner_pod, "uid": f"uid-{owner_pod}",
                                        "controller": True, "blockOwnerDeletion": True}]
    obj: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata,
                           "spec": {"devices": {"requests": list(requests)}}}
    if allocated is not None:
        obj["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}
                                    for pool, device in allocated]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node or allocated[0][0]]}]}]}}}
    return obj


def gpu_slice(node: str, gpus: int, *, migs: int = 0, generation: int = 1, qualified: bool = False,
              name: str | None = None) -> dict[str, Any]:
    """The slice NVIDIA's kubelet plugin publishes for one node: pool = node name, devices gpu-N
    (and mig-N-…) with a `type` attribute, qualified by the driver's domain or not."""
    key = f"{DRIVER}/type" if qualified else "type"
    devices = [{"name": f"gpu-{i}", "attributes": {key: {"string": "gpu"}, "index": {"int": i},
                                                   "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(gpus)]
    devices += [{"name": f"mig-{i}", "attributes": {key: {"string": "mig"}, "profile": {"string": "1g.10gb"}},
                 "capacity": {"memory": {"value": "10Gi"}}} for i in range(migs)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-{DRIVER}-{generation}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                  "resourceSliceCount": 1},
                     "devices": devices}}


def dra_pod(name: str, *, template_name: str | None = None, claim_name: str | None = None, namespace: str = "ml",
            labels: dict[str, str] | None = None, owner: tuple[str, str] | None = ("ReplicaSet", "svc-5d8f7"),
            node: str | None = None, extra_claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A pod asking for its GPU through one claim (by template or by name) and no extended resource."""
    ref: dict[str, Any] = {"name": "gpu"}
    if template_name is not None:
        ref["resourceClaimTemplateName"] = template_name
    if claim_name is not None:
        ref["resourceClaimName"] = claim_name
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": labels or {"app": "svc", "pod-template-hash": "5d8f7"}}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                        "uid": "uid-owner", "controller": True}]
    spec: dict[str, Any] = {
        "containers": [{"name": "server", "image": "vllm/vllm-openai:v0.6.3",
                        "resources": {"requests": {"cpu": "4"}, "claims": [{"name": "gpu"}]}}],
        "resourceClaims": [ref, *(extra_claims or [])]}
    if node:
        spec["nodeName"] = node
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if node:
        obj["status"] = {"phase": "Running"}
    return obj
