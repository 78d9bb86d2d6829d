"""A pod claiming its GPU through Dynamic Resource Allocation on the real control plane: the
controller manager makes its claim from the template, the real scheduler allocates a device on
the node our advice prefers. The fleet's ResourceSlices are published as NVIDIA's DRA driver does."""

from __future__ import annotations

import time

from sim.fleet import node_load_levels
from tests.control_plane.install import FLEET, OPTED_IN, advised, preferred_nodes
from tests.dra_objects import DRIVER, GPU_CLASS, dra_pod, exactly, gpu_slice, template

# NVIDIA's DRA driver installs this class: its GPUs (not MIG devices) by the driver's `type` attribute.
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GPU_CLASS},
    "spec": {"selectors": [{"cel": {"expression":
                                    f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}]},
}


def test_control_plane_dra_claim_is_allocated_by_the_real_scheduler_where_the_advice_points(installed):
    plane, webhook = installed.plane, installed.webhook
    hot = {FLEET.node_name(i) for i, level in enumerate(node_load_levels(FLEET)) if level >= 0.8}
    plane.apply([DEVICE_CLASS, *(gpu_slice(FLEET.node_name(i), FLEET.gpus_per_node) for i in range(FLEET.nodes))])
    plane.create_namespaces("cp-dra", labels=OPTED_IN)
    plane.apply(template("gpu", exactly(), namespace="cp-dra"))
    time.sleep(2)  # the webhook's watch delivers the slices and the template
    plane.apply(dra_pod("claimer", template_name="gpu", namespace="cp-dra", owner=None))
    pod = plane.get("pod", "claimer", "-n", "cp-dra")
    assert advised(pod), ("the API server called the webhook for a pod with resourceClaims", webhook.log())
    preferred = preferred_nodes(pod)
    assert preferred and not preferred & hot, pod["metadata"]["annotations"]
    bound = plane.wait_for(lambda: (p := plane.get("pod", "claimer", "-n", "cp-dra"))["spec"].get("nodeName") and p,
                           "the DRA pod bound", 60)
    (status,) = bound["status"]["resourceClaimStatuses"]
    claim = plane.get("resourceclaim", status["resourceClaimName"], "-n", "cp-dra")
    allocation = claim["status"]["allocation"]
    (term,) = allocation["nodeSelector"]["nodeSelectorTerms"]
    allocated_on = {v for field in term.get("matchFields", []) if field["key"] == "metadata.name"
                    for v in field["values"]}
    (result,) = allocation["devices"]["results"]
    assert result["driver"] == DRIVER and result["pool"] == bound["spec"]["nodeName"], result
    assert allocated_on == {bound["spec"]["nodeName"]} and allocated_on <= preferred, (allocated_on, preferred)
