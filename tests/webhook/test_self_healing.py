"""The webhook heals itself: certificate swaps that fail no handshake (torn or clean, under load),
and a telemetry reader that is replaced when it dies or hangs — over real TLS, with a real Prometheus."""

from __future__ import annotations

import ipaddress
import multiprocessing
import os
import signal
import socket
import ssl
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone

import httpx
import pytest
from cryptography import x509

from certs.issue import issue_ca, issue_serving
from scoring import dcgm
from scoring.ingest.prometheus import TelemetryError
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import default_policy
from sim.fleet import FleetSpec
from webhook.app import create_app
from webhook.cache import SnapshotCache
from webhook.refresher import ChildProcessReader
from webhook.tls import CertificateReloader
from tests.polling import reached
from tests.webhook.helpers import gpu_pod, review
from tests.webhook.test_server_live import run_in_background, start_webhook, tls_files  # noqa: F401 - fixture

LOCALHOST = (ipaddress.ip_address("127.0.0.1"),)


def replace_file(path, data: bytes) -> None:
    """Swap a file's content in one step, as a Secret volume's symlink swap does."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_bytes(data)
    os.replace(temporary, path)


class Handshakes:
    """Full TLS handshakes in a loop from background threads, each on a new connection, verified
    against the CA; records failures and the serial numbers served."""

    def __init__(self, port: int, ca_file: str, threads: int = 2) -> None:
        self.context = ssl.create_default_context(cafile=ca_file)
        self.port, self.failures, self.serials, self.count = port, [], set(), 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw, \
                        self.context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    der = tls.getpeercert(binary_form=True)
                self.serials.add(x509.load_der_x509_certificate(der).serial_number)
                self.count += 1
            except (OSError, ssl.SSLError) as error:
                self.failures.append(repr(error))

    def __enter__(self) -> "Handshakes":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


@pytest.fixture
def tls_only_server(tls_files):  # noqa: F811 - the imported fixture
    """The webhook's TLS stack (uvicorn, our context and reloader) over an app without telemetry."""
    from webhook.serve import tls_server
    from gpu_balancer.local_prometheus import free_port

    paths, ca = tls_files
    policy = default_policy()
    app = create_app(policy, SnapshotCache(lambda: None, policy), run_cache=False)
    port = free_port()
    server, reloader = tls_server(app, tls_cert=str(paths["tls.crt"]), tls_key=str(paths["tls.key"]),
                                  host="127.0.0.1", port=port, log_level="warning")
    stop = run_in_background(server, reloader, 0.05)
    yield port, paths, ca, reloader
    stop()


def test_a_rotation_torn_by_seconds_fails_no_handshake_and_then_serves_the_new_pair(tls_only_server):
    port, paths, ca, reloader = tls_only_server
    new = issue_serving(ca, ["localhost"], ip_addresses=LOCALHOST)
    with Handshakes(port, str(paths["ca.crt"])) as load:
        time.sleep(0.5)
        replace_file(paths["tls.crt"], new.certificate_pem)  # the certificate first, the key 1.5 s later
        time.sleep(1.5)
        assert reloader.reloads == 0 and reloader.rejections == 1, "a mismatched pair is ignored, said once"
        replace_file(paths["tls.key"], new.key_pem)
        assert reached(lambda: reloader.reloads == 1, 5)
        time.sleep(0.5)
    assert load.failures == [] and load.count > 100
    assert x509.load_pem_x509_certificate(new.certificate_pem).serial_number in load.serials


def test_forty_clean_rotations_at_full_handshake_rate_fail_no_handshake(tls_only_server):
    port, paths, ca, reloader = tls_only_server
    pairs = [issue_serving(ca, ["localhost"], ip_addresses=LOCALHOST) for _ in range(40)]
    with Handshakes(port, str(paths["ca.crt"])) as load:
        for number, pair in enumerate(pairs, start=1):
            replace_file(paths["tls.key"], pair.key_pem)  # each file atomically, key first
            replace_file(paths["tls.crt"], pair.certificate_pem)
            assert reached(lambda: reloader.reloads == number, 5), number
            seen = load.count
            reached(lambda: load.count > seen + 5, 2)
    assert load.failures == []
    served = {x509.load_pem_x509_certificate(p.certificate_pem).serial_number for p in pairs}
    assert len(served & load.serials) >= 35, "new handshakes got the new certificates"


def test_a_certificate_not_valid_now_is_not_taken(tls_only_server, caplog):
    port, paths, ca, reloader = tls_only_server
    expired = issue_serving(ca, ["localhost"], ip_addresses=LOCALHOST,
                            now=datetime(2020, 1, 1, tzinfo=timezone.utc))
    replace_file(paths["tls.key"], expired.key_pem)
    replace_file(paths["tls.crt"], expired.certificate_pem)
    time.sleep(0.3)  # the reloader ticks every 50 ms: it has seen both files
    assert not reloader.check_once() and reloader.reloads == 0 and reloader.rejections >= 1
    with Handshakes(port, str(paths["ca.crt"]), threads=1) as load:
        reached(lambda: load.count > 5, 5)
    assert load.failures == [], "the old pair keeps serving"
    assert any("is valid only from" in record.message for record in caplog.records)


# --- the telemetry reader ------------------------------------------------------------------------

def tiny_fleet() -> ClusterSnapshot:
    """A picklable read for the child: an empty but well-formed snapshot."""
    return ClusterSnapshot(taken_at=datetime.now(timezone.utc), nodes=())


def exit_at_once() -> ClusterSnapshot:
    os._exit(1)


def reader_pid() -> int:
    (child,) = [p for p in multiprocessing.active_children() if p.name == "telemetry-reader"]
    return child.pid


