"""The webhook over real TLS, fed by a real Prometheus scraping fake-dcgm."""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import threading
import time
from dataclasses import replace

import httpx
import pytest

from certs.files import write_bundle
from certs.issue import issue_ca, issue_serving
from gpu_balancer.local_prometheus import free_port
from scoring import dcgm
from scoring.policy import default_policy
from sim.fleet import FleetSpec
from webhook.serve import build_server
from tests.webhook.helpers import apply_response, gpu_pod, review

SPEC = FleetSpec(nodes=8, gpus_per_node=4, profile="failing", seed=3)


@pytest.fixture
def tls_files(tmp_path):
    ca = issue_ca()
    serving = issue_serving(ca, ["localhost"], ip_addresses=(ipaddress.ip_address("127.0.0.1"),))
    return write_bundle(tmp_path / "tls", ca, serving), ca


def run_in_background(server, reloader, reload_interval):
    """Serve in a thread with the reloader ticking every `reload_interval`; returns a stop function."""
    reloader.interval = reload_interval
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    reloader.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started

    def stop():
        reloader.stop()
        server.should_exit = True
        thread.join(timeout=10)

    return stop


def start_webhook(prometheus_url, tls_files, *, reload_interval=0.2):
    paths, _ = tls_files
    policy = default_policy()
    policy = replace(policy, prometheus=replace(policy.prometheus, url=prometheus_url, timeout_seconds=2),
                     telemetry=replace(policy.telemetry, refresh_seconds=0.5, staleness_limit_seconds=60))
    port = free_port()
    server, reloader = build_server(policy, tls_cert=str(paths["tls.crt"]), tls_key=str(paths["tls.key"]),
                                    host="127.0.0.1", port=port, log_level="warning")
    stop_server = run_in_background(server, reloader, reload_interval)
    client = httpx.Client(base_url=f"https://127.0.0.1:{port}", timeout=10,
                          verify=ssl.create_default_context(cafile=str(paths["ca.crt"])))

    def stop():
        client.close()
        stop_server()

    return client, port, reloader, stop


@pytest.fixture
def live(fake_dcgm, prometheus, tls_files):
    prom = prometheus(fake_dcgm(SPEC))
    prom.wait_for(dcgm.FB_USED, at_least=32)
    client, port, reloader, stop = start_webhook(prom.url, tls_files)
    deadline = time.monotonic() + 20
    while client.get("/readyz").json()["telemetry"] != "fresh" and time.monotonic() < deadline:
        time.sleep(0.1)
    yield client, port, reloader
    stop()


