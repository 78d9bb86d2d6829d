"""The `gpu-balancer` console script: argument parsing and wiring, no decisions (does I/O)."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from scoring.heat import fleet_heat
from scoring.policy import BalancerPolicy, PolicyError, default_policy, parse_policy
from scoring.prometheus import TelemetryError, connect, read_snapshot, utilisation_selector


class UsageError(Exception):
    """Bad input on the command line or in a file it names; exit status 2."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpu-balancer")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def load_policy(path: str | None, prometheus_url: str | None = None, *, reads_prometheus: bool = True
                ) -> BalancerPolicy:
    """The policy from `--config` (or the defaults), with `--prometheus-url` applied on top; for a
    command that `reads_prometheus`, its credential files checked as well."""
    policy = default_policy()
    if path:
        try:
            policy = parse_policy(Path(path).read_text())
        except OSError as error:
            raise UsageError(f"cannot read policy {path}: {error.strerror}") from None
        except PolicyError as error:
            raise UsageError(f"policy {path}: {error}") from None
    if prometheus_url:
        if not prometheus_url.startswith(("http://", "https://")):
            raise UsageError(f"--prometheus-url must start with http:// or https://, got {prometheus_url!r}")
        policy = replace(policy, prometheus=replace(policy.prometheus, url=prometheus_url))
    if reads_prometheus:
        _check_credential_files(policy)
    return policy


def _check_credential_files(policy: BalancerPolicy) -> None:
    """Stop at start, naming the file and the policy field, when a token, CA or password file the
    policy names cannot be read — not once per refresh, and not as a traceback."""
    connection = policy.prometheus
    for field, path in (("prometheus.bearerTokenFile", connection.bearer_token_file),
                        ("prometheus.caFile", connection.ca_file),
                        ("prometheus.basicAuth.passwordFile", connection.basic_auth.password_file)):
        if not path:
            continue
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise UsageError(f"{field}: cannot read {path}: {error.strerror} (is the Secret, token or CA "
                             "volume mounted there?)") from None


