"""Fixtures for the control-plane suite: one real control plane per test session, fake GPU nodes."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.control_plane.plane import ControlPlane, ControlPlaneUnavailable, build_binaries

GPU_OPERATOR_LABELS = {
    # What NVIDIA's GPU Operator (GPU feature discovery) puts on an H100 node.
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/cuda.driver.major": "550",
    "feature.node.kubernetes.io/pci-10de.present": "true",
}


def gpu_node(name: str, *, gpus: int = 8, labels: dict | None = None) -> dict:
    """A Node KWOK keeps Ready (its annotation), with GPU capacity the device plugin would report."""
    capacity = {"cpu": "96", "memory": "1536Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok",
                                **GPU_OPERATOR_LABELS, "nvidia.com/gpu.count": str(gpus), **(labels or {})}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _unavailable(message: str):
    if os.environ.get("CI") == "true":
        pytest.fail(message + " — under CI the control plane is required, not skipped")
    pytest.skip(message)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK, for the session."""
    try:
        binaries = build_binaries()
    except ControlPlaneUnavailable as error:
        _unavailable(str(error))
    plane = ControlPlane(binaries, tmp_path_factory.mktemp("control-plane"))
    try:
        plane.start()
    except Exception:
        plane.stop()
        raise
    yield plane
    plane.remove()
