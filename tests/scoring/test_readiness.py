"""Time to ready: image names in one form, a node's images as its kubelet lists them, and the
ranking that weighs a node's headroom by how soon a new pod would serve there."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from scoring.advice.placement import index_fleet
from scoring.advice.readiness import StartupCosts, by_time_to_ready, pod_startup, startup_costs, time_to_ready
from scoring.cluster.feasibility import NodeFacts, node_facts
from scoring.cluster.images import MIN_KEPT_IMAGE_BYTES, node_images, normal_image, pod_images
from scoring.cluster.view import ClusterView
from scoring.heat import Tier
from scoring.policy import BalancerPolicy, PlacementPolicy
from tests.webhook.helpers import NOW, apply_response, fleet, gpu_pod, node, review
from webhook.admit import decide
from webhook.ledger import SteeringLedger
from webhook.review import decode_review

GPU = "nvidia.com/gpu"
IMAGE = "vllm/vllm-openai:v0.8.5"
GB = 1_000_000_000


@pytest.mark.parametrize("written, normal", [
    ("vllm/vllm-openai:v0.8.5", "docker.io/vllm/vllm-openai:v0.8.5"),
    ("nginx", "docker.io/library/nginx:latest"),
    ("docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("index.docker.io/vllm/vllm-openai:v0.8.5", "docker.io/vllm/vllm-openai:v0.8.5"),
    ("nvcr.io/nvidia/tritonserver:25.01-py3", "nvcr.io/nvidia/tritonserver:25.01-py3"),
    ("nvcr.io/nvidia/tritonserver@sha256:0a1b", "nvcr.io/nvidia/tritonserver@sha256:0a1b"),
    ("localhost:5000/llm", "localhost:5000/llm:latest"),
    ("registry.example:5000/team/llm", "registry.example:5000/team/llm:latest"),
    ("  ", ""),
])
def test_image_names_compare_in_one_form(written, normal):
    assert normal_image(written) == normal


def kubelet_node(name: str, *images: tuple[list[str], object]) -> dict:
    """A Node as the kubelet reports it on containerd: each image by its tag and digest names."""
    return {"kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {GPU: "8"}, "images": [{"names": names, "sizeBytes": size} for names, size in images]}}


def test_a_nodes_large_images_are_kept_by_every_name_and_the_rest_ignored():
    obj = kubelet_node("n1",
                       (["docker.io/vllm/vllm-openai@sha256:9c1f", "docker.io/vllm/vllm-openai:v0.8.5"], 10 * GB),
                       (["registry.k8s.io/pause:3.10"], 320_000),
                       (["nvcr.io/nvidia/k8s-device-plugin:v0.17.0"], "12 GB"),  # not a number: skipped
                       ("not a list", 20 * GB), ({"names": None}, 20 * GB))
    images = node_images(obj)
    assert images == {"docker.io/vllm/vllm-openai@sha256:9c1f": 10 * GB, "docker.io/vllm/vllm-openai:v0.8.5": 10 * GB}
    assert node_facts(obj, PlacementPolicy()).images == images
    assert node_images({"status": {"images": "garbage"}}) == {} and node_images({}) == {}
    assert MIN_KEPT_IMAGE_BYTES > 320_000


def test_a_pods_images_are_its_containers_and_init_containers_once():
    pod = gpu_pod(initContainers=[{"name": "fetch", "image": "busybox"}, {"name": "x"}])
    pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    assert pod_images(pod) == ("docker.io/library/busybox:latest", "registry.example/server:1")


def test_time_to_ready_adds_the_missing_image_the_weights_and_the_start():
    costs = StartupCosts(image_pull_bytes_per_second=100e6, weight_load_bytes_per_second=2e9, startup_seconds=30)
    pod = gpu_pod(**{"containers": [{"name": "s", "image": IMAGE}]})
    pod["metadata"]["annotations"] = {"gpu-balancer.io/model-bytes": str(16 * GB)}
    startup = pod_startup(pod, {normal_image(IMAGE): 12 * GB}, costs)
    cold = time_to_ready(startup, None, costs)
    warm = time_to_ready(startup, NodeFacts("n", images={normal_image(IMAGE): 12 * GB}), costs)
    assert cold.seconds == pytest.approx(120 + 8 + 30) and cold.describe() == "~158 s (pull 12.0 GB)"
    assert warm.seconds == pytest.approx(8 + 30) and warm.describe() == "~38 s (image cached)"
    unsized = pod_startup(gpu_pod(), {}, costs)  # no node lists it, the pod does not say: the default
    assert time_to_ready(unsized, None, costs).missing_bytes == costs.unknown_image_bytes


@pytest.mark.parametrize("pull_bytes_per_second, first", [(30e6, "warm-cached"), (1e9, "cool-empty")])
def test_a_warm_node_holding_the_image_beats_a_cool_one_only_where_the_pull_costs_more_than_it_gains(
        pull_bytes_per_second, first):
    """At 30 MB/s a 15 GB image takes over eight minutes, most of the ten-minute horizon: the
    warm node that holds it serves sooner and longer. At 1 GB/s the pull is seconds and the cool
    node's idle cycles win."""
    costs = StartupCosts(image_pull_bytes_per_second=pull_bytes_per_second)
    nodes = {"cool-empty": NodeFacts("cool-empty", allocatable={GPU: 8}),
             "warm-cached": NodeFacts("warm-cached", allocatable={GPU: 8}, images={normal_image(IMAGE): 15 * GB})}
    startup = pod_startup(gpu_pod(**{"containers": [{"name": "s", "image": IMAGE}]}), {normal_image(IMAGE): 15 * GB},
                          costs)
    ranked = [(1.0, 8, "cool-empty"), (0.5, 8, "warm-cached")]  # headroom: a warm node counts half
    reranked, estimates = by_time_to_ready(ranked, startup, nodes, costs, k=2)
    assert reranked[0][2] == first
    assert dict(estimates)["warm-cached"].missing_bytes == 0 and dict(estimates)["cool-empty"].missing_bytes == 15 * GB



