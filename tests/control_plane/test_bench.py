"""The control-plane bench (`bench/control_plane_scale.py`) still runs, at a tiny size: it starts a
control plane, Prometheus and two webhooks of its own (tests/test_benches.py runs the others)."""

from __future__ import annotations

from tests.conftest import require_tool
from tests.control_plane.conftest import _unavailable
from tests.control_plane.plane import ControlPlaneUnavailable, build_binaries
from tests.test_benches import run_bench


def test_control_plane_the_scale_bench_runs_at_a_tiny_size():
    require_tool("prometheus", why="Debian package `prometheus`; `make test` installs it as root")
    try:
        build_binaries()
    except ControlPlaneUnavailable as error:
        _unavailable(str(error))  # skipped on a developer's machine, a failure under CI
    run_bench("control_plane_scale.py", ["--nodes", "20", "--gpus", "2", "--admissions", "5"])  # 2 nodes per exporter
