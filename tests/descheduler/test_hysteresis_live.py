"""Sustained heat against a real Prometheus: history backfilled with promtool, the present scraped
live from fake-dcgm; and `gpu-balancer deschedule` end to end in dry-run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from gpu_balancer.backfill import backfilled_tsdb
from gpu_balancer.local_prometheus import LocalPrometheus, ScrapeTarget
from sim.dcgm_text import render_exposition
from scoring import dcgm
from descheduler.cluster import namespace_object
from scoring.ingest.prometheus import connect, read_window
from scoring.ingest.telemetry import GpuSample, PodRef
from scoring.policy import OptInPolicy, default_policy
from tests.conftest import _require_prometheus
from tests.descheduler.helpers import node_obj, pod_obj

GPUS = 4
# node → (utilisation over the last 15 minutes, utilisation now)
HISTORY = {"hot-a": (95.0, 95.0), "spike-b": (10.0, 95.0), "cool-c": (5.0, 5.0), "cool-d": (5.0, 5.0)}


def samples(now: bool) -> list[GpuSample]:
    out = []
    for node, (past, present) in HISTORY.items():
        util = present if now else past
        for g in range(GPUS):
            busy = util > 50 or g == 0
            out.append(GpuSample(node=node, gpu=str(g), uuid=f"GPU-{node}-{g}", model="NVIDIA H100 80GB HBM3",
                                 pci_bus_id=f"00000000:{g + 1:02X}:00.0", util_percent=util,
                                 fb_used_mib=40_000.0 if busy else 0.0, fb_free_mib=41_000.0 if busy else 81_000.0,
                                 temperature_c=60.0, power_w=300.0,
                                 pod=PodRef("inference", f"{node}-pod{g}", "c") if busy else None))
    return out


@pytest.fixture
def prometheus_with_history(tmp_path, fake_dcgm):
    _require_prometheus()
    now = time.time()
    data = tmp_path / "tsdb"
    assert backfilled_tsdb(render_exposition(samples(now=False)), data, start=now - 900, end=now - 20)
    from sim.fake_dcgm import make_server, serve_in_background

    server = make_server(render_exposition(samples(now=True)), port=0)
    serve_in_background(server)
    prom = LocalPrometheus([ScrapeTarget(f"127.0.0.1:{server.server_port}")], storage=data).start()
    prom.wait_for(dcgm.FB_USED, at_least=len(HISTORY) * GPUS)
    time.sleep(2)  # a few live scrapes
    yield prom
    prom.stop()
    server.shutdown()


def test_only_heat_that_lasted_the_window_counts(prometheus_with_history):
    policy = default_policy()
    policy = replace(policy, prometheus=replace(policy.prometheus, url=prometheus_with_history.url))
    stats = read_window(connect(policy.prometheus), policy)
    assert set(stats) == set(HISTORY)
    assert stats["hot-a"].mean > 90 and stats["hot-a"].low > 90 and stats["hot-a"].coverage >= 0.8
    assert stats["spike-b"].mean < 30 and stats["spike-b"].low < 20, "hot now, but not over the window"
    assert stats["cool-c"].mean < 10


def cluster_file(tmp_path):
    objects = [namespace_object("inference", OptInPolicy()), namespace_object("kube-system")]
    objects += [node_obj(n, gpus=GPUS) for n in HISTORY]
    objects += [pod_obj(s.pod.name, s.node, owner_name=f"{s.pod.name}-5d4f") for s in samples(now=True) if s.pod]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def test_deschedule_dry_run_evicts_only_from_the_sustained_hot_node(prometheus_with_history, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "descheduler", "--dry-run", "--prometheus-url", prometheus_with_history.url,
         "--cluster-file", str(cluster_file(tmp_path)), "--output", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["dry_run"] is True
    assert report["hot_nodes"] == ["hot-a"]
    assert report["evictions"] == []
    assert report["would_evict"] and {e["node"] for e in report["would_evict"]} == {"hot-a"}
    assert len(report["would_evict"]) <= default_policy().descheduler.max_evictions_per_node


def test_deschedule_without_prometheus_evicts_nothing_and_says_why(tmp_path):
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    result = subprocess.run([sys.executable, "-m", "descheduler", "--prometheus-url", url,
                             "--cluster-file", str(cluster_file(tmp_path))], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "Prometheus" in result.stderr and url in result.stderr
    assert "evictions" not in result.stdout


def test_a_bad_cluster_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "cluster.json"
    bad.write_text('{"kind": "Pod"}')
    result = subprocess.run([sys.executable, "-m", "descheduler", "--cluster-file", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "kubectl get namespaces,nodes,pods -A -o json" in result.stderr


def test_a_live_run_evicts_records_its_ledger_and_the_next_run_holds_off(prometheus_with_history, tmp_path, kube):
    from datetime import datetime, timezone

    from kubernetes import client

    from descheduler.cluster import cluster_from_list
    from descheduler.run import run_once

    api, emulator = kube
    for s in samples(now=True):
        if s.pod:
            emulator[f"post /api/v1/namespaces/inference/pods/{s.pod.name}/eviction"] << 201 << {
                "kind": "Status", "status": "Success"}
    policy = default_policy()
    # kmock runs no kubelet, so the pre-pull pods never pull: a one-second deadline lets the run go on.
    policy = replace(policy, prometheus=replace(policy.prometheus, url=prometheus_with_history.url),
                     descheduler=replace(policy.descheduler, prestage_deadline_seconds=1))
    cluster = cluster_from_list(json.loads(cluster_file(tmp_path).read_text()), policy.placement)
    core, events = client.CoreV1Api(api), client.EventsV1Api(api)
    query = connect(policy.prometheus)
    first = run_once(policy, query=query, cluster=cluster, core=core, events=events, dry_run=False,
                     now=lambda: datetime.now(timezone.utc))
    evicted = [o.eviction.pod for o in first.outcomes if o.result == "evicted"]
    assert evicted and all(pod.startswith("hot-a-") for pod in evicted)
    assert len(events.list_namespaced_event("inference").items) == len(evicted)
    staged = [e["prestage"] for e in first.as_dict()["evictions"]]
    assert staged and all("evicted at the deadline" in s or "already on" in s for s in staged), staged
    assert not core.list_namespaced_pod(policy.descheduler.ledger_namespace).items, "no pre-pull pod left"
    ledger = core.read_namespaced_config_map(policy.descheduler.ledger_name, policy.descheduler.ledger_namespace)
    assert all(pod in ledger.data["evictions.json"] for pod in evicted)
    second = run_once(policy, query=query, cluster=cluster, core=core, events=events, dry_run=False,
                      now=lambda: datetime.now(timezone.utc))
    held = {s.pod for s in second.plan.skipped if "cooldown" in s.reason}
    assert set(evicted) <= held, "the same workloads are not evicted again within the cooldown"
    # Each run leaves its summary in the ledger ConfigMap and as an Event on it; status reads it.
    from descheduler.ledger_store import load_summary
    from descheduler.summary import RunSummary

    stored = RunSummary.from_json(load_summary(core, policy.descheduler))
    assert stored == second.summary and stored.hot_nodes >= 1
    assert stored.evicted == sum(1 for o in second.outcomes if o.result == "evicted")
    assert stored.skipped.get("cooldown", 0) >= len(evicted)
    assert first.summary.evicted == len(evicted) and not first.summary.dry_run
    runs = [e for e in events.list_namespaced_event(policy.descheduler.ledger_namespace).items
            if e.reason == "DeschedulerRun"]
    assert len(runs) == 2 and runs[0].regarding.name == policy.descheduler.ledger_name
    assert f"evicted {len(evicted)}" in runs[0].note


def test_loop_mode_keeps_running_through_failures_and_counts_them_on_metrics(tmp_path):
    import subprocess
    import sys
    import time

    import requests

    from gpu_balancer.local_prometheus import free_port

    port, closed = free_port(), free_port()
    process = subprocess.Popen([sys.executable, "-m", "gpu_balancer", "deschedule", "--cluster-file",
                                str(cluster_file(tmp_path)), "--prometheus-url", f"http://127.0.0.1:{closed}",
                                "--every", "0.3", "--metrics-port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        failures = 0.0
        for _ in range(100):
            time.sleep(0.2)
            try:
                text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except requests.ConnectionError:
                continue
            line = next((x for x in text.splitlines()
                         if x.startswith('gpu_balancer_descheduler_runs_total{result="telemetry-error"}')), "")
            failures = float(line.split()[-1]) if line else 0.0
            if failures >= 3:
                break
        assert failures >= 3, "each failed run is counted and the loop goes on"
        assert process.poll() is None
        assert 'gpu_balancer_descheduler_evictions_total{mode="would-evict"} 0.0' in text
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    assert "Traceback" not in err and "Connection refused" in err
