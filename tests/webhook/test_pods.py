"""Which pods are GPU pods, how many GPUs they need, and which are left alone."""

import pytest

from scoring.cluster.workloads import BadQuantity, gpu_request, parse_quantity, training_group
from scoring.policy import PlacementPolicy
from webhook.pods import exemption, replica_selector
from tests.webhook.helpers import gpu_pod

POLICY = PlacementPolicy()


@pytest.mark.parametrize(("value", "expected"), [
    ("1", 1), (2, 2), ("500m", 0.5), ("1k", 1000), ("1Ki", 1024), (" 3 ", 3), ("1e2", 100), ("0", 0),
])
def test_quantities_parse_as_kubernetes_does(value, expected):
    assert float(parse_quantity(value)) == expected


@pytest.mark.parametrize("value", ["abc", "", "1x", None, True, [1], {"a": 1}, "9" * 100, "1e99999999999", "nan"])
def test_unreadable_quantities_are_a_typed_error(value):
    with pytest.raises(BadQuantity):
        parse_quantity(value)


@pytest.mark.parametrize(("pod", "resources", "whole"), [
    (gpu_pod("1"), ("nvidia.com/gpu",), 1),
    (gpu_pod(4), ("nvidia.com/gpu",), 4),
    (gpu_pod("1", resource="nvidia.com/gpu.shared"), ("nvidia.com/gpu.shared",), 0),
    (gpu_pod("2", resource="nvidia.com/mig-1g.10gb"), ("nvidia.com/mig-1g.10gb",), 0),
])
def test_gpu_resources_are_recognised(pod, resources, whole):
    request = gpu_request(pod, POLICY)
    assert request.resources == resources and request.whole_gpus == whole


def test_app_containers_add_up_and_init_containers_take_the_maximum():
    pod = gpu_pod("2")
    pod["spec"]["containers"].append({"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}})
    pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert gpu_request(pod, POLICY).whole_gpus == 4
    pod["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    assert gpu_request(pod, POLICY).whole_gpus == 3


def test_sidecars_add_to_the_app_containers_and_to_later_init_containers():
    pod = gpu_pod("2")
    pod["spec"]["initContainers"] = [
        {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]
    assert gpu_request(pod, POLICY).whole_gpus == 4, "the warm-up runs beside the sidecar: 3 + 1"
    pod["spec"]["initContainers"][1]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    assert gpu_request(pod, POLICY).whole_gpus == 3, "app 2 + sidecar 1, not max(2, 1)"


def test_a_pod_without_gpu_resources_is_not_a_gpu_pod():
    pod = gpu_pod("1", resource="cpu")
    assert gpu_request(pod, POLICY) is None
    assert gpu_request({"spec": {"containers": "garbage"}}, POLICY) is None


@pytest.mark.parametrize("quantity", ["-1", "100000", "1e9", "nonsense"])
def test_absurd_gpu_quantities_are_refused(quantity):
    with pytest.raises(BadQuantity):
        gpu_request(gpu_pod(quantity), POLICY)


@pytest.mark.parametrize(("change", "namespace", "reason"), [
    (lambda p: p["spec"].update(nodeName="n1"), "ml", "already bound"),
    (lambda p: p["metadata"].update(annotations={"kubernetes.io/config.mirror": "x"}), "ml", "mirror"),
    (lambda p: p["metadata"].update(annotations={"gpu-balancer.io/opt-out": "true"}), "ml", "opted out"),
    (lambda p: p["metadata"].update(annotations={"gpu-balancer.io/advice": "x"}), "ml", "already advised"),
    (lambda p: None, "kube-system", "never mutated"),
    (lambda p: None, "gpu-balancer", "never mutated"),
])
def test_some_pods_are_always_left_alone(change, namespace, reason):
    pod = gpu_pod()
    change(pod)
    assert reason in exemption(pod, namespace, POLICY)


def test_an_ordinary_pod_is_not_exempt():
    pod = gpu_pod()
    pod["metadata"]["annotations"] = {"gpu-balancer.io/opt-out": "false"}
    assert exemption(pod, "ml", POLICY) is None


@pytest.mark.parametrize(("labels", "expected"), [
    ({"training.kubeflow.org/job-name": "bert"}, ("training.kubeflow.org/job-name", "bert")),
    ({"jobset.sigs.k8s.io/jobset-name": "js"}, ("jobset.sigs.k8s.io/jobset-name", "js")),
    ({"batch.kubernetes.io/job-name": "j", "batch.kubernetes.io/job-completion-index": "3"},
     ("batch.kubernetes.io/job-name", "j")),
    ({"batch.kubernetes.io/job-name": "plain-job"}, None),
    # One LeaderWorkerSet replica (leader and workers) is a group; its other replicas are not in it.
    ({"leaderworkerset.sigs.k8s.io/name": "llama-70b", "leaderworkerset.sigs.k8s.io/group-index": "1",
      "leaderworkerset.sigs.k8s.io/group-key": "3e238779391c8fd563d42eb5af19391bdcd7c130"},
     ("leaderworkerset.sigs.k8s.io/group-key", "3e238779391c8fd563d42eb5af19391bdcd7c130")),
    ({"llm-d.ai/role": "prefill", "gpu-balancer.io/serving-group": "llama-70b-pd-0"},
     ("gpu-balancer.io/serving-group", "llama-70b-pd-0")),
    ({"app": "web"}, None),
])
def test_training_groups_are_recognised_by_label(labels, expected):
    assert training_group(gpu_pod(labels=labels, owner="Job"), POLICY) == expected


def test_replicas_are_selected_by_template_labels_and_revision_hash():
    assert replica_selector(gpu_pod(), POLICY) == ({"app": "svc"}, ["pod-template-hash"])
    workload = gpu_pod(owner="", labels={"app.kubernetes.io/name": "llm", "version": "2"})
    assert replica_selector(workload, POLICY) == ({"app.kubernetes.io/name": "llm"}, [])
    assert replica_selector(gpu_pod(owner="", labels={"x": "y"}), POLICY) is None
