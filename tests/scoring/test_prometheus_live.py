"""The Prometheus adapter and `gpu-balancer status` against a real Prometheus scraping fake-dcgm."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from statistics import fmean

import pytest

from gpu_balancer.local_prometheus import ScrapeTarget
from scoring import dcgm
from scoring.heat import Tier, fleet_heat
from scoring.ingest import recording
from scoring.ingest.prometheus import (PrometheusQueryError, PrometheusUnreachable, SnapshotReader, connect,
                                       read_snapshot, recorded_at, topology_keys)
from scoring.policy import BalancerPolicy, BasicAuth, default_policy
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec, generate_fleet
from sim.serving_text import ServedReplica, render_serving

SPEC = FleetSpec(nodes=6, gpus_per_node=4, profile="skewed", seed=5)


def policy_for(url: str, **connection) -> BalancerPolicy:
    policy = default_policy()
    return replace(policy, prometheus=replace(policy.prometheus, url=url, **connection))


def through_the_rules(prom):
    """Once `prom` has recorded a snapshot: the policy pointed at it, a client, and the rules' fingerprint."""
    prom.wait_for(recording.snapshot_record("newest_sample"))
    policy = policy_for(prom.url)
    return policy, connect(policy.prometheus), recording.fingerprint(policy, topology_keys(policy))


def heat_from(url: str, **connection):
    policy = policy_for(url, **connection)
    snapshot = read_snapshot(connect(policy.prometheus), policy)
    return snapshot, fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc),
                                staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)


def expected_by_node(spec: FleetSpec):
    """Ground truth from the generated fleet, computed directly rather than through the heat model."""
    truth = {}
    for reading in generate_fleet(spec):
        truth.setdefault(reading.node, []).append(reading)
    return {node: {"util": fmean(r.util_percent for r in rs), "free": sum(r.pod is None for r in rs),
                   "max": max(r.util_percent for r in rs)} for node, rs in truth.items()}


@pytest.mark.parametrize("hostname_label", ["Hostname", "hostname"])
def test_heat_read_through_prometheus_matches_the_fleet_with_either_hostname_spelling(
        fake_dcgm, prometheus, hostname_label):
    prom = prometheus(fake_dcgm(SPEC, hostname_label=hostname_label))
    prom.wait_for(dcgm.FB_USED, at_least=24)
    snapshot, fleet = heat_from(prom.url)
    assert snapshot.node_label == hostname_label
    assert not fleet.stale
    truth = expected_by_node(SPEC)
    assert [n.name for n in fleet.nodes] == sorted(truth)
    for node in fleet.nodes:
        assert node.gpu_util == pytest.approx(truth[node.name]["util"], abs=0.01)
        assert node.max_gpu_util == pytest.approx(truth[node.name]["max"])
        assert node.gpus_free == truth[node.name]["free"]
        expected_tier = Tier.HOT if truth[node.name]["util"] >= 80 else (
            Tier.WARM if truth[node.name]["util"] >= 50 else Tier.COOL)
        assert node.tier is expected_tier, (node.name, node.reasons)
    assert any(n.tier is Tier.HOT for n in fleet.nodes) and any(n.tier is Tier.COOL for n in fleet.nodes)


def test_behind_servicemonitor_target_labels_the_workload_pod_is_read_from_exported_pod(fake_dcgm, prometheus):
    target = ScrapeTarget(fake_dcgm(SPEC), labels={"pod": "nvidia-dcgm-exporter-x1", "namespace": "gpu-operator"})
    prom = prometheus(target)
    rows = prom.wait_for(f"{dcgm.FB_USED}{{exported_pod!=\"\"}}")
    assert rows[0]["metric"]["pod"] == "nvidia-dcgm-exporter-x1", "Prometheus renamed the exporter's pod label"
    _, fleet = heat_from(prom.url)
    truth = expected_by_node(SPEC)
    assert {n.name: n.gpus_free for n in fleet.nodes} == {name: t["free"] for name, t in truth.items()}