def test_a_killed_reader_is_replaced_at_once_and_counted():
    restarts = []
    reader = ChildProcessReader(default_policy(), read=tiny_fleet, on_restart=restarts.append)
    try:
        reader()
        os.kill(reader_pid(), signal.SIGKILL)
        time.sleep(0.3)
        reader()  # replaced on this very call
        assert restarts == ["exited"] and reader.restarts == 1 and reader.failing_seconds() == 0
    finally:
        reader.close()


def test_a_hung_reader_is_killed_after_the_hang_timeout_and_replaced():
    restarts = []
    reader = ChildProcessReader(default_policy(), read=tiny_fleet, hang_timeout=1.0, on_restart=restarts.append)
    try:
        reader()
        os.kill(reader_pid(), signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(TelemetryError, match="did not answer in time"):
            reader()
        assert 1.0 <= time.monotonic() - started < 8
        reader()
        assert restarts == ["hung"] and reader.restarts == 1
    finally:
        reader.close()


def test_a_reader_that_cannot_come_back_backs_off_and_fails_liveness():
    clock = [0.0]
    restarts = []
    reader = ChildProcessReader(default_policy(), read=exit_at_once, on_restart=restarts.append,
                                monotonic=lambda: clock[0])
    try:
        for _ in range(3):
            with pytest.raises(TelemetryError):
                reader()
            clock[0] += 100
        assert len(restarts) == 3 and reader.failing_seconds() >= 300
        with pytest.raises(TelemetryError):
            reader()  # a fourth child, dying too: the next one waits 2^(4-2) = 4 s
        with pytest.raises(TelemetryError, match="being replaced; next try in 4s"):
            reader()
        assert len(restarts) == 4, "no child is spawned inside the backoff"
    finally:
        reader.close()


def test_healthz_fails_only_while_liveness_names_a_problem():
    import asyncio

    policy = default_policy()
    problem: list[str | None] = [None]
    app = create_app(policy, SnapshotCache(lambda: None, policy), run_cache=False, liveness=lambda: problem[0])

    async def probe() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as client:
            healthy = await client.get("/healthz")
            problem[0] = "the telemetry reader has not answered for 130s (limit 120s)"
            return [healthy, await client.get("/healthz"), await client.get("/readyz")]

    healthy, failing, ready = asyncio.run(probe())
    assert healthy.status_code == 200
    assert failing.status_code == 503 and "telemetry reader" in failing.text
    assert ready.status_code == 200, "readiness never fails"


# --- all of it under load --------------------------------------------------------------------------

def test_under_load_a_torn_rotation_a_killed_and_a_hung_reader_fail_no_request(fake_dcgm, prometheus,
                                                                              tls_files):  # noqa: F811
    prom = prometheus(fake_dcgm(FleetSpec(nodes=8, gpus_per_node=4, profile="skewed", seed=3)))
    prom.wait_for(dcgm.GPU_UTIL, at_least=32)
    client, port, reloader, stop = start_webhook(prom.url, tls_files, reload_interval=0.05)
    paths, ca = tls_files
    failures: list[str] = []
    steered: list[tuple[float, bool]] = []
    halt = threading.Event()

    def admit() -> None:
        context = ssl.create_default_context(cafile=str(paths["ca.crt"]))
        while not halt.is_set():
            # A new client every few requests: new handshakes keep meeting the rotating certificate.
            with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=context, timeout=10) as session:
                for _ in range(5):
                    try:
                        answer = session.post("/mutate", json=review(gpu_pod()))
                        answer.raise_for_status()
                        steered.append((time.monotonic(), "patch" in answer.json()["response"]))
                    except (httpx.HTTPError, ValueError) as error:
                        failures.append(repr(error))

    workers = [threading.Thread(target=admit, daemon=True) for _ in range(2)]
    try:
        assert reached(lambda: client.get("/readyz").json()["telemetry"] == "fresh", 20)
        for worker in workers:
            worker.start()
        time.sleep(1)
        new = issue_serving(ca, ["localhost"], ip_addresses=LOCALHOST)
        replace_file(paths["tls.crt"], new.certificate_pem)
        time.sleep(1.5)
        replace_file(paths["tls.key"], new.key_pem)
        assert reached(lambda: reloader.reloads == 1, 5)

        def metric(prefix: str) -> float:
            for line in client.get("/metrics").text.splitlines():
                if line.startswith(prefix):
                    return float(line.split()[-1])
            return 0.0

        def read_since(moment: float) -> bool:
            """Telemetry sampled after `moment` (fake-dcgm is scraped every second) is in use."""
            elapsed = time.monotonic() - moment
            return elapsed > 1.5 and metric("gpu_balancer_snapshot_age_seconds") < elapsed - 0.5

        killed_at = time.monotonic()
        os.kill(reader_pid(), signal.SIGKILL)
        assert reached(lambda: read_since(killed_at), 15)
        recovered = time.monotonic() - killed_at
        assert metric('gpu_balancer_telemetry_reader_restarts_total{reason="exited"}') == 1
        assert recovered < 15, f"steering back within three default (5 s) refreshes, took {recovered:.1f}s"
        os.kill(reader_pid(), signal.SIGSTOP)  # hang timeout here: max(3 × 0.5 s, 2 × 2 s + 5 s) = 9 s
        assert reached(lambda: metric('gpu_balancer_telemetry_reader_restarts_total{reason="hung"}') == 1, 15)
        hung_found = time.monotonic()
        assert reached(lambda: read_since(hung_found), 15)
        assert time.monotonic() - hung_found < 15
        time.sleep(1)
    finally:
        halt.set()
        for worker in workers:  # let requests in flight finish before the server goes
            if worker.is_alive():
                worker.join(timeout=30)
        stop()
    assert failures == []
    assert len(steered) > 100 and all(patched for _, patched in steered), "steering never stopped"