def _advice_annotation(pod, index, view, placement, startup) -> str:
    """The advice the webhook writes on `pod`, from a fresh ledger over `index` and `view`."""
    ledger = SteeringLedger(60)
    ledger.prepare(index, view)
    decision = decide(decode_review(json.dumps(review(pod)).encode()), index=index, telemetry_time=NOW,
                      snapshot_age_seconds=1, ledger=ledger, policy=placement, now=NOW, startup=startup)
    return apply_response(pod, decision.review)["metadata"]["annotations"]["gpu-balancer.io/advice"]


def test_the_webhook_ranks_by_time_to_ready_and_says_so_on_the_pod():
    policy = BalancerPolicy()
    slow_pulls = replace(policy, descheduler=replace(policy.descheduler, image_pull_bytes_per_second=30e6))
    costs = startup_costs(slow_pulls)
    view = ClusterView({"cool-empty": NodeFacts("cool-empty", allocatable={GPU: 8}),
                        "warm-cached": NodeFacts("warm-cached", allocatable={GPU: 8},
                                                 images={normal_image(IMAGE): 15 * GB})}, taken_at=NOW)
    index = index_fleet(fleet(node("cool-empty", util=5), node("warm-cached", tier=Tier.WARM, util=60)))
    pod = gpu_pod(**{"containers": [{"name": "s", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}]})

    def advice(startup):
        return _advice_annotation(pod, index, view, slow_pulls.placement, startup)

    timed = advice(costs)
    assert timed.startswith("preferred warm-cached(100),cool-empty(")
    assert "ready warm-cached ~30 s (image cached), cool-empty ~530 s (pull 15.0 GB)" in timed, timed
    assert advice(None).startswith("preferred cool-empty(100)"), "without costs: headroom alone"
    assert startup_costs(BalancerPolicy(placement=PlacementPolicy(ready_horizon_seconds=0))) is None


def test_a_pod_that_names_its_model_loads_it_fast_only_where_fluid_says_the_node_caches_it():
    costs = StartupCosts(weight_load_bytes_per_second=133e6, remote_weight_bytes_per_second=13.4e6, startup_seconds=30)
    pod = gpu_pod(**{"containers": [{"name": "s", "image": IMAGE}]})
    pod["metadata"]["annotations"] = {"gpu-balancer.io/model-bytes": str(16 * GB), "gpu-balancer.io/model": "llama-3-1-8b"}
    startup = pod_startup(pod, {}, costs)
    assert startup.model == ("ml", "llama-3-1-8b")
    images = {normal_image(IMAGE): 5 * GB}
    cached = NodeFacts("cached", {"fluid.io/s-ml-llama-3-1-8b": "true"}, images=images)
    other_namespace = NodeFacts("other", {"fluid.io/s-team-llama-3-1-8b": "true"}, images=images)
    assert time_to_ready(startup, cached, costs).seconds == pytest.approx(16 * GB / 133e6 + 30)
    remote = time_to_ready(startup, other_namespace, costs)
    assert remote.seconds == pytest.approx(16 * GB / 13.4e6 + 30)
    assert remote.describe() == "~1,224 s (image cached, weights remote)"
    # A pod that does not name its model loads at the one rate everywhere, as before.
    del pod["metadata"]["annotations"]["gpu-balancer.io/model"]
    unnamed = pod_startup(pod, {}, costs)
    assert time_to_ready(unnamed, other_namespace, costs).seconds == time_to_ready(unnamed, cached, costs).seconds


