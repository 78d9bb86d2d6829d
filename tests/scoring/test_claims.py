"""DRA: a pod's ResourceClaims counted per GPU DeviceClass, devices read from ResourceSlices and
allocations, and feasibility judged on them as the DynamicResources plugin would."""

from __future__ import annotations

import pytest

from scoring.cluster.claims import (ClaimBook, allocated_devices, book_from_objects, class_resource, held_devices,
                                    inventory_from_slices, pod_claims)
from scoring.cluster.feasibility import NodeFacts, constraints_of, why_infeasible
from scoring.cluster.workloads import gpu_request, training_group
from scoring.policy import GpuDeviceClass, PlacementPolicy, PolicyError, parse_policy
from tests.dra_objects import (CHANNEL_CLASS, GPU_CLASS, MIG_CLASS, claim, dra_pod, exactly, first_available,
                               gpu_slice, template)

POLICY = PlacementPolicy()
GPU, MIG = class_resource(GPU_CLASS), class_resource(MIG_CLASS)


def needs(pod, *objects):
    book = book_from_objects(objects, POLICY)
    claims = pod_claims(pod, book, POLICY)
    return gpu_request(pod, POLICY, claims), constraints_of(pod, POLICY, claims)


def test_a_pod_claiming_gpus_through_a_template_is_a_gpu_pod_counted_exactly():
    request, constraints = needs(dra_pod("a", template_name="two-gpus"), template("two-gpus", exactly(count=2)))
    assert request.units == ((GPU, 2),) and request.whole_gpus == 2
    assert request.claims.templated == ("two-gpus",) and request.claims.named == ()
    assert constraints.units == ((GPU, 2),)


def test_without_its_claims_the_same_pod_is_not_a_gpu_pod():
    pod = dra_pod("a", template_name="two-gpus")
    assert gpu_request(pod, POLICY) is None
    assert gpu_request(pod, POLICY, pod_claims(pod, ClaimBook(), POLICY)) is None
    assert pod_claims(pod, ClaimBook(), POLICY).missing == ("two-gpus",)


def test_a_claim_for_devices_that_are_not_gpus_leaves_the_pod_alone():
    nic = template("nic", exactly("sriov.example.com", 1))
    assert needs(dra_pod("a", template_name="nic"), nic)[0] is None


def test_mig_devices_count_as_units_but_not_whole_gpus():
    request, _ = needs(dra_pod("a", template_name="mig"), template("mig", exactly(MIG_CLASS, 3)))
    assert request.units == ((MIG, 3),) and request.whole_gpus == 0


def test_claims_add_up_with_each_other_and_with_extended_resources():
    pod = dra_pod("a", template_name="one", extra_claims=[{"name": "more", "resourceClaimTemplateName": "two"}])
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    request, _ = needs(pod, template("one", exactly()), template("two", exactly(count=2), exactly(MIG_CLASS, 1)))
    assert request.units == ((GPU, 3), (MIG, 1), ("nvidia.com/gpu", 1)) and request.whole_gpus == 4


def test_a_beta_claim_with_flat_requests_is_read_too():
    beta = template("flat")
    beta["spec"]["spec"]["devices"]["requests"] = [{"name": "gpu", "deviceClassName": GPU_CLASS, "count": 2}]
    assert needs(dra_pod("a", template_name="flat"), beta)[0].units == ((GPU, 2),)


def test_allocation_mode_all_needs_a_node_with_every_device_free():
    request, constraints = needs(dra_pod("a", template_name="all"), template("all", exactly(mode="All")))
    assert request.whole_gpus == 1 and constraints.all_of == (GPU,) and constraints.units == ()
    assert "allocationMode All" in request.claims.notes[0]
    node = NodeFacts("n1", {}, (), False, {GPU: 4})
    assert why_infeasible(constraints, node) is None
    assert why_infeasible(constraints, node, free={GPU: 4}) is None
    assert "every device free" in why_infeasible(constraints, node, free={GPU: 3})
    assert why_infeasible(constraints, NodeFacts("n2", {}, (), False, {})) is not None


def test_first_available_fits_where_any_choice_fits_and_counts_the_first():
    request, constraints = needs(dra_pod("a", template_name="fa"), template("fa", first_available((MIG_CLASS, 1),
                                                                                                   (GPU_CLASS, 1))))
    assert constraints.alternatives == (((MIG, 1), (GPU, 1)),) and request.whole_gpus == 0
    assert "firstAvailable" in request.claims.notes[0]
    assert why_infeasible(constraints, NodeFacts("gpus-only", {}, (), False, {GPU: 8})) is None
    assert why_infeasible(constraints, NodeFacts("migs-only", {}, (), False, {MIG: 7})) is None
    assert "no firstAvailable choice fits" in why_infeasible(constraints, NodeFacts("none", {}, (), False, {}))
    gpus_first, _ = needs(dra_pod("b", template_name="fa"), template("fa", first_available((GPU_CLASS, 2),
                                                                                            (MIG_CLASS, 1))))
    assert gpus_first.whole_gpus == 2, "the first choice is what the scheduler tries first"


def test_an_allocated_named_claim_pins_the_pod_to_its_devices_node():
    shared = claim("shared", exactly(count=2), allocated=[("n1", "gpu-0"), ("n1", "gpu-1")], node="n1")
    request, constraints = needs(dra_pod("a", claim_name="shared"), shared)
    assert request.claims.named == ("shared",) and request.units == ()
    assert why_infeasible(constraints, NodeFacts("n1", {}, (), False, {GPU: 8})) is None
    assert "other nodes" in why_infeasible(constraints, NodeFacts("n2", {}, (), False, {GPU: 8}))