def _wants_colour(stream) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def cmd_status(args: argparse.Namespace) -> int:
    from gpu_balancer.status_view import heat_as_json, heat_as_table

    policy = load_policy(args.config, args.prometheus_url)
    snapshot = read_snapshot(connect(policy.prometheus), policy)
    if not snapshot.nodes and not snapshot.vanished_nodes:
        looked_for = utilisation_selector(policy.prometheus.selector_matchers)
        detail = f" ({snapshot.warnings[0]})" if snapshot.warnings else ""
        raise TelemetryError(f"Prometheus at {policy.prometheus.url} holds no DCGM GPU series: looked for "
                             f"{looked_for}{detail}. Is dcgm-exporter scraped, and does the policy's "
                             "prometheus.seriesSelector match its series?")
    fleet = fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc),
                       staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
    if args.output == "json":
        print(heat_as_json(fleet, snapshot.warnings))
    else:
        print(heat_as_table(fleet, colour=_wants_colour(sys.stdout)))
        for warning in snapshot.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_fake_dcgm(args: argparse.Namespace) -> int:
    from sim.dcgm_text import render_exposition
    from sim.fake_dcgm import make_server
    from sim.fleet import FleetSpec, generate_fleet

    try:
        spec = FleetSpec(nodes=args.nodes, gpus_per_node=args.gpus, profile=args.profile, seed=args.seed)
    except ValueError as error:
        raise UsageError(str(error)) from None
    body = render_exposition(generate_fleet(spec), hostname_label=args.hostname_label, profiling=args.profiling)
    try:
        server = make_server(body, host=args.host, port=args.port)
    except OSError as error:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {error.strerror}") from None
    print(f"fake-dcgm: {args.nodes} nodes x {args.gpus} GPUs ({args.profile}) on "
          f"http://{args.host}:{server.server_port}/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def cmd_webhook(args: argparse.Namespace) -> int:
    from webhook.serve import serve

    policy = load_policy(args.config, args.prometheus_url)
    for path in (args.tls_cert, args.tls_key):
        if not os.path.isfile(path):
            raise UsageError(f"TLS file {path} does not exist")
    try:
        return serve(policy, tls_cert=args.tls_cert, tls_key=args.tls_key, host=args.host, port=args.port)
    except ssl.SSLError as error:
        raise UsageError(f"cannot load the TLS certificate and key: {error}") from None


def cmd_certs_generate(args: argparse.Namespace) -> int:
    from certs.files import write_bundle
    from certs.issue import issue_ca, issue_serving, service_dns_names

    if not args.service or not args.namespace:
        raise UsageError("--service and --namespace must not be empty")
    ca = issue_ca()
    serving = issue_serving(ca, service_dns_names(args.service, args.namespace) + list(args.extra_dns))
    try:
        paths = write_bundle(Path(args.out_dir), ca, serving)
    except OSError as error:
        raise UsageError(f"cannot write to {args.out_dir}: {error.strerror}") from None
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def cmd_nvml_exporter(args: argparse.Namespace) -> int:
    import logging
    import socket

    from nvml_exporter.reader import NvmlUnavailable
    from nvml_exporter.serve import run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    try:
        with warnings.catch_warnings():  # the pynvml shim warns that it wraps nvidia-ml-py: that is fine
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError as error:
        raise UsageError(f"pynvml is not installed: {error}") from None
    node = os.environ.get("NODE_NAME") or socket.gethostname()
    try:
        run(pynvml, node=node, port=args.port, interval=args.interval, host=args.host)
    except NvmlUnavailable as error:
        print(f"gpu-balancer nvml-exporter: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def kubernetes_api(kubeconfig: str | None):
    """An ApiClient from --kubeconfig, else the in-cluster service account, else ~/.kube/config."""
    from kubernetes import client, config

    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
    except (config.ConfigException, OSError) as error:
        raise UsageError(f"no Kubernetes configuration: {error}") from None
    return client.ApiClient()


def cmd_certs_ensure(args: argparse.Namespace) -> int:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from certs.ensure import ensure

    api = kubernetes_api(args.kubeconfig)
    try:
        done = ensure(client.CoreV1Api(api), client.AdmissionregistrationV1Api(api), namespace=args.namespace,
                      service=args.service, secret=args.secret, webhook_config=args.webhook_config,
                      now=datetime.now(timezone.utc))
    except ApiException as error:
        print(f"gpu-balancer certs ensure: Kubernetes API said {error.status} {error.reason}", file=sys.stderr)
        return 1
    print("; ".join(done) if done else "certificates are current; nothing to do")
    return 0


def cmd_deschedule(args: argparse.Namespace) -> int:
    import json as json_module
    import logging

    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from descheduler.cluster import cluster_from_list
    from descheduler.run import live_cluster, report_as_json, report_as_table, run_once

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    policy = load_policy(args.config, args.prometheus_url)
    core = events = None
    if args.cluster_file:
        try:
            cluster = cluster_from_list(json_module.loads(Path(args.cluster_file).read_text()), policy.placement,
                                        policy.opt_in)
        except OSError as error:
            raise UsageError(f"cannot read {args.cluster_file}: {error.strerror}") from None
        except ValueError as error:
            raise UsageError(f"{args.cluster_file}: {error}") from None
    else:
        api = kubernetes_api(args.kubeconfig)
        core, events = client.CoreV1Api(api), client.EventsV1Api(api)
        try:
            cluster = live_cluster(core, policy)
        except ApiException as error:
            print(f"gpu-balancer deschedule: cannot list nodes and pods: {error.status} {error.reason}", file=sys.stderr)
            return 1
    report = run_once(policy, query=connect(policy.prometheus), cluster=cluster, core=core, events=events,
                      dry_run=args.dry_run or core is None or (policy.descheduler.dry_run and not args.live),
                      now=lambda: datetime.now(timezone.utc))
    print(report_as_json(report) if args.output == "json" else report_as_table(report))
    return 1 if report.errors else 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from sim.report import as_json, as_table, write_report
    from sim.run import compare
    from sim.scenario import load_scenario, named

    if bool(args.scenario) == bool(args.scenario_file):
        raise UsageError("give exactly one of --scenario and --scenario-file")
    try:
        scenario = named(args.scenario) if args.scenario else load_scenario(Path(args.scenario_file).read_text())
    except KeyError as error:
        raise UsageError(str(error.args[0])) from None
    except OSError as error:
        raise UsageError(f"cannot read {args.scenario_file}: {error.strerror}") from None
    except PolicyError as error:
        raise UsageError(f"scenario {args.scenario_file}: {error}") from None
    show = sys.stderr.isatty() and args.output == "table"

    def progress(policy: str, tick: int, ticks: int) -> None:
        if show and (tick % 20 == 0 or tick == ticks - 1):
            done = int(30 * (tick + 1) / ticks)
            print(f"\r{policy:20s} [{'#' * done}{'.' * (30 - done)}] {tick + 1}/{ticks}", end="", file=sys.stderr,
                  flush=True)
            if tick == ticks - 1:
                print(file=sys.stderr)

    results = compare(scenario, args.seed, progress=progress)
    print(as_json(scenario.name, args.seed, results) if args.output == "json" else as_table(scenario.name, args.seed,
                                                                                           results))
    if args.report:
        for path in write_report(Path(args.report), scenario.name, args.seed, results):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    import json as json_module

    import yaml

    from sim.explain import as_table, explain, nodes_from_list

    # Prometheus is read only with --prometheus-url: a production policy explains offline too.
    policy = load_policy(args.config, args.prometheus_url, reads_prometheus=bool(args.prometheus_url))
    try:
        nodes = nodes_from_list(json_module.loads(Path(args.cluster_file).read_text()))
        pod = yaml.safe_load(Path(args.pod).read_text())
    except OSError as error:
        raise UsageError(f"cannot read {error.filename}: {error.strerror}") from None
    except (ValueError, yaml.YAMLError) as error:
        raise UsageError(str(error)) from None
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
        raise UsageError(f"{args.pod}: expected one Pod (YAML or JSON)")
    snapshot = read_snapshot(connect(policy.prometheus), policy) if args.prometheus_url else None
    result = explain(pod, nodes, snapshot=snapshot, policy=policy, now=datetime.now(timezone.utc))
    print(json_module.dumps(result, indent=2) if args.output == "json" else as_table(result))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gpu_balancer.demo import run_demo

    return run_demo(nodes=args.nodes, gpus=args.gpus, seed=args.seed, colour=_wants_colour(sys.stdout),
                    report_dir=args.report_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-balancer", description="GPU-aware placement for Kubernetes.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    status = commands.add_parser("status", help="the fleet's GPU heat, read from Prometheus")
    status.add_argument("--prometheus-url", help="Prometheus base URL (overrides the policy's)")
    status.add_argument("--config", help="BalancerPolicy YAML file")
    status.add_argument("--output", choices=("table", "json"), default="table")
    status.set_defaults(handler=cmd_status)

    fake = commands.add_parser("fake-dcgm", help="serve a synthetic fleet as dcgm-exporter metrics")
    fake.add_argument("--nodes", type=int, default=8)
    fake.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    fake.add_argument("--profile", default="skewed", help="skewed, uniform, idle or failing")
    fake.add_argument("--seed", type=int, default=1)
    fake.add_argument("--hostname-label", choices=("Hostname", "hostname"), default="Hostname",
                      help="Hostname (released dcgm-exporter) or hostname (newer main branch)")
    fake.add_argument("--profiling", action="store_true", help="also serve DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    fake.add_argument("--host", default="127.0.0.1")
    fake.add_argument("--port", type=int, default=9400)
    fake.set_defaults(handler=cmd_fake_dcgm)

    hook = commands.add_parser("webhook", help="serve the mutating admission webhook over TLS")
    hook.add_argument("--prometheus-url", help="Prometheus base URL (overrides the policy's)")
    hook.add_argument("--tls-cert", required=True)
    hook.add_argument("--tls-key", required=True)
    hook.add_argument("--host", default="0.0.0.0")
    hook.add_argument("--port", type=int, default=8443)
    hook.add_argument("--config", help="BalancerPolicy YAML file")
    hook.set_defaults(handler=cmd_webhook)

    certs = commands.add_parser("certs", help="webhook certificates")
    certs_commands = certs.add_subparsers(dest="certs_command", required=True, metavar="ACTION")
    generate = certs_commands.add_parser("generate", help="write a CA and a serving certificate for the Service")
    generate.add_argument("--service", required=True)
    generate.add_argument("--namespace", required=True)
    generate.add_argument("--out-dir", required=True)
    generate.add_argument("--extra-dns", action="append", default=[], help="another DNS SAN (repeatable)")
    generate.set_defaults(handler=cmd_certs_generate)

    nvml = commands.add_parser("nvml-exporter", help="serve this node's GPUs, read through NVML, as dcgm-exporter metrics")
    nvml.add_argument("--port", type=int, default=9400)
    nvml.add_argument("--host", default="0.0.0.0")
    nvml.add_argument("--interval", type=float, default=5.0, help="seconds between GPU reads")
    nvml.set_defaults(handler=cmd_nvml_exporter)

    ensure_cmd = certs_commands.add_parser("ensure", help="create or renew the TLS Secret and the caBundle, in cluster")
    ensure_cmd.add_argument("--namespace", required=True)
    ensure_cmd.add_argument("--service", required=True)
    ensure_cmd.add_argument("--secret", required=True)
    ensure_cmd.add_argument("--webhook-config", required=True)
    ensure_cmd.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    ensure_cmd.set_defaults(handler=cmd_certs_ensure)

    desched = commands.add_parser("deschedule", help="evict a few pods from GPU nodes that stay hot")
    mode = desched.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="report what would be evicted (and, with API access, WouldEvict Events); evict nothing "
                           "(the policy's descheduler.dryRun, true by default, does the same)")
    mode.add_argument("--live", action="store_true",
                      help="evict, even where the policy's descheduler.dryRun is true (the shipped base's)")
    desched.add_argument("--prometheus-url", help="Prometheus base URL (overrides the policy's)")
    desched.add_argument("--config", help="BalancerPolicy YAML file")
    desched.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    desched.add_argument("--cluster-file", help="output of `kubectl get nodes,pods -A -o json` (planning only)")
    desched.add_argument("--output", choices=("table", "json"), default="table")
    desched.set_defaults(handler=cmd_deschedule)

    simulate = commands.add_parser("simulate", help="compare placement policies on a simulated GPU cluster")
    simulate.add_argument("--scenario", help="built-in scenario: skewed-inference, burst, training-mix, node-failure")
    simulate.add_argument("--scenario-file", help="YAML scenario (see README)")
    simulate.add_argument("--seed", type=int, default=11)
    simulate.add_argument("--output", choices=("table", "json"), default="table")
    simulate.add_argument("--report", help="directory for PNG plots and a Markdown summary")
    simulate.set_defaults(handler=cmd_simulate)

    explain_cmd = commands.add_parser("explain", help="why would this pod land there? (scheduler model)")
    explain_cmd.add_argument("--cluster-file", required=True, help="output of `kubectl get nodes,pods -A -o json`")
    explain_cmd.add_argument("--pod", required=True, help="the pod, YAML or JSON")
    explain_cmd.add_argument("--prometheus-url", help="with telemetry: also show the placement after the advice")
    explain_cmd.add_argument("--config", help="BalancerPolicy YAML file")
    explain_cmd.add_argument("--output", choices=("table", "json"), default="table")
    explain_cmd.set_defaults(handler=cmd_explain)

    demo = commands.add_parser("demo", help="the whole path on one machine: telemetry, webhook over TLS, "
                                            "descheduler dry-run, policy comparison")
    demo.add_argument("--nodes", type=int, default=16)
    demo.add_argument("--gpus", type=int, default=8)
    demo.add_argument("--seed", type=int, default=11)
    demo.add_argument("--report-dir", default="reports/demo", help="where the comparison report is written")
    demo.set_defaults(handler=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as error:
        print(f"gpu-balancer {args.command}: {error}", file=sys.stderr)
        return 2
    except TelemetryError as error:
        print(f"gpu-balancer {args.command}: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
