"""Every subcommand, driven with bad input, answers with one clear line and an exit status, never a
traceback (property test over generated bad values and broken files)."""

from __future__ import annotations

import contextlib
import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_balancer.cli import main
from gpu_balancer.local_prometheus import free_port

UNWRITABLE = "/proc/gpu-balancer-cannot-write-here"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Broken inputs of every kind a file argument may meet."""
    root = tmp_path_factory.mktemp("bad")
    made = {"missing": str(root / "missing.yaml"), "directory": str(root)}
    for name, content in {"empty": b"", "binary": bytes(range(256)), "yaml-list": b"- 1\n- 2\n",
                          "bad-yaml": b"key: [unclosed\n", "json-number": b"42",
                          "wrong-kind": b'{"kind": "Service", "items": []}',
                          "kubeconfig": b"apiVersion: v1\nclusters: 3\ncontexts: {}\n",
                          "ok-cluster": b'{"items": [{"kind": "Node", "metadata": {"name": "n"},'
                                        b' "status": {"allocatable": {"nvidia.com/gpu": "8"}}}]}',
                          "bad-scenario": b"telemetryLagSeconds: -5\nevents: {failedNodes: 99}\n",
                          "odd-items": b'{"items": [1, "x", {"kind": "Node"}]}',
                          "odd-cluster": b'{"items": [{"kind": "Node", "metadata": {"name": "n"}, "spec": "x",'
                                         b' "status": {"allocatable": {"nvidia.com/gpu": "lots"}}},'
                                         b' {"kind": "Pod", "spec": 7, "status": []}]}',
                          "odd-pod": b"kind: Pod\nspec: {containers: [{resources: {limits: {nvidia.com/gpu: many}}},"
                                     b" 3], nodeSelector: [1], tolerations: {a: b}}\n"}.items():
        path = root / name
        path.write_bytes(content)
        made[name] = str(path)
    return made


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse refusing an argument
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue() + err.getvalue()


BAD_PORTS = st.one_of(st.integers(-100_000, -1), st.integers(65_536, 10**9), st.sampled_from(["http", "8o80", ""]))
BAD_COUNTS = st.one_of(st.integers(-10, 0), st.integers(100_001, 10**12), st.sampled_from(["many", "1.5", ""]))
BAD_DNS = st.sampled_from(["Bad_Name", "-lead", "trail-", "a" * 64, "has space", "dots.in.label", ""])
BAD_DNS_NAMES = st.sampled_from(["Bad_Name.example", "-lead.x", "trail-.x", "a" * 64 + ".com", "has space", "x..y",
                                 "*.*.x"])
FILE_KINDS = st.sampled_from(["missing", "directory", "empty", "binary", "yaml-list", "bad-yaml", "json-number",
                              "wrong-kind", "odd-items", "odd-cluster", "odd-pod"])


def commands(files: dict[str, str], closed: str) -> st.SearchStrategy[list[str]]:
    f = st.builds(lambda kind: files[kind], FILE_KINDS)
    return st.one_of(
        st.builds(lambda p: ["status", "--config", p], f),
        st.builds(lambda u: ["status", "--prometheus-url", u], st.sampled_from(
            [closed, "prometheus:9090", "http://", "http://[::1", "ftp://x"])),
        st.builds(lambda p: ["deschedule", "--cluster-file", p, "--prometheus-url", closed], f),
        st.builds(lambda p: ["deschedule", "--kubeconfig", p, "--prometheus-url", closed],
                  st.sampled_from([files["kubeconfig"], files["missing"], files["binary"], files["empty"]])),
        st.builds(lambda p, q: ["explain", "--cluster-file", p, "--pod", q], f, f),
        st.just(["explain", "--cluster-file", files["ok-cluster"], "--pod", files["odd-pod"]]),
        st.just(["simulate", "--scenario-file", files["bad-scenario"]]),
        st.builds(lambda p: ["simulate", "--scenario-file", p], f),
        st.builds(lambda s: ["simulate", "--scenario", s], st.text(max_size=12)),
        st.builds(lambda n: ["demo", "--nodes", str(n)], BAD_COUNTS),
        st.builds(lambda g: ["serving-curve", "--gpu", g, "--model", "Llama-3.1-8B"], st.text(max_size=12).filter(
            lambda g: g.strip().lower() not in {"l4", "h200", "l40s"})),
        st.builds(lambda c: ["serving-curve", "--gpu", "L4", "--model", "Llama-3.1-8B", "--concurrency", c],
                  st.sampled_from(["0", "1,,2", "x", "", "5000", "-1"])),
        st.just(["serving-curve", "--gpu", "L4", "--model", "Llama-3.1-70B-TP4"]),
        st.just(["serving-curve", "--gpu", "L4"]),
        st.builds(lambda n: ["demo", "--gpus", str(n)], BAD_COUNTS),
        st.just(["demo", "--report-dir", UNWRITABLE, "--nodes", "2"]),
        st.builds(lambda p: ["fake-dcgm", "--port", str(p)], BAD_PORTS),
        st.builds(lambda n: ["fake-dcgm", "--nodes", str(n)], BAD_COUNTS),
        st.builds(lambda p: ["fake-dcgm", "--profile", p], st.text(min_size=1, max_size=8).filter(
            lambda t: t not in ("skewed", "uniform", "idle", "failing"))),
        st.builds(lambda c, s: [c, "--scenario", s], st.sampled_from(["fake-dcgm", "fake-serving"]),
                  st.sampled_from(["no-such-fleet", "", "llm-flee"])),
        st.builds(lambda v: ["fake-dcgm", "--scenario", "llm-fleet", "--speed", v],
                  st.sampled_from(["0", "-3", "fast", "1e9"])),
        st.builds(lambda x: ["fake-serving", "--scenario", "llm-fleet", "--contention-scale", x],
                  st.sampled_from(["-1", "11", "lots"])),
        st.builds(lambda p: ["webhook", "--tls-cert", p, "--tls-key", p], f),
        st.builds(lambda p: ["webhook", "--tls-cert", "x", "--tls-key", "y", "--port", str(p)], BAD_PORTS),
        st.builds(lambda p: ["nvml-exporter", "--port", str(p)], BAD_PORTS),
        st.builds(lambda i: ["nvml-exporter", "--interval", i], st.sampled_from(["0", "-1", "soon", "1e9"])),
        st.builds(lambda s, n: ["certs", "generate", "--service", s, "--namespace", n, "--out-dir", "/tmp/x"],
                  BAD_DNS, st.sampled_from(["gpu-balancer", "Bad"])),
        st.builds(lambda d: ["certs", "generate", "--service", "svc", "--namespace", "ns", "--extra-dns", d,
                             "--out-dir", "/tmp/x"], BAD_DNS_NAMES),
        st.just(["certs", "generate", "--service", "svc", "--namespace", "ns", "--out-dir", UNWRITABLE]),
        st.builds(lambda p: ["certs", "ensure", "--namespace", "ns", "--service", "svc", "--secret", "s",
                             "--webhook-config", "w", "--kubeconfig", p],
                  st.sampled_from([files["kubeconfig"], files["missing"], files["binary"]])),
        st.just(["simulate", "--scenario", "burst", "--report", UNWRITABLE]),
        st.builds(lambda s: ["simulate", "--scenario", "burst", "--seeds", s], st.sampled_from(
            ["8-1", "x", "1-", "0-500", "-2"])),
        st.just(["simulate", "--scenario", "burst", "--seeds", "1-2", "--report", UNWRITABLE]),
    )


def test_every_subcommand_refuses_bad_input_without_a_traceback(files):
    closed = f"http://127.0.0.1:{free_port()}"
    os.environ.pop("GPU_BALANCER_DEBUG", None)
    os.environ.pop("KUBECONFIG", None)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(commands(files, closed))
    def check(argv: list[str]) -> None:
        code, output = run(argv)
        assert "Traceback" not in output, (argv, output)
        assert code in (1, 2, 3), (argv, code, output)
        assert output.strip().splitlines()[-1].startswith(("gpu-balancer", "usage: gpu-balancer")), (argv, output)
        assert "unexpected error" not in output, f"bad input deserves its own message: {argv}: {output}"

    check()


def test_help_shows_every_default():
    for argv, default in ((["demo", "--help"], "default: 16"), (["webhook", "--help"], "default: 8443"),
                          (["fake-dcgm", "--help"], "default: 9400"), (["simulate", "--help"], "default: 11")):
        code, output = run(argv)
        assert code == 0 and default in output, (argv, output)


@pytest.mark.parametrize("kind", ["missing", "bad-yaml", "kubeconfig", "binary", "empty"])
def test_a_kubeconfig_that_cannot_be_used_is_named_with_what_is_wrong(files, kind, tmp_path):
    # deschedule, certs ensure and status (which only wants the descheduler's last run from it)
    # all refuse it with exit status 2, before any other work.
    path = files[kind]
    for argv in (["deschedule", "--kubeconfig", path], ["status", "--kubeconfig", path],
                 ["certs", "ensure", "--namespace", "a", "--service", "b", "--secret", "c",
                  "--webhook-config", "d", "--kubeconfig", path]):
        code, output = run(argv)
        assert code == 2, (argv, output)
        line = output.strip().splitlines()[-1]
        assert path in line and "Traceback" not in output, (argv, output)
        assert "\n" not in line and len(line) < 300, line


@pytest.mark.parametrize("command", ["fake-dcgm", "simulate", "demo"])
def test_a_negative_seed_is_refused_as_seeds_refuses_it(command):
    code, output = run([command, "--seed", "-1"])
    assert code == 2 and "out of range" in output, output


def test_port_zero_means_any_free_port_and_the_server_says_which():
    import subprocess
    import sys
    import urllib.request

    server = subprocess.Popen([sys.executable, "-m", "gpu_balancer", "fake-dcgm", "--nodes", "1", "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        assert port > 0, line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert b"DCGM_FI_DEV_GPU_UTIL" in answer.read()
    finally:
        server.terminate()
        server.wait()


def test_a_bad_descheduler_strategy_stops_every_command_that_loads_the_policy(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("descheduler:\n  strategies: [{name: health}, {name: binpack}]\n")
    for argv in (["status", "--config", str(policy)],
                 ["deschedule", "--config", str(policy), "--cluster-file", "/nonexistent"]):
        code, output = run(argv)
        assert code in (1, 2), (argv, output)
        assert "descheduler.strategies[1].name: unknown strategy 'binpack' (known: health, degraded, utilisation, " \
               "throttling, serving)" in output, output