def test_an_unallocated_named_claim_needs_its_devices():
    request, _ = needs(dra_pod("a", claim_name="shared"), claim("shared", exactly(count=4)))
    assert request.units == ((GPU, 4),) and request.claims.named == ("shared",)


def test_admin_access_and_bad_counts_take_no_devices():
    request, _ = needs(dra_pod("a", template_name="t"),
                       template("t", exactly(adminAccess=True), exactly(count=0, name="zero"), exactly(name="ok")))
    assert request.units == ((GPU, 1),)
    assert any("adminAccess" in n for n in request.claims.notes) and any("count 0" in n for n in request.claims.notes)


def test_a_compute_domain_channel_names_the_job_the_pod_packs_with():
    channel = template("cd-job-channel", exactly(CHANNEL_CLASS, 1, name="channel"))
    pod = dra_pod("w0", template_name="gpus", extra_claims=[{"name": "ch", "resourceClaimTemplateName": "cd-job-channel"}])
    request, _ = needs(pod, channel, template("gpus", exactly(count=4)))
    assert training_group(pod, POLICY, request.claims) == ("gpu-balancer.io/compute-domain", "cd-job-channel")
    assert training_group(pod, POLICY) is None


def test_slices_give_each_node_its_gpu_and_mig_devices():
    slices = [gpu_slice("n1", 8), gpu_slice("n2", 2, migs=7, qualified=True),
              gpu_slice("n3", 8, generation=1), gpu_slice("n3", 4, generation=2)]
    network = gpu_slice("nowhere", 4)
    del network["spec"]["nodeName"]
    network["spec"]["allNodes"] = True
    network["spec"]["pool"]["name"] = "fabric"
    inventory = inventory_from_slices(slices + [network], POLICY)
    assert inventory.capacity == {"n1": {GPU: 8}, "n2": {GPU: 2, MIG: 7}, "n3": {GPU: 4}}
    assert inventory.unplaced == 4, "network-attached devices name no node"


def test_allocations_hold_each_device_once_however_many_claims_name_it():
    inventory = inventory_from_slices([gpu_slice("n1", 8)], POLICY)
    a = claim("a", exactly(count=2), allocated=[("n1", "gpu-0"), ("n1", "gpu-1")])
    b = claim("b", exactly(), allocated=[("n1", "gpu-1")])
    stray = claim("c", exactly(), allocated=[("gone", "gpu-0")])
    assert held_devices([allocated_devices(c) for c in (a, b, stray)], inventory) == {"n1": {GPU: 2}}


def test_device_classes_are_validated_by_name():
    with pytest.raises(PolicyError, match="placement.gpuDeviceClasses"):
        parse_policy("placement:\n  gpuDeviceClasses:\n  - {name: a}\n  - {name: a}\n")
    with pytest.raises(PolicyError, match=r"gpuDeviceClasses\[0\]"):
        parse_policy("placement:\n  gpuDeviceClasses:\n  - {name: a, deviceType: gpu}\n")
    custom = parse_policy("placement:\n  gpuDeviceClasses:\n  - {name: h100.example.com, driver: gpu.nvidia.com}\n")
    assert custom.placement.gpu_device_classes == (GpuDeviceClass("h100.example.com", "gpu.nvidia.com"),)


def test_held_devices_kept_by_events_equal_a_recount():
    """Claims allocated, moved, shared and deleted in a random order, and the slices republished:
    the running counts equal `held_devices` over the claims as they stand."""
    import random

    from scoring.cluster.claims import HeldDevices

    rng = random.Random(4)
    inventory = inventory_from_slices([gpu_slice(f"n{i}", 4) for i in range(3)], POLICY)
    live, current = HeldDevices(), {}
    live.use(inventory)
    for step in range(300):
        key = ("ml", f"c{rng.randrange(12)}")
        devices = tuple(("gpu.nvidia.com", f"n{rng.randrange(3)}", f"gpu-{rng.randrange(4)}")
                        for _ in range(rng.choice((0, 1, 2))))
        live.set_claim(key, devices)
        current[key] = devices
        if step == 150:  # n2 republished with two GPUs: its other devices hold nothing now
            inventory = inventory_from_slices([gpu_slice("n0", 4), gpu_slice("n1", 4), gpu_slice("n2", 2)], POLICY)
            live.use(inventory)
        recount = held_devices(current.values(), inventory)
        assert {n: {r: c for r, c in d.items() if c} for n, d in live.per_node.items() if +d} == recount, step


def test_the_units_a_pod_most_likely_takes_add_every_first_choice():
    """Two firstAvailable requests whose first choice is the same class take two devices of it,
    in the webhook's booking and in the scheduler model alike."""
    from sim.cluster_context import ClusterContext
    from sim.plugins.dynamic_resources import claimed_devices

    spec = template("fa2", first_available((GPU_CLASS, 1), (MIG_CLASS, 1)),
                    first_available((GPU_CLASS, 1), (MIG_CLASS, 1), name="second"), exactly(mode="All", name="all"))
    pod = dra_pod("a", template_name="fa2")
    request, _ = needs(pod, spec)
    assert request.units == () and request.expected_units() == ((GPU, 3),)
    assert claimed_devices(pod, ClusterContext(claims=book_from_objects([spec], POLICY))) == {GPU: 3}
