"""The `gpu-balancer` command line: subcommands that do their work, and clear errors on bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpu_balancer.cli import main
from gpu_balancer.local_prometheus import free_port
from scoring import dcgm


def test_fake_dcgm_serves_dcgm_exporter_shaped_text():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "gpu_balancer", "fake-dcgm", "--nodes", "3", "--gpus", "2",
                                "--profile", "uniform", "--port", str(port), "--hostname-label", "hostname"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert "fake-dcgm: 3 nodes x 2 GPUs" in process.stdout.readline()
        response = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)." in response.text
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert set(families) >= {dcgm.GPU_UTIL, dcgm.FB_USED, dcgm.FB_FREE, dcgm.GPU_TEMP, dcgm.POWER_USAGE,
                             dcgm.XID_ERRORS}
    util = families[dcgm.GPU_UTIL].samples
    assert len(util) == 6
    assert set(util[0].labels) >= {"gpu", "UUID", "device", "pci_bus_id", "modelName", "hostname"}
    assert any("pod" in s.labels for s in util), "allocated GPUs carry pod labels"


@pytest.mark.parametrize(("server", "families"), [
    ("vllm", {"vllm:num_requests_waiting", "vllm:time_to_first_token_seconds"}),
    ("triton", {"nv_inference_pending_request_count", "nv_inference_request_success", "nv_inference_queue_duration_us"}),
])
def test_fake_serving_serves_model_server_shaped_text_whose_counters_grow(server, families):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "gpu_balancer", "fake-serving", "--server", server,
                                "--replicas", "4", "--slow", "1", "--nodes", "2", "--port", str(port)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert f"fake-serving: 4 {server} replicas (1 queueing)" in process.stdout.readline()
        first = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        second = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        process.terminate()
        process.wait(timeout=10)
    parsed = {f.name: f for f in text_string_to_metric_families(first)}
    assert set(parsed) == families
    queue = next(f for name, f in parsed.items() if "pending" in name or "waiting" in name)
    assert sorted(s.value for s in queue.samples) == [1.0, 1.0, 1.0, 30.0]
    assert {s.labels["node"] for s in queue.samples} == {"gpu-node-00", "gpu-node-01"}
    assert first != second  # counters are rendered at each scrape


def test_a_bad_policy_file_exits_2_naming_the_field(tmp_path, capsys):
    bad = tmp_path / "policy.yaml"
    bad.write_text("apiVersion: gpu-balancer.io/v1alpha1\nkind: BalancerPolicy\nheat: {hotUtilPercent: 200}\n")
    assert main(["status", "--config", str(bad)]) == 2
    error = capsys.readouterr().err
    assert str(bad) in error and "heat.hotUtilPercent: must be between 0 and 100, got 200" in error


def test_a_missing_policy_file_exits_2(tmp_path, capsys):
    assert main(["status", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read policy" in capsys.readouterr().err


def test_a_prometheus_url_without_scheme_is_refused(capsys):
    assert main(["status", "--prometheus-url", "prometheus:9090"]) == 2
    assert "--prometheus-url" in capsys.readouterr().err


def test_fake_dcgm_refuses_an_unknown_profile(capsys):
    assert main(["fake-dcgm", "--profile", "lumpy"]) == 2
    assert "unknown profile" in capsys.readouterr().err


def test_fake_dcgm_refuses_a_port_in_use(capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert main(["fake-dcgm", "--port", str(busy.getsockname()[1])]) == 2
    assert "cannot listen" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "yaml_field"), [
    ("prometheus.bearerTokenFile", "bearerTokenFile: {path}"),
    ("prometheus.caFile", "caFile: {path}"),
    ("prometheus.basicAuth.passwordFile", "basicAuth: {{username: u, passwordFile: {path}}}"),
])
@pytest.mark.parametrize("command", ["status", "deschedule", "webhook"])
def test_a_credential_file_that_is_not_there_stops_the_program_at_start_naming_it(
        tmp_path, capsys, field, yaml_field, command):
    missing = tmp_path / "not-mounted" / "token"
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: gpu-balancer.io/v1alpha1\nkind: BalancerPolicy\nprometheus:\n"
                      f"  url: http://127.0.0.1:9\n  {yaml_field.format(path=missing)}\n")
    extra = ["--tls-cert", str(tmp_path / "c"), "--tls-key", str(tmp_path / "k")] if command == "webhook" else []
    assert main([command, "--config", str(policy), *extra]) == 2
    error = capsys.readouterr().err
    assert field in error and str(missing) in error and "Traceback" not in error


def test_version_is_the_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"gpu-balancer {version('gpu-balancer')}"


def test_the_production_commands_load_no_matplotlib_and_the_report_asks_for_the_sim_extra(tmp_path):
    import subprocess
    import sys

    loaded = subprocess.run([sys.executable, "-c",
                             "import sys, gpu_balancer.cli, webhook.serve, descheduler.run, nvml_exporter.serve, "
                             "certs.ensure, sim.explain; print('matplotlib' in sys.modules)"],
                            capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False", "the image installs no matplotlib: only the `sim` extra does"
    hidden = ("import sys; sys.modules['matplotlib'] = None; from gpu_balancer.cli import main; "
              f"sys.exit(main(['simulate', '--scenario', 'burst', '--report', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True)
    assert done.returncode == 2 and "pip install 'gpu-balancer[sim]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
