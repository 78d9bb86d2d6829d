"""Recording rules: generated from the policy, shipped in sync, valid for promtool, and read back
through a real Prometheus into the same snapshot and window as the raw queries."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import yaml

from gpu_balancer.local_prometheus import LocalPrometheus, ScrapeTarget
from scoring import dcgm
from scoring.ingest import recording
from scoring.ingest.prometheus import connect, read_snapshot, read_window, recorded_fingerprint
from scoring.ingest.queries import topology_keys
from scoring.ingest.series import SUMMED
from scoring.ingest.telemetry import Framebuffer, GpuSample, PodRef
from scoring.policy import default_policy, parse_policy
from sim.dcgm_text import render_exposition
from sim.fleet import FleetSpec
from tests.conftest import _require_prometheus, rules_evaluated_every_second

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SPEC = FleetSpec(nodes=6, gpus_per_node=4, profile="skewed", seed=5)


def generated(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "gpu_balancer", "recording-rules", *args], capture_output=True,
                          text=True, check=True).stdout


def test_the_shipped_rules_are_the_shipped_policys():
    # The shipped rules are the shipped policy's: generated from deploy/base/policy.yaml.
    assert (DEPLOY / "monitoring" / "recording.rules.yaml").read_text() == generated("--config", str(DEPLOY / "base" / "policy.yaml"))
    shipped = yaml.safe_load((DEPLOY / "components" / "servicemonitor" / "prometheusrule-recording.yaml").read_text())
    assert shipped["kind"] == "PrometheusRule" and shipped["spec"] == yaml.safe_load(generated())
    # promtool checks the file with the alert rules (tests/deploy/test_manifests.py).


@pytest.mark.parametrize(("example", "form"), [("thanos-query", "rules"), ("grafana-mimir", "mimir")])
def test_each_example_overlay_ships_the_rules_of_its_own_policy(example, form):
    # Their series selector or tenant differs from the base policy's, so the base rules'
    # fingerprint would not match them: each ships rules generated from its own policy.
    policy_file = DEPLOY / "examples" / example / "policy.yaml"
    shipped = (DEPLOY / "examples" / example / "recording.rules.yaml").read_text()
    assert shipped == generated("--config", str(policy_file), "--format", form)
    document = yaml.safe_load(shipped)
    policy = parse_policy(policy_file.read_text())
    fingerprints = {rule["labels"][recording.FINGERPRINT_LABEL] for group in document["groups"] for rule in group["rules"]}
    assert fingerprints == {recording.fingerprint(policy, topology_keys(policy))}
    if form == "mimir":
        assert document["namespace"] == "gpu-balancer"
    elif shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "rules", "/dev/stdin"], input=shipped, capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_the_fingerprint_follows_what_the_rules_bake_in():
    policy = default_policy()
    keys = topology_keys(policy)
    other = replace(policy, prometheus=replace(policy.prometheus, series_selector='{cluster="prod"}'))
    assert recording.fingerprint(policy, keys) != recording.fingerprint(other, topology_keys(other))
    profiling = replace(policy, telemetry=replace(policy.telemetry,
                                                  use_profiling_metrics=not policy.telemetry.use_profiling_metrics))
    assert recording.fingerprint(policy, keys) != recording.fingerprint(profiling, keys)
    tensor = replace(policy, telemetry=replace(policy.telemetry, busy_gauge=dcgm.PIPE_TENSOR_ACTIVE))
    assert recording.fingerprint(policy, keys) != recording.fingerprint(tensor, keys)


def test_the_snapshot_group_evaluates_at_the_policys_interval_and_the_fingerprint_ignores_it():
    # The interval changes how often figures are recomputed, not what they mean: rules installed
    # at another interval still match the reader's fingerprint.
    policy = default_policy()
    every_15 = replace(policy, telemetry=replace(policy.telemetry, recording_interval_seconds=15.0))
    intervals = {p.telemetry.recording_interval: {g["name"]: g["interval"] for g in
                                                         recording.recording_rules(p, topology_keys(p))["groups"]}
                 for p in (policy, every_15)}
    assert intervals[30.0][recording.SNAPSHOT_GROUP] == "30s" and intervals[15.0][recording.SNAPSHOT_GROUP] == "15s"
    assert recording.fingerprint(policy, topology_keys(policy)) == recording.fingerprint(every_15, topology_keys(every_15))


def test_a_record_that_keeps_the_metric_name_is_asked_one_metric_at_a_time():
    sums = 'sum by (__name__, node) (max by (__name__, node, gpu) ({__name__=~"A|B"}))'
    with pytest.raises(ValueError, match="one metric at a time"):
        recording.recorded_query("sums", sums, "abc")
    query = recording.recorded_query("sums", sums, "abc", metric="A")
    assert f'{recording.METRIC_LABEL}="A"' in query and '"__name__", "A"' in query


def test_recorded_and_raw_reads_give_the_same_snapshot_and_window(fake_dcgm, tmp_path):
    _require_prometheus()
    policy = default_policy()
    policy = replace(policy, descheduler=replace(policy.descheduler, window_seconds=60.0, step_seconds=1.0))
    path = rules_evaluated_every_second(policy, tmp_path)
    target = ScrapeTarget(fake_dcgm(SPEC, profiling=policy.telemetry.use_profiling_metrics))
    with LocalPrometheus([target]) as raw, LocalPrometheus([target], rule_files=(path,)) as ruled:
        raw.wait_for(dcgm.FB_USED, at_least=SPEC.nodes * SPEC.gpus_per_node)
        ruled.wait_for(recording.snapshot_record("newest_sample"))
        ruled.wait_for(recording.NODE_UTIL, at_least=SPEC.nodes)
        time.sleep(3)  # a few evaluations and scrapes in both
        reads = {}
        for name, prom in (("raw", raw), ("recorded", ruled)):
            configured = replace(policy, prometheus=replace(policy.prometheus, url=prom.url))
            query = connect(configured.prometheus)
            reads[name] = (read_snapshot(query, configured), read_window(query, configured),
                           recorded_fingerprint(query, configured))
        answered: list[dict] = []

        def watched(promql):
            rows = query(promql)
            # Not the look for the rules, nor the ask when they last ran.
            if not promql.startswith((f"count by ({recording.FINGERPRINT_LABEL})", "timestamp(")):
                answered.extend(rows)
            return rows

        assert read_snapshot(watched, configured).nodes == reads["recorded"][0].nodes
    # The records come back with the raw rows' labels only: what the rules add is dropped in the query.
    labels = {label for row in answered for label in row["metric"]}
    assert not labels & {recording.FINGERPRINT_LABEL, recording.METRIC_LABEL}, labels
    assert not {row["metric"].get("__name__", "") for row in answered} - {"", *SUMMED}
    (raw_snapshot, raw_window, none), (rec_snapshot, rec_window, fingerprint) = reads["raw"], reads["recorded"]
    assert none is None and fingerprint == recording.fingerprint(policy, topology_keys(policy))
    assert raw_snapshot.source == "raw queries" and rec_snapshot.source == "recording rules"
    assert [asdict(n) for n in rec_snapshot.nodes] == [asdict(n) for n in raw_snapshot.nodes]
    assert rec_snapshot.vanished_nodes == raw_snapshot.vanished_nodes
    assert set(rec_window) == set(raw_window) == {n.name for n in raw_snapshot.nodes}
    for node, stats in raw_window.items():
        assert rec_window[node].mean == pytest.approx(stats.mean) and rec_window[node].low == pytest.approx(stats.low)


def test_raw_and_recorded_reads_count_memory_room_on_free_and_shared_gpus_alike(exposition_server, tmp_path):
    """One node: GPU 0 one replica's (90 % preallocated), GPU 1 shared by two replicas (a series per
    pod, as dcgm-exporter writes a shared GPU), GPU 2 free with 60 GiB held outside Kubernetes,
    GPU 3 free and idle. Memory room is GPUs 1–3, read the same through the rules as raw."""
    _require_prometheus()
    policy = default_policy()
    path = rules_evaluated_every_second(policy, tmp_path)

    def sample(gpu: str, used: float, pod: str | None) -> GpuSample:
        return GpuSample(node="n1", gpu=gpu, uuid=f"GPU-{gpu}", model="NVIDIA H100 80GB HBM3", util_percent=30.0,
                         fb_used_mib=used, fb_free_mib=81_920.0 - used, temperature_c=50.0, power_w=300.0,
                         pod=PodRef("chat", pod, "server") if pod else None)

    readings = [sample("0", 73_728.0, "solo"), sample("1", 40_000.0, "a"), sample("1", 40_000.0, "b"),
                sample("2", 61_440.0, None), sample("3", 500.0, None)]
    target = ScrapeTarget(exposition_server(render_exposition(readings, profiling=policy.telemetry.use_profiling_metrics)))
    with LocalPrometheus([target]) as raw, LocalPrometheus([target], rule_files=(path,)) as ruled:
        raw.wait_for(dcgm.FB_USED, at_least=5)
        ruled.wait_for(recording.snapshot_record("fb_placeable_used"))
        time.sleep(3)
        nodes = {}
        for name, prom in (("raw", raw), ("recorded", ruled)):
            configured = replace(policy, prometheus=replace(policy.prometheus, url=prom.url))
            (nodes[name],) = read_snapshot(connect(configured.prometheus), configured).nodes
    for node in nodes.values():
        assert node.placeable_fb == Framebuffer(40_000.0 + 61_440.0 + 500.0, 3 * 81_920.0)
        assert node.memory_used_fraction == pytest.approx((73_728 + 40_000 + 61_440 + 500) / (4 * 81_920))
