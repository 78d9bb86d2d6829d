"""Fixtures for the control-plane suite: one real control plane per test session, our install on it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.control_plane.install import Install, installed_on
from tests.control_plane.plane import ControlPlane, ControlPlaneUnavailable, build_binaries


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


@pytest.fixture(scope="session")
def installed(control_plane: ControlPlane, tmp_path_factory) -> Iterator[Install]:
    """Our install on the control plane, with a fleet of four GPU nodes (tests/control_plane/install.py)."""
    with installed_on(control_plane, tmp_path_factory.mktemp("install")) as install:
        yield install