def test_a_real_admission_review_gets_a_patch_that_prefers_cool_nodes_and_avoids_hot_ones(live):
    client, _, _ = live
    status = client.get("/readyz").json()
    assert status == {"ready": True, "telemetry": "fresh", "last_error": None}
    pod = gpu_pod()
    answer = client.post("/mutate", json=review(pod)).json()
    assert answer["response"]["allowed"] is True and answer["response"]["patchType"] == "JSONPatch"
    mutated = apply_response(pod, answer)
    preferred = [t["preference"]["matchFields"][0]["values"][0] for t in
                 mutated["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]]
    # Skewed fleet: the first quarter is hot, the last node has a critical XID, the one before
    # it is out of GPU memory; the idle tail is where the room is.
    assert preferred and all(name in {"gpu-node-04", "gpu-node-05"} for name in preferred[:2])
    advice = mutated["metadata"]["annotations"]["gpu-balancer.io/advice"]
    assert "gpu-node-00(hot)" in advice and "gpu-node-07(unhealthy)" in advice


def test_health_readiness_and_metrics_are_served(live):
    client, _, _ = live
    assert client.get("/healthz").text == "ok"
    client.post("/mutate", json=review(gpu_pod()))
    client.post("/mutate", content=b"{not json")
    metrics = client.get("/metrics").text
    assert 'gpu_balancer_admissions_total{outcome="mutated",reason="steered"} 1.0' in metrics
    assert "gpu_balancer_bad_requests_total 1.0" in metrics
    assert "gpu_balancer_admission_duration_seconds_bucket" in metrics
    age = next(line for line in metrics.splitlines() if line.startswith("gpu_balancer_snapshot_age_seconds "))
    assert 0 <= float(age.split()[1]) < 60


def test_each_nodes_verdict_is_published_for_request_routers(live):
    # The skewed fleet as the first test reads it: the first quarter hot, gpu-node-07 unhealthy.
    from prometheus_client.parser import text_string_to_metric_families

    client, _, _ = live
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    tiers = {s.labels["node"]: s.value for s in families["gpu_balancer_node_tier"].samples}
    assert len(tiers) == SPEC.nodes and set(tiers.values()) <= {0, 1, 2, 3}
    assert tiers["gpu-node-00"] == 2 and tiers["gpu-node-07"] == 3
    avoided = {(s.labels["node"], s.labels["reason"]) for s in families["gpu_balancer_node_avoided"].samples}
    assert ("gpu-node-07", "unhealthy") in avoided and ("gpu-node-00", "hot") in avoided
    assert {node for node, _ in avoided} == {node for node, tier in tiers.items() if tier >= 2}
    free = {s.labels["node"]: s.value for s in families["gpu_balancer_node_free_gpus"].samples}
    assert free and all(tiers[node] <= 1 and gpus > 0 for node, gpus in free.items())
    # No figure in a label: one refresh's series are the next one's.
    assert not any(ch.isdigit() for _, reason in avoided for ch in reason)


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{not json", 400, "not valid JSON"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}).encode(), 400, "uid"),
    (json.dumps({"kind": "Pod"}).encode(), 400, "AdmissionReview"),
    (b"[" * 50_000, 400, "JSON"),
    (b'{"a" 1}', 400, "delimiter"),  # the stdlib's message says "delimiter": still a 400, not a 413
    (b"x" * (3 * 1024 * 1024 + 1), 413, "limit"),
])
def test_bad_requests_get_a_clear_4xx(live, body, status, message):
    client, _, _ = live
    response = client.post("/mutate", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert message in response.json()["error"]


def test_the_admission_path_takes_only_post_and_a_body_sent_in_pieces(live):
    client, _, _ = live
    refused = client.get("/mutate")
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"
    body = json.dumps(review(gpu_pod())).encode()
    pieces = (body[i:i + 1000] for i in range(0, len(body), 1000))  # chunked, no Content-Length
    answer = client.post("/mutate", content=pieces, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True
    assert int(answer.headers["content-length"]) == len(answer.content)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")  # the old versions are the point
def test_only_tls_1_2_or_newer_is_spoken(live, tls_files):
    _, port, _ = live
    paths, _ = tls_files
    for version, works in ((ssl.TLSVersion.TLSv1_2, True), (ssl.TLSVersion.TLSv1_3, True),
                           (ssl.TLSVersion.TLSv1_1, False)):
        context = ssl.create_default_context(cafile=str(paths["ca.crt"]))
        context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        context.maximum_version = version
        if not works:
            context.set_ciphers("DEFAULT:@SECLEVEL=0")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                    context.wrap_socket(raw, server_hostname="localhost") as tls:
                assert tls.version() is not None
                handshake_ok = True
        except ssl.SSLError:
            handshake_ok = False
        assert handshake_ok is works, version


def test_rotated_certificates_are_served_without_a_restart(live, tls_files):
    client, port, reloader = live
    paths, ca = tls_files

    def served_serial() -> int:
        context = ssl.create_default_context(cafile=str(paths["ca.crt"]))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            from cryptography import x509
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number

    before = served_serial()
    renewed = issue_serving(ca, ["localhost"], ip_addresses=(ipaddress.ip_address("127.0.0.1"),))
    write_bundle(paths["tls.crt"].parent, ca, renewed)
    deadline = time.monotonic() + 10
    while served_serial() == before and time.monotonic() < deadline:
        assert client.get("/healthz").status_code == 200, "requests keep flowing during the swap"
        time.sleep(0.1)
    assert served_serial() == renewed.certificate.serial_number
    assert reloader.reloads >= 1


def test_without_telemetry_pods_are_admitted_without_node_steering(tls_files):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    client, _, _, stop = start_webhook(dead_url, tls_files)
    try:
        assert client.get("/readyz").json()["ready"] is True, "ready without telemetry"
        pod = gpu_pod()
        answer = client.post("/mutate", json=review(pod)).json()
        mutated = apply_response(pod, answer)
        assert "nodeAffinity" not in mutated["spec"].get("affinity", {})
        assert "no telemetry" in mutated["metadata"]["annotations"]["gpu-balancer.io/advice"]
        metrics = client.get("/metrics").text
        assert 'reason="no-telemetry"' in metrics
        assert "gpu_balancer_telemetry_errors_total" in metrics
    finally:
        stop()