def test_the_series_selector_limits_every_query_to_one_cluster(fake_dcgm, prometheus):
    prod = ScrapeTarget(fake_dcgm(SPEC), labels={"cluster": "prod"})
    staging = ScrapeTarget(fake_dcgm(replace(SPEC, node_prefix="staging-")), labels={"cluster": "staging"})
    prom = prometheus(prod, staging)
    prom.wait_for(dcgm.FB_USED, at_least=48)
    snapshot, _ = heat_from(prom.url, series_selector='{cluster="staging"}')
    assert {n.name for n in snapshot.nodes} == {n.replace("gpu-node-", "staging-") for n in expected_by_node(SPEC)}


def fleet_losing_two_nodes(fake_dcgm, prometheus):
    """Prometheus scraping SPEC plus two `doomed-` nodes, and a function that stops the doomed
    nodes' exporter and waits until Prometheus has marked their series stale."""
    stays = fake_dcgm(SPEC)
    leaving = make_server(render_exposition(generate_fleet(replace(SPEC, nodes=2, node_prefix="doomed-"))), port=0)
    serve_in_background(leaving)
    prom = prometheus(stays, f"127.0.0.1:{leaving.server_port}")
    prom.wait_for(dcgm.FB_USED, at_least=32)

    def lose():
        leaving.shutdown()
        leaving.server_close()
        prom.wait_for(f"count({dcgm.FB_USED}) == 24", timeout=30)  # stale markers landed

    return prom, lose


def test_nodes_whose_exporter_disappears_become_unhealthy(fake_dcgm, prometheus):
    prom, lose = fleet_losing_two_nodes(fake_dcgm, prometheus)
    lose()
    snapshot, fleet = heat_from(prom.url)
    assert snapshot.vanished_nodes == ("doomed-00", "doomed-01")
    doomed = [n for n in fleet.nodes if n.name.startswith("doomed-")]
    assert [n.tier for n in doomed] == [Tier.UNHEALTHY, Tier.UNHEALTHY]
    assert "vanished" in doomed[0].reasons[0]


def test_a_refreshing_reader_reuses_the_look_back_and_still_sees_exporters_vanish(fake_dcgm, prometheus):
    prom, lose = fleet_losing_two_nodes(fake_dcgm, prometheus)
    policy = policy_for(prom.url)
    asked: list[str] = []
    real_query = connect(policy.prometheus)

    def query(promql):
        asked.append(promql)
        return real_query(promql)

    clock = [0.0]
    reader = SnapshotReader(query, policy, monotonic=lambda: clock[0])
    look_backs = lambda: sum("last_over_time" in q for q in asked)  # noqa: E731

    first = reader()
    assert look_backs() == 1 and not first.vanished_nodes
    clock[0] = policy.telemetry.vanish_check_seconds - 1
    assert reader().nodes == first.nodes and look_backs() == 1  # reused

    lose()
    # Still inside the reuse interval: the reused answer knew the doomed nodes, so they show at once.
    assert reader().vanished_nodes == ("doomed-00", "doomed-01") and look_backs() == 1
    clock[0] = policy.telemetry.vanish_check_seconds + 1
    assert reader().vanished_nodes == ("doomed-00", "doomed-01") and look_backs() == 2  # asked again
    assert read_snapshot(real_query, policy).vanished_nodes == ("doomed-00", "doomed-01")


KSM_TEXT = """\
# TYPE kube_node_status_allocatable gauge
kube_node_status_allocatable{node="gpu-node-05",resource="nvidia_com_gpu",unit="integer"} 4
# TYPE kube_pod_container_resource_requests gauge
kube_pod_container_resource_requests{namespace="ml",pod="big",uid="u1",container="a",node="gpu-node-05",resource="nvidia_com_gpu",unit="integer"} 3
kube_pod_container_resource_requests{namespace="ml",pod="done",uid="u2",container="a",node="gpu-node-05",resource="nvidia_com_gpu",unit="integer"} 1
# TYPE kube_node_labels gauge
kube_node_labels{node="gpu-node-05",label_nvidia_com_gpu_clique="cluster-a.3",label_topology_kubernetes_io_zone="z1"} 1
# TYPE kube_pod_status_phase gauge
kube_pod_status_phase{namespace="ml",pod="big",uid="u1",phase="Running"} 1
kube_pod_status_phase{namespace="ml",pod="big",uid="u1",phase="Succeeded"} 0
kube_pod_status_phase{namespace="ml",pod="done",uid="u2",phase="Running"} 0
kube_pod_status_phase{namespace="ml",pod="done",uid="u2",phase="Succeeded"} 1
"""


