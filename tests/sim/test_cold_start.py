"""Cold start in the serving world (issue 46): a new replica waits for its image's pull and
extraction, its weights from the node-local model cache or the remote store, and its engine's
start; nodes keep images under the kubelet's image GC and list them in `status.images`; the
cache's nodes carry Fluid's label, which the peer that uses the cache reads."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import kubernetes_validate
import pytest

from scoring.policy import BalancerPolicy, PolicyError
from sim.engine import bind, build_world, cluster_objects, service_pod, step_workloads
from sim.llm import startup
from sim.llm.hardware import model_named
from sim.llm.world import is_ready
from sim.node_state import image_name
from sim.policies import make_policy, policies_for
from sim.policies.gpu_balancer import watched_view
from sim.scenario import ColdStart, Conditions, named, overridden
from sim.world_state import demand_now
from tests.sim.test_serving_world import SMALL, placed

BENTOML = {"image_gb": 20.2, "pull_min": (5, 6), "extract_min": (3, 4)}
"""BentoML's Llama 3.1 8B container (weights inside): 20.2 GB, pulled in 5–6 min, extracted in 3–4."""


def cold(**shape) -> ColdStart:
    return ColdStart(enabled=True, **shape)


def with_condition(shape: ColdStart):
    return replace(SMALL, conditions=Conditions(cold_start=shape))


def test_the_pull_and_extract_rates_give_bentomls_timeline_for_its_image():
    shape = cold()
    pull = BENTOML["image_gb"] * 1e9 / shape.pull_bytes_per_second / 60
    extract = BENTOML["image_gb"] * 1e9 / shape.extract_bytes_per_second / 60
    assert BENTOML["pull_min"][0] <= pull <= BENTOML["pull_min"][1]
    assert BENTOML["extract_min"][0] <= extract <= BENTOML["extract_min"][1]


def new_replica(world, node: str):
    """A replica the autoscaler adds now, bound to the node: (pod, seconds until it serves)."""
    service = next(iter(world.services.values()))
    pod = service_pod(world, service)
    bind(world, pod, node)
    return pod, pod.ready_at - world.now_seconds


def test_a_replica_is_ready_in_the_time_its_terms_add_up_to():
    world = placed(with_condition(cold()), ticks_run=2)
    shape, sv = world.llm.cache.shape, world.scenario.serving
    weights = model_named(next(iter(world.services.values())).model).weight_bytes
    cached = sorted(world.llm.cache.model_nodes)
    remote = sorted(set(world.nodes) - world.llm.cache.model_nodes)
    assert cached and remote
    # A node whose disk lacks the image: pull, extract, the weights from the remote store, start.
    empty = remote[0]
    world.nodes[empty].images.clear()
    _, wait = new_replica(world, empty)
    assert wait == pytest.approx(shape.image_bytes / shape.pull_bytes_per_second
                                 + shape.image_bytes / shape.extract_bytes_per_second
                                 + weights / shape.remote_weight_bytes_per_second + sv.startup_seconds)
    # The image is on that disk now: the next replica there waits for its weights and start only.
    _, again = new_replica(world, empty)
    assert again == pytest.approx(weights / shape.remote_weight_bytes_per_second + sv.startup_seconds)
    # On the cache's node with the image: seconds, not minutes.
    if image_name(startup.image_of(world.llm.cache, "svc-00")) not in world.nodes[cached[0]].images:
        new_replica(world, cached[0])
    _, fast = new_replica(world, cached[0])
    assert fast == pytest.approx(weights / shape.cached_weight_bytes_per_second + sv.startup_seconds)
    assert fast < 0.2 * again
    assert world.llm.ready_waits[-1] == pytest.approx(fast)  # the report's time to ready, created and bound now


def test_status_images_lists_what_the_disk_holds_and_the_image_gc_removes_the_least_recently_used():
    # A disk with room over the high mark for two images: a third pulled evicts the oldest unused.
    shape = cold(shared_image=True, image_bytes=40e9, image_disk_bytes=100e9)
    world = placed(with_condition(shape), ticks_run=1)
    node = sorted(world.nodes)[0]
    for pod in [p for p in world.pods.values() if p.node == node]:  # an empty node, its disk cleared
        world.nodes[node].unbind(pod.obj)
    world.nodes[node].images.clear()
    listed = lambda: {name for entry in next(o for o in cluster_objects(world) if o["metadata"]["name"] == node)
                      ["status"]["images"] for name in entry["names"]}
    cache, service = world.llm.cache, "svc-00"
    first, _ = new_replica(world, node)
    v1 = image_name(first.obj["spec"]["containers"][0]["image"])
    assert listed() == {v1}
    world.nodes[node].unbind(first.obj)
    world.tick += 1
    cache.tags[service] += 1
    second, _ = new_replica(world, node)
    v2 = image_name(second.obj["spec"]["containers"][0]["image"])
    assert listed() == {v1, v2}, "80 GB of a 100 GB disk: under the high mark (85 %), nothing goes"
    world.tick += 1
    cache.tags[service] += 1
    third, _ = new_replica(world, node)
    v3 = image_name(third.obj["spec"]["containers"][0]["image"])
    assert listed() == {v2, v3}, "over the high mark: the unused v1 goes; v2 is in use and stays"


