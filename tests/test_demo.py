"""`gpu-balancer demo` (what `make demo` runs) goes end to end on this machine."""

import subprocess
import sys

from tests.conftest import _require_prometheus


def test_the_demo_runs_end_to_end(tmp_path):
    _require_prometheus()
    result = subprocess.run([sys.executable, "-m", "gpu_balancer", "demo", "--nodes", "8",
                             "--report-dir", str(tmp_path / "report")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "a real Prometheus scrapes it" in out
    assert "AdmissionReviews answered with a patch over TLS" in out
    assert "descheduler dry-run" in out and "DRY RUN" in out
    assert "gpu-balancer" in out.split("5. the five policies")[1]
    assert (tmp_path / "report" / "summary.md").exists()