def test_kube_state_metrics_allocation_is_preferred_when_scraped(fake_dcgm, prometheus):
    ksm = make_server(KSM_TEXT, port=0)
    serve_in_background(ksm)
    try:
        prom = prometheus(fake_dcgm(SPEC), f"127.0.0.1:{ksm.server_port}")
        prom.wait_for(dcgm.FB_USED, at_least=24)
        prom.wait_for("kube_pod_status_phase", at_least=4)
        prom.wait_for("kube_node_labels")
        snapshot, fleet = heat_from(prom.url)
    finally:
        ksm.shutdown()
    by_name = {n.name: n for n in fleet.nodes}
    assert snapshot.by_name["gpu-node-05"].allocated_gpus == 3, "the finished pod's request is not counted"
    assert by_name["gpu-node-05"].gpus_free == 1
    assert snapshot.by_name["gpu-node-00"].allocated_gpus is None
    assert snapshot.by_name["gpu-node-05"].topology == (("nvidia.com/gpu.clique", "cluster-a.3"),
                                                       ("topology.kubernetes.io/zone", "z1"))


def test_an_unreachable_prometheus_is_a_typed_error_naming_the_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(PrometheusUnreachable, match="Prometheus at " + url):
        heat_from(url)


def test_something_that_is_not_prometheus_is_a_query_error(fake_dcgm):
    with pytest.raises(PrometheusQueryError, match="Prometheus at"):
        heat_from("http://" + fake_dcgm(SPEC))


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_GET(self):  # noqa: N802
        _Recorder.seen.append(dict(self.headers))
        body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_auth_headers_and_tenant_header_are_sent_on_every_query(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "token").write_text("s3cret-token\n")
    (tmp_path / "password").write_text("pw\n")
    try:
        for connection, header in [
            ({"bearer_token_file": str(tmp_path / "token")}, ("Authorization", "Bearer s3cret-token")),
            ({"basic_auth": BasicAuth("admin", str(tmp_path / "password"))}, ("Authorization", "Basic YWRtaW46cHc=")),
        ]:
            _Recorder.seen.clear()
            heat_from(f"http://127.0.0.1:{server.server_port}", headers={"X-Scope-OrgID": "gpu"}, **connection)
            assert len(_Recorder.seen) >= len(dcgm.GPU_METRICS)
            assert all(h.get(header[0]) == header[1] and h.get("X-Scope-OrgID") == "gpu" for h in _Recorder.seen)
    finally:
        server.shutdown()


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpu_balancer", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_status_prints_json_for_scripts(fake_dcgm, prometheus):
    prom = prometheus(fake_dcgm(SPEC, hostname_label="hostname"))
    prom.wait_for(dcgm.FB_USED, at_least=24)
    result = run_cli("status", "--prometheus-url", prom.url, "--output", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stale"] is False
    datetime.fromisoformat(report["taken_at"])
    assert len(report["nodes"]) == SPEC.nodes
    assert set(report["nodes"][0]) >= {"name", "gpus", "gpus_free", "gpu_util", "max_gpu_util",
                                       "memory_used_fraction", "tier", "reasons"}
    assert {n["tier"] for n in report["nodes"]} <= {"cool", "warm", "hot", "unhealthy"}


def test_status_prints_a_table_for_people(fake_dcgm, prometheus):
    prom = prometheus(fake_dcgm(SPEC))
    prom.wait_for(dcgm.FB_USED, at_least=24)
    result = run_cli("status", "--prometheus-url", prom.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].split()[:3] == ["NODE", "GPUS", "FREE"]
    assert "gpu-node-00" in result.stdout and "hot" in result.stdout
    assert "\033[" not in result.stdout, "no colour codes when stdout is not a terminal"


def test_status_gives_up_on_a_silent_prometheus_with_a_message_naming_it():
    # A listener that never answers: the worst case, bounded only by our timeouts.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        result = run_cli("status", "--prometheus-url", url, timeout=15)
        elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "Prometheus" in result.stderr and url in result.stderr
    assert elapsed < 15


def test_status_shows_the_descheduler_last_run_from_its_configmap(fake_dcgm, prometheus, kube, tmp_path):
    from kubernetes import client

    from descheduler.ledger_store import save_summary
    from descheduler.summary import RunSummary
    from scoring.policy import DeschedulerPolicy

    api, _ = kube
    summary = RunSummary(datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc), True, 2, ("a", "b"), 0, 3, 0,
                         {"cooldown": 1, "no-room": 2})
    save_summary(client.CoreV1Api(api), summary.to_json(), DeschedulerPolicy())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: t, cluster: {{server: '{api.configuration.host}'}}}}]\n"
        "users: [{name: t, user: {token: x}}]\ncontexts: [{name: t, context: {cluster: t, user: t}}]\n")
    prom = prometheus(fake_dcgm(SPEC))
    prom.wait_for(dcgm.FB_USED, at_least=24)
    table = run_cli("status", "--prometheus-url", prom.url, "--kubeconfig", str(kubeconfig))
    assert table.returncode == 0, table.stderr
    assert "descheduler, last run: 2026-12-01T12:00:00+00:00 (dry run): 2 hot node(s), would evict 3" in table.stdout
    report = json.loads(run_cli("status", "--prometheus-url", prom.url, "--kubeconfig", str(kubeconfig),
                                "--output", "json").stdout)
    assert report["descheduler_last_run"]["skipped"] == {"cooldown": 1, "no-room": 2}