def test_the_cache_nodes_carry_fluids_label_and_cache_affinity_prefers_them_then_their_zone():
    world = build_world(with_condition(cold(model_cache_node_share=0.5)), 1)
    label = "fluid.io/s-inference-llama-3-1-8b"
    assert {n for n, s in world.nodes.items() if s.labels.get(label) == "true"} == set(world.llm.cache.model_nodes)
    pod = service_pod(world, next(iter(world.services.values())))
    assert pod.obj["metadata"]["annotations"]["gpu-balancer.io/model"] == "llama-3-1-8b"
    chosen = make_policy("cache-affinity", 1).place(world, pod)
    terms = pod.obj["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["weight"] for t in terms] == [100, 50]
    assert terms[0]["preference"]["matchExpressions"][0]["key"] == label
    assert chosen in world.llm.cache.model_nodes
    assert policies_for(named("llm-cold-start"))[-2:] == ("cache-affinity", "true-state")


def test_switched_off_the_condition_leaves_the_world_as_it_was():
    off = overridden(with_condition(cold()), "conditions.coldStart.enabled", "false")
    world = build_world(off, 1)
    assert not world.llm.cache.enabled and not any("fluid.io" in k for n in world.nodes.values() for k in n.labels)
    assert placed(off, 3).llm.tally.ttft.weights.tolist() == placed(SMALL, 3).llm.tally.ttft.weights.tolist()
    assert "cache-affinity" not in policies_for(off)


def test_the_report_gives_new_replicas_time_to_ready():
    from sim.run import run_policy

    metrics = run_policy(replace(with_condition(cold()), hours=0.5), "stock", 1).metrics
    assert 0 < metrics["time_to_ready_p50_s"] <= metrics["time_to_ready_p99_s"]


@pytest.mark.parametrize("key, value, named_in_error", [
    ("conditions.coldStart.imageGcLowPercent", "90", "imageGcLowPercent"),
    ("conditions.coldStart.modelCacheNodeShare", "1.5", "modelCacheNodeShare"),
    ("conditions.coldStart.remoteWeightBytesPerSecond", "0", "remoteWeightBytesPerSecond"),
])
def test_bad_fields_get_a_clear_error(key, value, named_in_error):
    with pytest.raises(PolicyError, match=named_in_error):
        overridden(with_condition(cold()), key, value)


def test_each_services_hpa_shows_what_its_autoscaler_read_and_the_webhooks_view_reads_it_as_production_does():
    """The autoscaler's last sync, listed as an `autoscaling/v2` HPA: its demand per ready replica
    against `inference.targetUtil`, read through the same cluster state the webhook's watch feeds."""
    world = placed(with_condition(cold()), ticks_run=2)
    world.tick = 120 * world.scenario.inference.autoscale_every_ticks  # every first replica long ready
    service = next(iter(world.services.values()))
    service.burst_until = world.tick + 20
    step_workloads(world)
    ready = sum(1 for p in world.pods.values() if p.service == service.name and is_ready(world, p))
    assert ready and service.autoscaled.load == pytest.approx(demand_now(world, service) / ready)
    (hpa,) = [o for o in cluster_objects(world) if o["kind"] == "HorizontalPodAutoscaler"
              and o["metadata"]["name"] == service.name]
    kubernetes_validate.validate(hpa, kubernetes_validate.latest_version(), strict=True)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": service.name}
    view = watched_view(world, BalancerPolicy(), datetime.now(timezone.utc))
    expected = round(service.autoscaled.load * 1000) / round(world.scenario.inference.target_util * 1000)
    assert view.scaling[hpa["metadata"]["namespace"], service.name] == pytest.approx(expected)
    assert expected >= 1.25, "a burst of 1.5x on replicas sized for the target reads as urgent"
