"""The layers: pure modules import no HTTP or Kubernetes client, in a fresh interpreter each."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLIENTS = ("requests", "urllib3", "httpx", "aiohttp", "kubernetes", "fastapi", "starlette", "uvicorn",
           "prometheus_api_client")


@pytest.mark.parametrize("module", ["scoring.heat", "scoring.advice.placement", "scoring.policy",
                                    "scoring.ingest.series", "scoring.ingest.queries", "scoring.ingest.recording",
                                    "scoring.ingest.signals.registry", "descheduler.plan", "descheduler.ledger",
                                    "descheduler.payback", "descheduler.step", "descheduler.strategies",
                                    "descheduler.summary", "sim.policies", "webhook.admit", "webhook.ledger"])
def test_a_pure_module_loads_no_http_or_kubernetes_client(module):
    probe = f"import sys, {module}; print(' '.join(m for m in {CLIENTS!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"import {module} loads {loaded}"