def test_a_refresh_pauses_cycle_collection_and_leaves_it_as_it_found_it():
    import gc

    during: list[bool] = []

    def query(promql):
        during.append(gc.isenabled())
        return []

    def failing(promql):
        raise PrometheusUnreachable("http://nowhere", "refused")

    policy = default_policy()
    assert gc.isenabled()
    read_snapshot(query, policy)
    assert gc.isenabled() and during and not any(during[1:]), "paused for the snapshot's queries"
    with pytest.raises(PrometheusUnreachable):
        SnapshotReader(failing, policy)()
    assert gc.isenabled(), "resumed after a failed refresh"
    # Two refreshes overlapping: the collector resumes only when the last one ends.
    release, inside = threading.Event(), threading.Event()

    def slow(promql):
        if "gpu_balancer_rules" not in promql:  # the snapshot's queries, not the look for rules
            inside.set()
            release.wait(10)
        return []

    first = threading.Thread(target=read_snapshot, args=(slow, policy))
    first.start()
    inside.wait(10)
    read_snapshot(query, policy)
    assert not gc.isenabled(), "still paused: the first refresh is running"
    release.set()
    first.join(10)
    assert gc.isenabled()
    gc.disable()
    try:
        read_snapshot(query, policy)
        assert not gc.isenabled(), "a process that runs without the collector keeps it off"
    finally:
        gc.enable()


def test_through_the_rules_a_refresh_before_their_next_evaluation_returns_the_last_snapshot(fake_dcgm, prometheus):
    policy, real_query, fingerprint = through_the_rules(prometheus(fake_dcgm(SPEC), recorded=True))
    evaluations = iter([1000.0, 1000.0, 1015.0])  # when the rules last ran, as each refresh finds
    asked: list[str] = []

    def query(promql):
        asked.append(promql)
        if promql.startswith("timestamp("):
            assert recorded_at(real_query, fingerprint) > 0  # the real answer, before it is scripted
            return [{"metric": {}, "value": [0, str(next(evaluations))]}]
        return real_query(promql)

    reader = SnapshotReader(query, policy)
    first = reader()
    assert first.source == "recording rules" and len(asked) > 10
    asked.clear()
    assert reader() is first and len(asked) == 1, "not re-evaluated: one row asked, the last snapshot returned"
    third = reader()
    assert third is not first and len(asked) > 10 and third.nodes == first.nodes


def test_a_refreshing_reader_whose_rules_are_removed_reads_raw_at_once(fake_dcgm, prometheus):
    import signal

    prom = prometheus(fake_dcgm(SPEC), recorded=True)
    policy, query, fingerprint = through_the_rules(prom)
    reader = SnapshotReader(query, policy, monotonic=lambda: 0.0)  # never due for the look-back
    first = reader()
    assert first.source == "recording rules"
    prom.rule_files[0].write_text("groups: []\n")
    prom.process.send_signal(signal.SIGHUP)  # Prometheus marks the removed groups' series stale
    deadline = time.monotonic() + 30
    while recorded_at(query, fingerprint) is not None:
        assert time.monotonic() < deadline, "the removed rules' records never went stale"
        time.sleep(0.2)
    after = reader()
    assert after.source == "raw queries" and after.nodes == read_snapshot(query, policy).nodes
    assert {n.name for n in after.nodes} == {n.name for n in first.nodes}