def test_a_queueing_services_pod_goes_where_it_serves_soonest_with_no_spread_and_says_why():
    """In steady state headroom times the serving share ranks: the cool node that must fetch the
    weights remotely still leads a warm one that caches them when the share is close. Queueing, the
    soonest ready leads, and the spread term that would push the pod off it is left out."""
    policy = BalancerPolicy()
    costs = startup_costs(policy)
    labels = {"fluid.io/s-ml-llama-3-1-8b": "true"}
    view = ClusterView({"cool-remote": NodeFacts("cool-remote", allocatable={GPU: 8}),
                        "warm-cached": NodeFacts("warm-cached", labels, allocatable={GPU: 8})}, taken_at=NOW)
    heat = fleet(node("cool-remote", util=5), node("warm-cached", tier=Tier.WARM, util=60))
    pod = gpu_pod(**{"containers": [{"name": "s", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}]})
    pod["metadata"]["annotations"] = {"gpu-balancer.io/model-bytes": str(16 * GB), "gpu-balancer.io/model": "llama-3-1-8b"}

    def advice(queueing):
        index = index_fleet(heat, queueing=queueing)
        ledger = SteeringLedger(60)
        ledger.prepare(index, view)
        decision = decide(decode_review(json.dumps(review(pod)).encode()), index=index, telemetry_time=NOW,
                          snapshot_age_seconds=1, ledger=ledger, policy=policy.placement, now=NOW, startup=costs)
        return apply_response(pod, decision.review)

    urgent = advice(frozenset({("ml", "svc")}))
    note = urgent["metadata"]["annotations"]["gpu-balancer.io/advice"]
    assert note.startswith("urgent: svc queueing; preferred warm-cached(100)"), note
    assert "topologySpreadConstraints" not in urgent["spec"]
    calm = advice(frozenset({("ml", "another-svc")}))
    assert not calm["metadata"]["annotations"]["gpu-balancer.io/advice"].startswith("urgent")
    assert "topologySpreadConstraints" in calm["spec"]


@pytest.mark.parametrize("ratio, threshold, urgent", [(1.5, 1.25, True), (1.2, 1.25, False), (1.5, 0, False)])
def test_a_pod_whose_autoscaler_reads_its_load_well_over_target_is_urgent_before_any_queue_shows(
        ratio, threshold, urgent):
    """The HPA added the pod because load outran its target; the serving series show the queue a
    scrape and a rule later. Past `urgentScaleRatio` the pod goes where it serves soonest and says
    why, with no spread term to push it off that node; below the ratio, or with it off (0), the
    pod is placed as in steady state, spread term and all."""
    placement = PlacementPolicy(urgent_scale_ratio=threshold)
    labels = {"fluid.io/s-ml-llama-3-1-8b": "true"}
    view = ClusterView({"cool-remote": NodeFacts("cool-remote", allocatable={GPU: 8}),
                        "warm-cached": NodeFacts("warm-cached", labels, allocatable={GPU: 8})}, taken_at=NOW,
                       scaling={("ml", "svc"): ratio, ("ml", "another-svc"): 9.0})
    index = index_fleet(fleet(node("cool-remote", util=5), node("warm-cached", tier=Tier.WARM, util=60)))
    pod = gpu_pod(**{"containers": [{"name": "s", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}]})
    pod["metadata"]["annotations"] = {"gpu-balancer.io/model-bytes": str(16 * GB), "gpu-balancer.io/model": "llama-3-1-8b"}
    note = _advice_annotation(pod, index, view, placement, startup_costs(BalancerPolicy(placement=placement)))
    if urgent:
        assert note.startswith("urgent: svc scaling: HPA at 1.50× target; preferred warm-cached(100)"), note
        assert "spread hostname" not in note
    else:
        assert not note.startswith("urgent") and "spread hostname" in note, note


