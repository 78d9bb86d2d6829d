"""Make-before-break through the real `kubernetes` client against kmock's stateful emulator: the
pre-pull pods are made as the restricted namespace admits them, the run waits for their images
(the kubelet's part played by the test between polls), and nothing is left behind."""

from __future__ import annotations

from kubernetes import client

from descheduler.plan import PlannedEviction
from descheduler.prestage import pulled, prepull_name, stage

NAMESPACE = "gpu-balancer"
IMAGE = "docker.io/vllm/vllm-openai:v0.8.5"


def move(pod: str, destination: str, *images: str) -> PlannedEviction:
    return PlannedEviction("ml", pod, "hot-a", f"ml/Deployment/{pod}", "hot", None, destination, images)


class Kubelet:
    """Plays the destination kubelets: after each poll, each pre-pull pod's status moves as told."""

    def __init__(self, core: client.CoreV1Api, statuses: dict[str, dict]) -> None:
        self.core, self.statuses, self.now = core, statuses, 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for pod in self.core.list_namespaced_pod(NAMESPACE).items:  # patched, as the kubelet patches it
            self.core.patch_namespaced_pod(pod.metadata.name, NAMESPACE,
                                           {"status": self.statuses.get(pod.spec.node_name, {})})


def container(image: str, state: dict, image_id: str = "") -> dict:
    """A container status as the kubelet writes it (every required field)."""
    return {"name": "image-0", "image": image, "imageID": image_id, "ready": "running" in state, "restartCount": 0,
            "state": state}


def running(image: str) -> dict:
    return {"phase": "Running", "containerStatuses": [container(image, {"running": {}})]}


def test_the_eviction_waits_for_the_images_on_the_destination_and_leaves_no_pod_behind(kube):
    api, _ = kube
    core = client.CoreV1Api(api)
    kubelet = Kubelet(core, {"gpu-pulls": running(IMAGE),
                             "gpu-refuses": {"phase": "Pending", "containerStatuses": [
                                 container(IMAGE, {"waiting": {"reason": "ImagePullBackOff"}})]},
                             "gpu-slow": {"phase": "Pending"}})
    created = []
    real_create = core.create_namespaced_pod
    core.create_namespaced_pod = lambda namespace, body: created.append(body) or real_create(namespace, body)
    moves = [move("a", "gpu-pulls", IMAGE), move("b", "gpu-cached"), move("c", "gpu-refuses", IMAGE),
             move("d", "gpu-slow", IMAGE, "docker.io/library/busybox:1.36")]
    found = stage(core, moves, namespace=NAMESPACE, deadline_seconds=30, clock=lambda: kubelet.now,
                  sleep=kubelet.sleep)
    assert [(s.node, s.result) for s in found] == [
        ("gpu-pulls", "pulled"), ("gpu-cached", "present"), ("gpu-refuses", "failed"), ("gpu-slow", "deadline")]
    assert found[0].seconds == 2 and found[3].seconds >= 30, "pulled at the first poll; the slow one until the deadline"
    assert "ImagePullBackOff" in found[2].describe() and "evicted at once" in found[2].describe()
    assert [body["spec"]["nodeName"] for body in created] == ["gpu-pulls", "gpu-refuses", "gpu-slow"], \
        "a pod only where the destination lacks an image"
    slow = created[2]
    assert [c["image"] for c in slow["spec"]["containers"]] == [IMAGE, "docker.io/library/busybox:1.36"]
    assert slow["metadata"]["name"] == prepull_name(moves[3]) and slow["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert slow["spec"]["securityContext"]["runAsNonRoot"] and all(
        c["securityContext"]["capabilities"]["drop"] == ["ALL"] and "nvidia.com/gpu" not in c["resources"]["limits"]
        for c in slow["spec"]["containers"]), "restricted Pod Security, no GPU"
    assert core.list_namespaced_pod(NAMESPACE).items == [], "every pre-pull pod deleted"


def test_an_earlier_runs_pre_pull_pod_is_reused_and_a_refused_create_evicts_at_once(kube):
    api, _ = kube
    core = client.CoreV1Api(api)
    kubelet = Kubelet(core, {"gpu-pulls": running(IMAGE)})
    first = move("a", "gpu-pulls", IMAGE)
    core.create_namespaced_pod(NAMESPACE, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": prepull_name(first), "namespace": NAMESPACE}, "spec": {"nodeName": "gpu-pulls", "containers": [
            {"name": "image-0", "image": IMAGE}]}})
    (found,) = stage(core, [first], namespace=NAMESPACE, deadline_seconds=30, clock=lambda: kubelet.now,
                     sleep=kubelet.sleep)
    assert found.result == "pulled" and core.list_namespaced_pod(NAMESPACE).items == []
    assert stage(core, [first], namespace=NAMESPACE, deadline_seconds=0)[0].result == "off"


def test_what_counts_as_pulled():
    assert pulled({"phase": "Pending"}, 1) is None
    assert pulled({"containerStatuses": [{"imageID": "sha256:1", "state": {"waiting": {"reason": "CreateContainerError"}}}]},
                  1) == "pulled", "an image without a shell fails to start after its pull"
    assert pulled({"containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}, 2) is None, "one of two"
    assert pulled({"phase": "Failed", "reason": "OutOfcpu"}, 1) == "failed: OutOfcpu"