def test_through_the_rules_a_due_look_back_waits_for_their_next_evaluation(fake_dcgm, prometheus):
    policy, real_query, _ = through_the_rules(prometheus(fake_dcgm(SPEC), recorded=True))
    evaluations = iter([1000.0, 1000.0, 1030.0])
    asked: list[str] = []

    def query(promql):
        asked.append(promql)
        if promql.startswith("timestamp("):
            return [{"metric": {}, "value": [0, str(next(evaluations))]}]
        return real_query(promql)

    clock = [0.0]
    reader = SnapshotReader(query, policy, monotonic=lambda: clock[0])
    look_backs = lambda: sum("snapshot_seen_recently" in q for q in asked)  # noqa: E731
    first = reader()
    assert look_backs() == 1
    clock[0] = policy.telemetry.vanish_check_seconds + 1  # the look-back is due, the rules have not run
    assert reader() is first and look_backs() == 1
    later = reader()  # they have: the look-back is read with their records
    assert later is not first and look_backs() == 2 and later.nodes == first.nodes


def test_a_refresh_reads_in_full_where_model_servers_report(fake_dcgm, prometheus):
    import gc

    replica = ServedReplica("chat", "llama-7c9f-a", "vllm", queue=2, mean_latency_seconds=0.08, node=SPEC.node_name(0))
    server = make_server(render_serving([replica], 600.0), port=0)
    serve_in_background(server)
    try:
        prom = prometheus(fake_dcgm(SPEC), f"127.0.0.1:{server.server_port}", recorded=True)
        prom.wait_for(recording.snapshot_record("newest_sample"))
        prom.wait_for("vllm:num_requests_waiting")
        time.sleep(2.2)  # two scrapes: the latency is a rate
        policy = policy_for(prom.url)
        reader = SnapshotReader(connect(policy.prometheus), policy)
        first = reader()
        assert any(node.serving for node in first.nodes)
        assert reader() is not first, "model-server series are read on every refresh"
    finally:
        server.shutdown()
    assert gc.isenabled()


def test_through_the_rules_a_refresh_reads_the_records_of_one_evaluation(prometheus):
    # The rules write rule by rule, so a read made while they run must not take some records from
    # this evaluation and some from the last: it reads as of the last complete one. Here the fleet
    # changes under a running Prometheus, and a read as of an evaluation made before still gets
    # that evaluation's records, every one of them.
    from scoring.ingest.prometheus import _read

    texts = [render_exposition(generate_fleet(SPEC)), render_exposition(generate_fleet(replace(SPEC, seed=6)))]
    serving_now = [texts[0]]
    server = make_server(lambda: serving_now[0], port=0)
    serve_in_background(server)
    policy, query, fingerprint = through_the_rules(prometheus(f"127.0.0.1:{server.server_port}", recorded=True))

    def settled(unlike: tuple = ()) -> tuple[float, tuple]:
        """An evaluation whose records equal what the raw queries read now (other than `unlike`),
        and those nodes."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            evaluated_at = recorded_at(query, fingerprint)
            nodes = _read(query, policy, now=None, seen_recently=None, recorded=fingerprint,
                          evaluated_at=evaluated_at)[0].nodes
            if nodes != unlike and nodes == read_snapshot(query, policy, raw=True).nodes:
                return evaluated_at, nodes
            time.sleep(0.5)
        raise AssertionError("the records never settled on the exporter's figures")

    before, first = settled()
    serving_now[0] = texts[1]
    after, second = settled(unlike=first)
    assert after > before
    assert read_snapshot(query, policy).nodes == second
    as_of_before = _read(query, policy, now=None, seen_recently=None, recorded=fingerprint, evaluated_at=before)
    assert as_of_before[0].nodes == first and as_of_before[0].source == "recording rules"
    server.shutdown()
    server.server_close()