@pytest.mark.parametrize("holds", ["model", "image"])
@pytest.mark.parametrize("queueing, first", [(frozenset({("ml", "svc")}), "warm-cached"), (frozenset(), "cool-00")])
def test_a_queueing_services_pod_finds_the_node_that_holds_its_model_or_image_however_far_down_it_ranks(
        queueing, first, holds):
    """Time to ready re-ranks the best 3 × K nodes by headroom. For a queueing service's pod a node
    that caches its model (or, where it names none, holds its image) joins them wherever it ranks,
    so twenty cool nodes that must fetch for minutes do not hide the warm one that readies it in
    seconds; in steady state that node's room is left for such pods."""
    policy = BalancerPolicy()
    cool = [f"cool-{i:02d}" for i in range(20)]
    pod = gpu_pod(**{"containers": [{"name": "s", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}]})
    if holds == "model":
        pod["metadata"]["annotations"] = {"gpu-balancer.io/model-bytes": str(16 * GB),
                                          "gpu-balancer.io/model": "llama-3-1-8b"}
        warm = NodeFacts("warm-cached", {"fluid.io/s-ml-llama-3-1-8b": "true"}, allocatable={GPU: 8})
    else:
        warm = NodeFacts("warm-cached", allocatable={GPU: 8}, images={normal_image(IMAGE): 15 * GB})
    view = ClusterView({**{n: NodeFacts(n, allocatable={GPU: 8}) for n in cool}, "warm-cached": warm}, taken_at=NOW)
    index = index_fleet(fleet(*(node(n, util=5) for n in cool), node("warm-cached", tier=Tier.WARM, util=60)),
                        queueing=queueing)
    ledger = SteeringLedger(60)
    ledger.prepare(index, view)
    decision = decide(decode_review(json.dumps(review(pod)).encode()), index=index, telemetry_time=NOW,
                      snapshot_age_seconds=1, ledger=ledger, policy=policy.placement, now=NOW,
                      startup=startup_costs(policy))
    note = apply_response(pod, decision.review)["metadata"]["annotations"]["gpu-balancer.io/advice"]
    assert note.removeprefix("urgent: svc queueing; ").startswith(f"preferred {first}(100)"), note


def test_a_group_pod_is_packed_into_one_domain_and_inside_it_goes_where_it_is_ready_soonest():
    """A LeaderWorkerSet's pod: one NVLink domain, and there the node holding its image first,
    as a lone replica would be ranked (issue 46's llm-tp-disagg: every group pod pulls otherwise)."""
    policy = BalancerPolicy()
    slow_pulls = replace(policy, descheduler=replace(policy.descheduler, image_pull_bytes_per_second=30e6))
    clique = {"nvidia.com/gpu.clique": "rack-0"}
    view = ClusterView({"cool-empty": NodeFacts("cool-empty", clique, allocatable={GPU: 8}),
                        "warm-cached": NodeFacts("warm-cached", clique, allocatable={GPU: 8},
                                                 images={normal_image(IMAGE): 15 * GB}),
                        "elsewhere": NodeFacts("elsewhere", {"nvidia.com/gpu.clique": "rack-1"}, allocatable={GPU: 8})},
                       taken_at=NOW)
    index = index_fleet(fleet(node("cool-empty", util=5), node("warm-cached", tier=Tier.WARM, util=60),
                              node("elsewhere", tier=Tier.WARM, util=70)))
    pod = gpu_pod(**{"containers": [{"name": "s", "image": IMAGE, "resources": {"limits": {GPU: "4"}}}]})
    pod["metadata"]["labels"] = {"leaderworkerset.sigs.k8s.io/group-key": "0123abcd"}
    pod["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": "2"}

    def advice(startup):
        return _advice_annotation(pod, index, view, slow_pulls.placement, startup)

    timed = advice(startup_costs(slow_pulls))
    assert timed.startswith("preferred warm-cached(100),cool-empty("), timed
    assert "ready warm-cached ~30 s (image cached), cool-empty ~530 s (pull 15.0 GB)" in timed, timed
    assert "nvidia.com/gpu.clique=rack-0" in timed and "elsewhere" not in timed.split("; avoided")[0]
    assert advice(None).startswith("preferred cool-empty(100)"), "without costs: headroom alone"
