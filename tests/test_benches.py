"""No bench rots: every `bench/` script runs here at a tiny size (a few nodes, a second or a few)
and exits 0. The full-size runs stay manual, with their figures in BENCHMARKS.md; this only holds
that each can still be run to re-measure them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_tool

BENCH = Path(__file__).resolve().parent.parent / "bench"
PROMETHEUS = ("prometheus", "Debian package `prometheus`; `make test` installs it as root")
WRK = ("wrk", "Debian package `wrk`, the load benches' client; `make test` installs it as root")

TINY: dict[str, tuple[list[str], tuple[tuple[str, str], ...]]] = {
    "admission_mix.py": (["--seconds", "1", "--concurrency", "2", "--nodes", "20"], (WRK,)),
    "busy_gauge.py": (["--scenarios", "llm-fleet", "--seeds", "1", "--scales", "1", "--jobs", "1"], ()),
    "calibrate.py": (["--scenarios", "llm-fleet", "--seeds", "1", "--scales", "1"], ()),
    "dra_fleet.py": (["--seeds", "1", "--scenarios", "skewed-inference"], ()),
    "dra_view_scale.py": (["--nodes", "20", "--gpus", "2"], ()),
    "conditions.py": (["--scenarios", "llm-degraded-gpus", "--seeds", "1", "--hours", "0.05"], ()),
    "feasible_scale.py": (["--nodes", "20", "--pods", "40", "--admissions", "10"], ()),
    "import_graph.py": ([], ()),
    "plan_scale.py": (["--nodes", "20", "--pods-per-node", "2"], ()),
    "placement_trace.py": (["--hours", "0.1", "--after-seconds", "60", "--seeds", "1-2"], ()),
    "policy_variants.py": (["--seeds", "1", "--hours", "0.05", "--jobs", "1"], ()),
    "refresh_signatures.py": ([], ()),
    "replica_model.py": ([], ()),
    "replica_signals.py": ([], ()),
    "replicas_and_pools.py": (["--seeds", "1", "--hours", "0.1"], ()),
    "rule_interval_cost.py": (["--nodes", "4", "--gpus", "2", "--exporters", "1", "--repeats", "1",
                               "--intervals", "15", "--seconds", "20"], (PROMETHEUS,)),
    "scheduler_agreement.py": (["--states", "3", "--batch", "3"], ()),
    "series_cost.py": (["--nodes", "4", "--gpus", "2", "--exporters", "1", "--repeats", "1"], (PROMETHEUS,)),
    "serving_ablation.py": (["--seeds", "1", "--hours", "0.1"], ()),
    "serving_world.py": (["--scenarios", "llm-fleet", "--seeds", "1", "--scales", "1", "--hours", "0.1",
                          "--jobs", "1"], ()),
    "serving_world_speed.py": (["--scenario", "llm-degraded-gpus", "--nodes", "4", "--hours", "0.1",
                                "--policies", "stock,gpu-balancer,true-state"], ()),
    "snapshot_scale.py": (["--nodes", "4", "--gpus", "2", "--exporters", "1", "--repeats", "1"], (PROMETHEUS,)),
    "upstream_agreement.py": ([], ()),
    "webhook_latency.py": (["--seconds", "1", "--concurrency", "2", "--nodes", "20"], (WRK,)),
}
"""Each bench's tiny arguments and the tools it needs. `control_plane_scale.py` starts a control
plane of its own: it runs with the control-plane tests below."""


def run_bench(script: str, args: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip(), f"{script} printed no figures"
    return done


def test_every_bench_script_is_run_here():
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert scripts == set(TINY) | {"control_plane_scale.py"}, "a new bench needs its tiny size in TINY"


@pytest.mark.parametrize("script", sorted(TINY))
def test_a_bench_runs_at_a_tiny_size(script):
    args, tools = TINY[script]
    for tool, why in tools:
        require_tool(tool, why=why)
    run_bench(script, args)
