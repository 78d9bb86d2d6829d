"""DRA in the descheduler: pods whose claims come from a template may move to a cool node with free
devices of their class; pods bound to a shared, named claim never do, and the skip says why."""

from __future__ import annotations

from descheduler.cluster import cluster_from_objects, namespace_object
from descheduler.filters import why_not_evictable
from descheduler.run import live_cluster
from scoring.cluster.claims import class_resource
from scoring.policy import BalancerPolicy, DeschedulerPolicy, OptInPolicy, PlacementPolicy
from tests.descheduler.helpers import fleet, heat, window
from tests.descheduler.test_plan import SUSTAINED, plan
from tests.dra_objects import claim, dra_pod, exactly, gpu_slice, template

GPU = class_resource("gpu.nvidia.com")


def dra_node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti"}}}


def pod_on(name, node, **claim_ref):
    obj = dra_pod(name, node=node, namespace="inference", owner=("ReplicaSet", f"{name}-5d8f7"), **claim_ref)
    return obj


def dra_cluster(*extra, cool_taken=0):
    """hot-a runs four DRA pods (two GPUs each, claims made from a template); cool-b has
    `cool_taken` of its eight GPUs claimed."""
    objects = [namespace_object("inference", OptInPolicy()), dra_node("hot-a"), dra_node("cool-b"),
               gpu_slice("hot-a", 8), gpu_slice("cool-b", 8), template("two-gpus", exactly(count=2),
                                                                       namespace="inference")]
    for i in range(4):
        objects.append(pod_on(f"p{i}", "hot-a", template_name="two-gpus"))
        objects.append(claim(f"p{i}-gpu-x", exactly(count=2), namespace="inference", owner_pod=f"p{i}",
                             allocated=[("hot-a", f"gpu-{2 * i}"), ("hot-a", f"gpu-{2 * i + 1}")]))
    if cool_taken:
        objects.append(claim("filler", exactly(count=cool_taken), namespace="inference",
                             allocated=[("cool-b", f"gpu-{g}") for g in range(cool_taken)]))
    return cluster_from_objects([*objects, *extra], PlacementPolicy())


USAGE = {"hot-a": [("inference", f"p{i}", 2, u) for i, u in enumerate((100.0, 98.0, 60.0, 40.0))]}


def test_a_pod_whose_claim_came_from_a_template_moves_to_a_node_with_free_devices():
    cluster = dra_cluster()
    assert cluster.free()["cool-b"][GPU] == 8 and cluster.free()["hot-a"][GPU] == 0
    (p0,) = [p for p in cluster.pods if p.name == "p0"]
    assert p0.gpu_resources == ((GPU, 2),) and why_not_evictable(p0, DeschedulerPolicy()) is None
    result = plan(cluster, usage=USAGE)
    assert [e.pod for e in result.evictions] and all(e.reason.endswith("room on cool-b") for e in result.evictions)


def test_without_free_devices_of_its_class_a_dra_pod_stays():
    result = plan(dra_cluster(cool_taken=7), usage=USAGE)
    assert result.evictions == ()
    assert any(f"no cool node has free {GPU}×2" in s.reason for s in result.skipped), result.skipped


def test_a_pod_bound_to_a_shared_named_claim_never_moves_and_the_skip_says_so():
    shared = claim("shared-gpus", exactly(count=2), namespace="inference",
                   allocated=[("hot-a", "gpu-0"), ("hot-a", "gpu-1")], node="hot-a")
    objects = [namespace_object("inference", OptInPolicy()), dra_node("hot-a"), dra_node("cool-b"),
               gpu_slice("hot-a", 8), gpu_slice("cool-b", 8), shared,
               pod_on("reader", "hot-a", claim_name="shared-gpus")]
    cluster = cluster_from_objects(objects, PlacementPolicy())
    result = plan(cluster, usage={"hot-a": [("inference", "reader", 2, 100.0)]},
                  fleet_=fleet(heat("hot-a", 92), heat("cool-b", 10)), stats=window(hot_a=SUSTAINED))
    assert result.evictions == ()
    (skip,) = [s for s in result.skipped if s.pod == "reader"]
    assert "shared ResourceClaim shared-gpus" in skip.reason and "template" in skip.reason


def test_the_live_cluster_reads_claims_through_the_api_and_copes_without_dra():
    """Through the real client against the API stand-in: with DRA objects, and on a cluster
    that serves no DRA API (its pods then ask for no GPU the descheduler can see, and stay)."""
    from kubernetes import client

    from tests.kube_api import KubeApi, serve

    api = KubeApi()
    server, url = serve(api)
    configuration = client.Configuration()
    configuration.host = url
    try:
        with client.ApiClient(configuration) as api_client:
            core = client.CoreV1Api(api_client)
            for kind, obj in (("namespaces", namespace_object("inference", OptInPolicy())),
                              ("nodes", dra_node("hot-a")), ("resourceslices", gpu_slice("hot-a", 8)),
                              ("resourceclaimtemplates", template("two-gpus", exactly(count=2), namespace="inference")),
                              ("resourceclaims", claim("p0-gpu-x", exactly(count=2), namespace="inference",
                                                       owner_pod="p0", allocated=[("hot-a", "gpu-0"), ("hot-a", "gpu-1")])),
                              ("pods", pod_on("p0", "hot-a", template_name="two-gpus"))):
                api.put(kind, obj)
            cluster = live_cluster(core, BalancerPolicy())
            assert cluster.free()["hot-a"][GPU] == 6 and cluster.opted_in_namespaces == {"inference"}
            assert [p.gpu_resources for p in cluster.pods] == [((GPU, 2),)]
            api.serves_dra = False
            blind = live_cluster(core, BalancerPolicy())
            assert blind.devices_held == {} and [p.gpu_resources for p in blind.pods] == [()]
            assert why_not_evictable(blind.pods[0], DeschedulerPolicy()) == "requests no GPU"
    finally:
        server.shutdown()


def test_dra_objects_of_any_shape_never_break_the_cluster_read():
    """A cluster file is untrusted: slices, claims and templates whatever their fields, and pods
    naming them, read without an exception (the explain reader too)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from sim.explain import context_from_list, nodes_from_list
    from tests.webhook.test_bad_input import json_values

    kinds = st.sampled_from(["ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"])
    objects = st.lists(st.fixed_dictionaries({"kind": kinds, "metadata": st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b"]), "namespace": st.just("inference")}), "spec": json_values,
        "status": json_values}), max_size=6)

    @settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(objects, st.lists(json_values, max_size=3))
    def read(dra_objects, refs):
        pod = pod_on("p0", "hot-a", template_name="a")
        pod["spec"]["resourceClaims"] = refs + pod["spec"]["resourceClaims"]
        items = [dra_node("hot-a"), *dra_objects, pod]
        cluster = cluster_from_objects(items, PlacementPolicy())
        cluster.free()
        document = {"kind": "List", "items": items}
        nodes_from_list(document)
        context_from_list(document)

    read()
