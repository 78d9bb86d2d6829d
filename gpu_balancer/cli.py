"""The `gpu-balancer` console script: argument parsing and wiring, no decisions (does I/O)."""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from descheduler.strategies import configure
from scoring.heat import fleet_heat
from scoring.ingest.prometheus import TelemetryError, connect, read_snapshot
from scoring.ingest.queries import utilisation_selector
from scoring.ingest.signals import registry as signals
from scoring.policy import DEFAULT_SERVERS, BalancerPolicy, PolicyError, default_policy, parse_policy, yaml_problem


class UsageError(Exception):
    """Bad input on the command line or in a file it names; exit status 2."""


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535; 0 asks the system for any free port, and the
    command prints the one it got (Services and probes name a fixed one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0–65535; 0: any free port)")
    return value


def count(low: int, high: int):
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({low}–{high})")
        return value

    return parse


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 and less than a day")
    return value


def speed_factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 10_000:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 and at most 10000")
    return value


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def dns_label(what: str, value: str) -> str:
    """`value` when it is an RFC 1123 label (Service and Namespace names are), else UsageError."""
    if not _DNS_LABEL.match(value):
        raise UsageError(f"{what} {value!r} is not a valid DNS label (lower-case letters, digits and '-', "
                         "at most 63, starting and ending with a letter or digit)")
    return value


def dns_name(value: str) -> str:
    """`value` when it is a DNS name a certificate may carry (`*.` allowed first), else UsageError."""
    labels = value.removeprefix("*.").split(".")
    if len(value) > 253 or not all(_DNS_LABEL.match(label) for label in labels):
        raise UsageError(f"--extra-dns {value!r} is not a valid DNS name")
    return value


def writable_directory(path: str, what: str) -> Path:
    """Create `path` if needed and check that files can be written there, before any work is done."""
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".gpu-balancer-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"{what} {path}: cannot write there: {error.strerror or error}") from None
    return directory


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpu-balancer")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def read_text(path: str, what: str) -> str:
    """A text file's content, or UsageError naming the file and why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text") from None
    except OSError as error:
        raise UsageError(f"cannot read {what} {path}: {error.strerror or error}") from None


def load_policy(path: str | None, prometheus_url: str | None = None, *, reads_prometheus: bool = True
                ) -> BalancerPolicy:
    """The policy from `--config` (or the defaults), with `--prometheus-url` applied on top; for a
    command that `reads_prometheus`, its credential files checked as well."""
    policy = default_policy()
    if path:
        try:
            policy = parse_policy(read_text(path, "policy"))
            # A bad signal or strategy entry stops every command, not a refresh or a CronJob run later.
            configure(policy.descheduler)
            signals.configured(policy.heat)
        except PolicyError as error:
            raise UsageError(f"policy {path}: {error}") from None
    if prometheus_url:
        if not prometheus_url.startswith(("http://", "https://")):
            raise UsageError(f"--prometheus-url must start with http:// or https://, got {prometheus_url!r}")
        try:
            parts = urlsplit(prometheus_url)
            valid = bool(parts.hostname) and (parts.port is None or parts.port > 0)
        except ValueError:
            valid = False
        if not valid:
            raise UsageError(f"--prometheus-url {prometheus_url!r} is not a usable URL (scheme://host[:port][/path])")
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
    if args.kubeconfig:  # named on the command line: a file that cannot be used is bad input, at once
        _check_kubeconfig(args.kubeconfig)
    snapshot = read_snapshot(connect(policy.prometheus), policy)
    if not snapshot.nodes and not snapshot.vanished_nodes:
        looked_for = utilisation_selector(policy.prometheus.selector_matchers)
        detail = f" ({snapshot.warnings[0]})" if snapshot.warnings else ""
        raise TelemetryError(f"Prometheus at {policy.prometheus.url} holds no DCGM GPU series: looked for "
                             f"{looked_for}{detail}. Is dcgm-exporter scraped, and does the policy's "
                             "prometheus.seriesSelector match its series?")
    fleet = fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc),
                       staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
    last_run = _descheduler_last_run(args, policy)
    if args.output == "json":
        document = json.loads(heat_as_json(fleet, snapshot.warnings))
        document["read_through"] = snapshot.source
        if last_run is not None:
            document["descheduler_last_run"] = json.loads(last_run.to_json())
        print(json.dumps(document, indent=2))
    else:
        print(heat_as_table(fleet, colour=_wants_colour(sys.stdout)))
        print(f"read through {snapshot.source}" + ("" if snapshot.source == "recording rules" else
              " (no recording rules for this policy found; `gpu-balancer recording-rules` prints them)"))
        if last_run is not None:
            print(f"descheduler, last run: {last_run.line()}")
        for warning in snapshot.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_recording_rules(args: argparse.Namespace) -> int:
    import yaml

    from scoring.ingest.queries import topology_keys
    from scoring.ingest.recording import recording_rules

    policy = load_policy(args.config, reads_prometheus=False)
    rules = recording_rules(policy, topology_keys(policy))
    if args.format == "prometheusrule":
        rules = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                 "metadata": {"name": "gpu-balancer-recording"}, "spec": rules}
    elif args.format == "mimir":  # `mimirtool rules load` wants the groups under a namespace
        rules = {"namespace": "gpu-balancer", **rules}
    telemetry = policy.telemetry
    print("# gpu-balancer recording rules, generated from the policy (`gpu-balancer recording-rules`)")
    print(f"# snapshot group every {telemetry.recording_interval:g} s ({telemetry.recording_interval_origin})")
    print(yaml.safe_dump(rules, sort_keys=False, width=1000), end="")
    return 0


def _descheduler_last_run(args: argparse.Namespace, policy: BalancerPolicy):
    """The descheduler's last run summary from its ledger ConfigMap, where the Kubernetes API can be
    reached (--kubeconfig, in cluster, or $KUBECONFIG); otherwise None. Never fatal: status is about
    telemetry, and says on stderr why the summary is missing."""
    if not (args.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG")):
        return None
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from descheduler.ledger_store import load_summary
    from descheduler.summary import RunSummary

    try:
        stored = load_summary(client.CoreV1Api(kubernetes_api(args.kubeconfig)), policy.descheduler)
        if stored is None:
            print("note: the descheduler has not stored a run summary yet", file=sys.stderr)
            return None
        return RunSummary.from_json(stored)
    except (UsageError, ApiException, ValueError, OSError) as error:
        reason = f"{error.status} {error.reason}" if isinstance(error, ApiException) else str(error)
        print(f"note: cannot read the descheduler's last run: {reason}", file=sys.stderr)
        return None


def _serve_exposition(args: argparse.Namespace, body, what: str) -> int:
    """Serve `body` (text, or a function rendering it per scrape) on /metrics until interrupted."""
    from sim.fake_dcgm import make_server

    try:
        server = make_server(body, host=args.host, port=args.port)
    except OSError as error:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {error.strerror}") from None
    print(f"{what} on http://{args.host}:{server.server_port}/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def _replayed_run(args: argparse.Namespace):
    """The serving world's run of `--scenario` under the stock scheduler, and a function giving the
    tick to serve now: the run replayed at `--speed` simulated seconds a second, from its start,
    over and over."""
    import time

    from sim.calibration_series import simulated_world
    from sim.llm.exposition import ticks
    from sim.scenario import named

    try:
        scenario = named(args.scenario)
    except KeyError as error:
        raise UsageError(str(error.args[0])) from None
    scenario = _with_contention_scale(scenario, args.contention_scale)
    print(f"simulating {scenario.name} (seed {args.seed}, {scenario.hours:g} h) to replay it...", file=sys.stderr,
          flush=True)
    world = simulated_world(scenario, args.seed)
    started, count = time.monotonic(), ticks(world)

    def now() -> int:
        return int((time.monotonic() - started) * args.speed / scenario.tick_seconds) % count

    return world, now


def _built_in_scenarios() -> str:
    """The built-in scenarios' names, for --help and errors; the production image has no
    simulator to name."""
    try:
        from sim.scenario import BUILT_IN
    except ImportError:
        return "none here: the simulator is not installed"
    return ", ".join(BUILT_IN)


SIMULATOR_PARTS = ("sim", "numpy", "matplotlib")
"""What the simulator's commands and `calibrate` need that the production image goes without
(the `sim` extra)."""


def _with_contention_scale(scenario, scale: float | None):
    """The scenario with `--contention-scale` applied where given, or UsageError when out of range."""
    if scale is None:
        return scenario
    if not 0 <= scale <= 10:
        raise UsageError(f"--contention-scale: {scale:g} is out of range (0 to 10)")
    return replace(scenario, contention=replace(scenario.contention, scale=scale))


def _add_replay_arguments(parser: argparse.ArgumentParser, serves: str) -> None:
    parser.add_argument("--scenario", help=f"serve {serves} of a simulated serving-world scenario "
                        f"({_built_in_scenarios()}) as its run goes, under the stock scheduler")
    parser.add_argument("--speed", type=speed_factor, default=1.0,
                        help="with --scenario: simulated seconds replayed each second (1: real time)")
    parser.add_argument("--contention-scale", type=float, metavar="X", help="with --scenario: its contention.scale")


def cmd_fake_dcgm(args: argparse.Namespace) -> int:
    from sim.dcgm_text import render_exposition
    from sim.fleet import FleetSpec, generate_fleet

    if args.scenario is not None:
        from sim.llm.exposition import dcgm_text

        world, now = _replayed_run(args)
        return _serve_exposition(args, lambda: dcgm_text(world, now(), hostname_label=args.hostname_label),
                                 f"fake-dcgm: {args.scenario} seed {args.seed}, replayed at {args.speed:g}x")

    try:
        spec = FleetSpec(nodes=args.nodes, gpus_per_node=args.gpus, profile=args.profile, seed=args.seed)
    except ValueError as error:
        raise UsageError(str(error)) from None
    body = render_exposition(generate_fleet(spec), hostname_label=args.hostname_label, profiling=args.profiling)
    return _serve_exposition(args, body, f"fake-dcgm: {args.nodes} nodes x {args.gpus} GPUs ({args.profile})")


def cmd_fake_serving(args: argparse.Namespace) -> int:
    import time

    from sim.fleet import FleetSpec
    from sim.serving_text import render_serving, synthetic_replicas

    if args.scenario is not None:
        from sim.llm.exposition import serving_text

        world, now = _replayed_run(args)
        return _serve_exposition(args, lambda: serving_text(world, now()),
                                 f"fake-serving: {args.scenario} seed {args.seed}, vLLM replicas, "
                                 f"replayed at {args.speed:g}x")
    if args.slow > args.replicas:
        raise UsageError(f"--slow {args.slow} is more than --replicas {args.replicas}")
    spec = FleetSpec(nodes=args.nodes)
    replicas = synthetic_replicas([spec.node_name(i) for i in range(args.nodes)], replicas=args.replicas,
                                  server=args.server, slow=args.slow, seed=args.seed)
    started = time.monotonic()
    # Counters as if the servers had run for ten minutes, so a rate has data from the first scrape.
    return _serve_exposition(args, lambda: render_serving(replicas, time.monotonic() - started + 600),
                             f"fake-serving: {args.replicas} {args.server} replicas ({args.slow} queueing) "
                             f"on {args.nodes} nodes")


def cmd_webhook(args: argparse.Namespace) -> int:
    from webhook.serve import serve

    policy = load_policy(args.config, args.prometheus_url)
    for path in (args.tls_cert, args.tls_key):
        if not os.path.isfile(path):
            raise UsageError(f"TLS file {path} does not exist")
    try:  # before anything starts: a bad pair is a usage error, not a half-started server
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(args.tls_cert, args.tls_key)
    except (ssl.SSLError, OSError) as error:
        raise UsageError(f"cannot load the TLS certificate and key: {error}") from None
    try:
        return serve(policy, tls_cert=args.tls_cert, tls_key=args.tls_key, host=args.host, port=args.port)
    except ssl.SSLError as error:
        raise UsageError(f"cannot load the TLS certificate and key: {error}") from None


def cmd_certs_generate(args: argparse.Namespace) -> int:
    from certs.files import write_bundle
    from certs.issue import issue_ca, issue_serving, service_dns_names

    dns_label("--service", args.service)
    dns_label("--namespace", args.namespace)
    for name in args.extra_dns:
        dns_name(name)
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

    if kubeconfig:
        _check_kubeconfig(kubeconfig)
    where = f"kubeconfig {kubeconfig}" if kubeconfig else "no Kubernetes configuration"
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
    except (config.ConfigException, OSError) as error:
        raise UsageError(f"{where}: {error}") from None
    except Exception as error:  # noqa: BLE001 - the loader fails on malformed files in many ways
        raise UsageError(f"{where} is not usable ({type(error).__name__}: {error})".replace("\n", " ")) from None
    return client.ApiClient()


def _check_kubeconfig(path: str) -> None:
    """Name the file and what is wrong with it in one line, before the client's loader sees it."""
    import yaml

    try:
        document = yaml.safe_load(read_text(path, "kubeconfig"))
    except yaml.YAMLError as error:
        raise UsageError(f"kubeconfig {path} is not valid YAML: {yaml_problem(error)}") from None
    if not isinstance(document, dict) or not document.get("clusters") or not document.get("contexts"):
        raise UsageError(f"kubeconfig {path} is not a kubeconfig: it needs clusters, contexts and users "
                         "(`kubectl config view --raw` shows a working one)")


def cmd_certs_ensure(args: argparse.Namespace) -> int:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from certs.ensure import ensure

    for flag, value in (("--namespace", args.namespace), ("--service", args.service)):
        dns_label(flag, value)
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
    import logging

    from kubernetes import client

    from descheduler.cluster import cluster_from_list

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    policy = load_policy(args.config, args.prometheus_url)
    core = events = None
    fixed_cluster = None
    if args.cluster_file:
        try:
            fixed_cluster = cluster_from_list(json.loads(read_text(args.cluster_file, "cluster file")),
                                              policy.placement, policy.opt_in)
        except ValueError as error:
            raise UsageError(f"{args.cluster_file}: {error}") from None
    else:
        api = kubernetes_api(args.kubeconfig)
        core, events = client.CoreV1Api(api), client.EventsV1Api(api)
    if args.every is None:
        return _deschedule_once(args, policy, fixed_cluster, core, events)
    return _deschedule_every(args, policy, fixed_cluster, core, events)


def _deschedule_once(args, policy, fixed_cluster, core, events, metrics=None) -> int:
    """One run; its exit status (0, 1 with eviction or API errors; TelemetryError propagates)."""
    from kubernetes.client.rest import ApiException

    from descheduler.run import live_cluster, report_as_json, report_as_table, run_once

    try:
        cluster = fixed_cluster if fixed_cluster is not None else live_cluster(core, policy)
        report = run_once(policy, query=connect(policy.prometheus), cluster=cluster, core=core, events=events,
                          dry_run=args.dry_run or core is None or (policy.descheduler.dry_run and not args.live),
                          now=lambda: datetime.now(timezone.utc))
    except ApiException as error:
        if metrics is not None:
            metrics.observe_failure("api-error")
        print(f"gpu-balancer deschedule: Kubernetes API said {error.status} {error.reason}", file=sys.stderr)
        return 1
    if metrics is not None and report.summary is not None:
        metrics.observe(report.summary)
    print(report_as_json(report) if args.output == "json" else report_as_table(report), flush=True)
    return 1 if report.errors else 0


def _deschedule_every(args, policy, fixed_cluster, core, events) -> int:
    """Loop mode (`descheduler.loop`), its figures on /metrics."""
    from descheduler.loop import run_every
    from descheduler.metrics import DeschedulerMetrics

    metrics = DeschedulerMetrics()
    try:
        port = metrics.serve(args.metrics_port)
    except OSError as error:
        raise UsageError(f"cannot listen on :{args.metrics_port} for /metrics: {error.strerror}") from None
    print(f"gpu-balancer deschedule: a run every {args.every:g}s; metrics on :{port}/metrics",
          file=sys.stderr, flush=True)
    run_every(args.every, lambda m: _deschedule_once(args, policy, fixed_cluster, core, events, m), metrics)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from sim.report import as_json, single_seed_table
    from sim.run import compare
    from sim.scenario import load_scenario, named

    if args.list:
        print(simulator_listing())
        return 0
    if bool(args.scenario) == bool(args.scenario_file):
        raise UsageError("give exactly one of --scenario and --scenario-file")
    try:
        scenario = named(args.scenario) if args.scenario else load_scenario(read_text(args.scenario_file, "scenario"))
    except KeyError as error:
        raise UsageError(str(error.args[0])) from None
    except PolicyError as error:
        raise UsageError(f"scenario {args.scenario_file}: {error}") from None
    scenario = _with_settings(scenario, args.set or [])
    if args.calibration:
        scenario = replace(scenario, contention=replace(scenario.contention, scale=_calibrated_scale(args.calibration)))
    scenario = _with_contention_scale(scenario, args.contention_scale)
    if args.scheduler_config:
        scenario = replace(scenario, scheduler=_scheduler_profile(args.scheduler_config))
    if args.seeds is not None:
        return _simulate_seeds(args, scenario)
    if args.report:
        require_report_pictures("--report")
        writable_directory(args.report, "--report")
    show = sys.stderr.isatty() and args.output == "table"

    def progress(policy: str, tick: int, ticks: int) -> None:
        if show and (tick % 20 == 0 or tick == ticks - 1):
            done = int(30 * (tick + 1) / ticks)
            print(f"\r{policy:20s} [{'#' * done}{'.' * (30 - done)}] {tick + 1}/{ticks}", end="", file=sys.stderr,
                  flush=True)
            if tick == ticks - 1:
                print(file=sys.stderr)

    results = compare(scenario, args.seed, progress=progress)
    print(as_json(scenario.name, args.seed, results) if args.output == "json"
          else single_seed_table(scenario.name, args.seed, results))
    if args.report:
        _write_report(args.report, scenario, {args.seed: results})
    return 0


def _with_settings(scenario, settings: list[str]):
    """The scenario with each `--set KEY=VALUE` applied in order, or UsageError naming the field."""
    from sim.scenario import overridden

    for setting in settings:
        key, equals, value = setting.partition("=")
        if not equals or not key:
            raise UsageError(f"--set {setting}: give KEY=VALUE, KEY a dotted camelCase field (contention.scale)")
        try:
            scenario = overridden(scenario, key.strip(), value)
        except PolicyError as error:
            raise UsageError(f"--set {error}") from None
    return scenario


def simulator_listing() -> str:
    """The built-in scenarios and the policies, a line each (`simulate --list`)."""
    from sim.policies import POLICY_ABOUT
    from sim.scenario import ABOUT, BUILT_IN

    width = max(map(len, [*BUILT_IN, *POLICY_ABOUT])) + 2
    lines = ["scenarios (--scenario NAME):"]
    lines += [f"  {name:{width}s}{ABOUT.get(name, '')}" for name in BUILT_IN]
    lines += ["", "policies (a run compares stock, spread, lownodeutilization-actual, load-aware, gpu-balancer "
              "and coolest-node):"]
    lines += [f"  {name:{width}s}{about}" for name, about in POLICY_ABOUT.items()]
    return "\n".join(lines)


def _scheduler_profile(path: str):
    """The profile a KubeSchedulerConfiguration file sets up, or UsageError saying what is wrong."""
    from sim.scheduler_profile import ProfileError, profile_from_config

    try:
        return profile_from_config(read_text(path, "--scheduler-config"))
    except ProfileError as error:
        raise UsageError(f"--scheduler-config {path}: {error}") from None


def _calibrated_scale(path: str) -> float:
    """contention.scale of a `calibrate` fragment, or UsageError saying what is wrong with it."""
    import yaml

    try:
        fragment = yaml.safe_load(read_text(path, "--calibration"))
    except yaml.YAMLError as error:
        raise UsageError(f"--calibration {path} is not YAML: {error}") from None
    scale = fragment.get("contention", {}).get("scale") if isinstance(fragment, dict) else None
    if isinstance(fragment, dict) and not isinstance(fragment.get("contention", {}), dict):
        scale = None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale <= 10:
        raise UsageError(f"--calibration {path}: needs contention.scale, a number from 0 to 10 "
                         "(the fragment `gpu-balancer calibrate` writes)")
    return float(scale)


def _simulate_seeds(args: argparse.Namespace, scenario) -> int:
    from sim import seeds as multi
    from sim.report import as_table
    from sim.run import compare

    try:
        seeds = multi.parse_seeds(args.seeds)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.report:
        require_report_pictures("--report")
        writable_directory(args.report, "--report")
    by_seed = {}
    for seed in seeds:
        if sys.stderr.isatty():
            print(f"\rseed {seed} ({seeds.index(seed) + 1}/{len(seeds)})", end="", file=sys.stderr, flush=True)
        by_seed[seed] = compare(scenario, seed)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    summary = multi.aggregate(by_seed)
    print(multi.as_json(scenario.name, seeds, summary) if args.output == "json"
          else as_table(scenario.name, seeds, summary))
    if args.report:
        _write_report(args.report, scenario, by_seed)
    return 0


def require_report_pictures(what: str) -> None:
    """Stop before any work when matplotlib, which draws the report's pictures, is missing: it
    comes with the `sim` extra, which the production image goes without."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{what} draws pictures with matplotlib, which is not installed: "
                         "pip install 'gpu-balancer[sim]'")


def _write_report(directory: str, scenario, by_seed) -> None:
    from sim.report_files import write_report

    for path in write_report(Path(directory), scenario, by_seed):
        print(f"wrote {path}", file=sys.stderr)


def cmd_explain(args: argparse.Namespace) -> int:

    import yaml

    from sim.explain import as_table, check_quantities, context_from_list, explain, nodes_from_list

    # Prometheus is read only with --prometheus-url: a production policy explains offline too.
    policy = load_policy(args.config, args.prometheus_url, reads_prometheus=bool(args.prometheus_url))
    try:
        document = json.loads(read_text(args.cluster_file, "cluster file"))
        nodes = nodes_from_list(document, policy.placement)
    except ValueError as error:
        raise UsageError(f"{args.cluster_file}: {str(error).splitlines()[0]}") from None
    try:
        pod = yaml.safe_load(read_text(args.pod, "pod"))
    except yaml.YAMLError as error:
        raise UsageError(f"{args.pod}: not YAML or JSON: {yaml_problem(error)}") from None
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod" or not (
            isinstance(pod.get("spec"), dict) and isinstance(pod["spec"].get("containers"), list)):
        raise UsageError(f"{args.pod}: expected one Pod with spec.containers (YAML or JSON)")
    if not nodes:
        raise UsageError(f"{args.cluster_file}: no Node objects to explain against "
                         "(expected `kubectl get nodes,pods -A -o json`)")
    try:
        check_quantities(pod, args.pod)
    except ValueError as error:
        raise UsageError(str(error)) from None
    context = context_from_list(document, policy.placement)
    if args.scheduler_config:
        context = replace(context, profile=_scheduler_profile(args.scheduler_config))
    snapshot = read_snapshot(connect(policy.prometheus), policy) if args.prometheus_url else None
    result = explain(pod, nodes, snapshot=snapshot, policy=policy, now=datetime.now(timezone.utc), context=context)
    print(json.dumps(result, indent=2) if args.output == "json" else as_table(result))
    return 0


def _concurrencies(text: str) -> list[int]:
    """An argparse type: a comma-separated list of client counts, 1 to 4,096 each."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not values or not all(1 <= value <= 4096 for value in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each concurrency must be 1 to 4096")
    return values


def window_seconds(text: str) -> float:
    """An argparse type: a Prometheus-style duration (90m, 36h, 7d), 5 minutes to 90 days."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (like 30m, 36h or 7d)")
    seconds = float(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
    if not 300 <= seconds <= 90 * 86400:
        raise argparse.ArgumentTypeError(f"{text} is out of range (5m to 90d)")
    return seconds


def cmd_calibrate(args: argparse.Namespace) -> int:
    import time

    from calibration.estimate import CalibrationError, calibrate, fragment

    if bool(args.prometheus_url) == bool(args.from_simulation):
        raise UsageError("give exactly one of --prometheus-url and --from-simulation")
    if args.from_simulation:
        from sim.calibration_series import channels_of, frames_of, simulated_world
        from sim.scenario import load_scenario

        try:
            scenario = load_scenario(read_text(args.from_simulation, "scenario"))
            frames, channels = frames_of(simulated_world(scenario, args.seed)), channels_of(scenario)
        except (PolicyError, ValueError) as error:
            raise UsageError(f"scenario {args.from_simulation}: {error}") from None
        source = f"simulated {scenario.name}, seed {args.seed}, planted scale {scenario.contention.scale:g}"
    else:
        from calibration.estimate import Channels
        from calibration.reader import read_frames

        policy = load_policy(None, args.prometheus_url)
        end = time.time()
        step = max(args.step, args.window / 10_000)  # Prometheus answers at most 11,000 points a series
        frames = read_frames(connect(policy.prometheus).range, start=end - args.window, end=end, step=step)
        channels, source = Channels(), f"{args.prometheus_url}, the last {args.window / 86400:g} days"
    try:
        result = calibrate(frames, channels)
    except CalibrationError as error:
        raise UsageError(f"{source}: {error}") from None
    if args.write:
        try:
            Path(args.write).write_text(fragment(result), encoding="utf-8")
        except OSError as error:
            raise UsageError(f"--write {args.write}: {error.strerror or error}") from None
    if args.output == "json":
        print(json.dumps({**result.as_json(), "source": source}, indent=2))
        return 0
    lo, hi = result.tpot.interval
    print(f"contention scale {result.tpot.scale:.3g} (95 % interval {lo:.3g}–{hi:.3g}) from {result.tpot.samples} "
          f"replica samples of {result.tpot.replicas} replicas, {result.tpot.exposed} exposed to contention")
    print(f"  TTFT alone says {result.ttft.scale:.3g} ({result.ttft.interval[0]:.3g}–{result.ttft.interval[1]:.3g}); "
          f"channels seen: {', '.join(result.channels)}; source: {source}")
    if args.write:
        print(f"  wrote {args.write}: `gpu-balancer simulate --calibration {args.write}` runs with it")
    return 0


def cmd_serving_curve(args: argparse.Namespace) -> int:
    from sim.llm.curve import serving_curve
    from sim.llm.hardware import GPUS, MODELS, gpu_named, model_named

    if args.list:
        for gpu in GPUS.values():
            print(f"gpu   {gpu.name:18s} {gpu.memory_bytes / 2**30:5.0f} GiB  {gpu.bandwidth_bytes_per_s / 1e9:5.0f} GB/s  "
                  f"{gpu.bf16_flops / 1e12:5.0f} TFLOP/s BF16  DCGM: {', '.join(gpu.aliases)}")
        for model in MODELS.values():
            print(f"model {model.name:18s} {model.parameters / 1e9:5.1f} B parameters  TP {model.tensor_parallel}  "
                  f"{model.weight_bytes / 2**30:5.1f} GiB weights and {model.kv_bytes_per_token / 1024:4.0f} KiB KV "
                  "per token per GPU")
        return 0
    if not args.gpu or not args.model:
        raise UsageError("give --gpu and --model (--list shows the ones known)")
    try:
        gpu, model = gpu_named(args.gpu), model_named(args.model)
        points = serving_curve(gpu, model, args.concurrency, prompt_tokens=args.prompt_tokens,
                               output_tokens=args.output_tokens)
    except (KeyError, ValueError) as error:
        raise UsageError(str(error.args[0])) from None
    if args.output == "json":
        print(json.dumps([point.as_dict() for point in points], indent=2))
        return 0
    print(f"{model.name} on {gpu.name}, {args.prompt_tokens} prompt and {args.output_tokens} output tokens, "
          "closed-loop clients (the replica model of `sim/llm/engine.py`):")
    print(f"{'concurrency':>11s} {'TTFT p50 ms':>12s} {'TTFT p99 ms':>12s} {'TPOT p50 ms':>12s} {'output tok/s':>13s}")
    for point in points:
        print(f"{point.concurrency:11d} {point.ttft_p50_ms:12.1f} {point.ttft_p99_ms:12.1f} {point.tpot_p50_ms:12.2f} "
              f"{point.output_tokens_per_s:13.0f}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gpu_balancer.demo import run_demo

    require_report_pictures("demo")
    writable_directory(args.report_dir, "--report-dir")
    return run_demo(nodes=args.nodes, gpus=args.gpus, seed=args.seed, colour=_wants_colour(sys.stdout),
                    report_dir=args.report_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-balancer", description="GPU-aware placement for Kubernetes.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_telemetry_commands(commands)
    _add_cluster_commands(commands)
    _add_simulator_commands(commands)
    _show_defaults(parser)
    return parser




def _add_telemetry_commands(commands) -> None:
    """status, recording-rules, and the fake exporters."""
    status = commands.add_parser("status", help="the fleet's GPU heat, read from Prometheus")
    status.add_argument("--prometheus-url", help="Prometheus base URL (overrides the policy's)")
    status.add_argument("--config", help="BalancerPolicy YAML file")
    status.add_argument("--output", choices=("table", "json"), default="table")
    status.add_argument("--kubeconfig", help="also show the descheduler's last run, read from its ledger "
                                             "ConfigMap (default: in cluster or $KUBECONFIG when set)")
    status.set_defaults(handler=cmd_status)

    rules = commands.add_parser("recording-rules", help="print the Prometheus recording rules for this policy")
    rules.add_argument("--config", help="BalancerPolicy YAML file")
    rules.add_argument("--format", choices=("rules", "prometheusrule", "mimir"), default="rules",
                       help="a rule file (Prometheus, Thanos Ruler), a PrometheusRule for the Prometheus Operator, "
                            "or a file for `mimirtool rules load`")
    rules.set_defaults(handler=cmd_recording_rules)

    fake = commands.add_parser("fake-dcgm", help="serve a synthetic fleet as dcgm-exporter metrics")
    fake.add_argument("--nodes", type=count(1, 20000), default=8)
    fake.add_argument("--gpus", type=count(1, 16), default=8, help="GPUs per node")
    fake.add_argument("--profile", default="skewed", help="skewed, uniform, idle or failing")
    fake.add_argument("--seed", type=count(0, 2**32 - 1), default=1)
    fake.add_argument("--hostname-label", choices=("Hostname", "hostname"), default="Hostname",
                      help="Hostname (released dcgm-exporter) or hostname (newer main branch)")
    fake.add_argument("--profiling", action="store_true", help="also serve DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    _add_replay_arguments(fake, "every GPU's fields, profiling, clocks and clock-event reasons included,")
    fake.add_argument("--host", default="127.0.0.1")
    fake.add_argument("--port", type=port_number, default=9400)
    fake.set_defaults(handler=cmd_fake_dcgm)

    served = commands.add_parser("fake-serving", help="serve synthetic model-server replicas' queue and latency "
                                 "metrics (vLLM, SGLang, TGI or Triton)")
    served.add_argument("--server", choices=[server.name for server in DEFAULT_SERVERS], default="vllm")
    served.add_argument("--replicas", type=count(1, 100000), default=16)
    served.add_argument("--slow", type=count(0, 100000), default=2, help="how many replicas queue (miss targets)")
    served.add_argument("--nodes", type=count(1, 20000), default=8, help="spread over fake-dcgm's node names")
    served.add_argument("--seed", type=count(0, 2**32 - 1), default=1)
    _add_replay_arguments(served, "every replica's vLLM series")
    served.add_argument("--host", default="127.0.0.1")
    served.add_argument("--port", type=port_number, default=8000)
    served.set_defaults(handler=cmd_fake_serving)


def _add_cluster_commands(commands) -> None:
    """What runs in a cluster: webhook, certs, nvml-exporter, deschedule."""
    hook = commands.add_parser("webhook", help="serve the mutating admission webhook over TLS")
    hook.add_argument("--prometheus-url", help="Prometheus base URL (overrides the policy's)")
    hook.add_argument("--tls-cert", required=True)
    hook.add_argument("--tls-key", required=True)
    hook.add_argument("--host", default="0.0.0.0")
    hook.add_argument("--port", type=port_number, default=8443)
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
    nvml.add_argument("--port", type=port_number, default=9400)
    nvml.add_argument("--host", default="0.0.0.0")
    nvml.add_argument("--interval", type=positive_seconds, default=5.0, help="seconds between GPU reads")
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
    desched.add_argument("--every", type=positive_seconds, metavar="SECONDS",
                         help="loop mode: run every SECONDS and serve /metrics, instead of once")
    desched.add_argument("--metrics-port", type=port_number, default=9402, help="with --every: the /metrics port")
    desched.set_defaults(handler=cmd_deschedule)


def _add_simulator_commands(commands) -> None:
    """simulate, explain, calibrate, serving-curve and demo."""
    simulate = commands.add_parser("simulate", help="compare placement policies on a simulated GPU cluster")
    simulate.add_argument("--scenario", help=f"built-in scenario: {_built_in_scenarios()}")
    simulate.add_argument("--list", action="store_true", help="print the built-in scenarios and the policies, a line "
                          "each, and exit")
    simulate.add_argument("--set", action="append", metavar="KEY=VALUE",
                          help="set a scenario field by its dotted camelCase path (repeatable), e.g. "
                               "contention.scale=0 or serving.model=Mistral-7B; checked as in a scenario file")
    simulate.add_argument("--scenario-file", help="YAML scenario (see README)")
    seed = simulate.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=count(0, 2**32 - 1), default=11)
    seed.add_argument("--seeds", metavar="A-B|N", help="run every seed A..B (or 1..N) and report mean and range")
    simulate.add_argument("--output", choices=("table", "json"), default="table")
    simulate.add_argument("--contention-scale", type=float, metavar="X",
                          help="multiply every contention channel of the serving world by X (0: placement "
                               "cannot change latency); overrides the scenario's contention.scale")
    simulate.add_argument("--calibration", metavar="FILE",
                          help="a fragment `calibrate` wrote: its contention.scale applies (before --contention-scale)")
    simulate.add_argument("--report", help="directory for report.html (pictures inlined), the PNGs and summary.md")
    simulate.add_argument("--scheduler-config", metavar="FILE", help="a KubeSchedulerConfiguration: every "
                          "policy's scheduler runs its default-scheduler profile (plugins off, weights changed)")
    simulate.set_defaults(handler=cmd_simulate)

    explain_cmd = commands.add_parser("explain", help="why would this pod land there? (scheduler model)")
    explain_cmd.add_argument("--cluster-file", required=True, help="output of `kubectl get nodes,pods -A -o json`")
    explain_cmd.add_argument("--pod", required=True, help="the pod, YAML or JSON")
    explain_cmd.add_argument("--prometheus-url", help="with telemetry: also show the placement after the advice")
    explain_cmd.add_argument("--config", help="BalancerPolicy YAML file")
    explain_cmd.add_argument("--output", choices=("table", "json"), default="table")
    explain_cmd.add_argument("--scheduler-config", metavar="FILE", help="a KubeSchedulerConfiguration: explain "
                             "with its default-scheduler profile")
    explain_cmd.set_defaults(handler=cmd_explain)

    cal = commands.add_parser("calibrate", help="how much a node's contention slows its LLM replicas, from a "
                                                "cluster's history (or a simulated run's), as contention.scale")
    cal.add_argument("--prometheus-url", help="the cluster's Prometheus (DCGM and vLLM series)")
    cal.add_argument("--window", type=window_seconds, default="7d", help="how far back to read")
    cal.add_argument("--step", type=positive_seconds, default=60.0, help="seconds between the samples read")
    cal.add_argument("--from-simulation", metavar="FILE", help="a serving-world scenario file: estimate from the "
                                                               "series its run under the stock scheduler exports")
    cal.add_argument("--seed", type=count(0, 2**32 - 1), default=1, help="with --from-simulation")
    cal.add_argument("--write", metavar="FILE", default="calibration.yaml",
                     help="the scenario fragment `simulate --calibration` reads ('' writes none)")
    cal.add_argument("--output", choices=("table", "json"), default="table")
    cal.set_defaults(handler=cmd_calibrate)

    curve = commands.add_parser("serving-curve", help="one LLM replica's latency and throughput against "
                                                     "concurrency (the simulator's replica model)")
    curve.add_argument("--gpu", help="a GPU of --list, or its DCGM modelName")
    curve.add_argument("--model", help="a model of --list")
    curve.add_argument("--concurrency", type=_concurrencies, default=[1, 4, 16, 64], metavar="1,4,16,64")
    curve.add_argument("--prompt-tokens", type=count(1, 131072), default=1024)
    curve.add_argument("--output-tokens", type=count(1, 32768), default=128)
    curve.add_argument("--output", choices=("table", "json"), default="table")
    curve.add_argument("--list", action="store_true", help="print the GPUs and models known, and stop")
    curve.set_defaults(handler=cmd_serving_curve)

    demo = commands.add_parser("demo", help="the whole path on one machine: telemetry, webhook over TLS, "
                                            "descheduler dry-run, policy comparison")
    demo.add_argument("--nodes", type=count(1, 2000), default=16)
    demo.add_argument("--gpus", type=count(1, 16), default=8, help="GPUs per node")
    demo.add_argument("--seed", type=count(0, 2**32 - 1), default=11)
    demo.add_argument("--report-dir", default="reports/demo", help="where the comparison report is written")
    demo.set_defaults(handler=cmd_demo)


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every option with a default says so in its --help, in every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _show_defaults(sub)
        elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS) \
                and "%(default)" not in (action.help or ""):
            action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"


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
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in SIMULATOR_PARTS:
            raise
        print(f"gpu-balancer {args.command}: needs the `sim` extra (the simulator, numpy, matplotlib), which is "
              f"not installed here (no {error.name}): pip install 'gpu-balancer[sim]'", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the last resort: a message, never a traceback
        if os.environ.get("GPU_BALANCER_DEBUG"):
            raise
        print(f"gpu-balancer {args.command}: unexpected error: {type(error).__name__}: {error} "
              "(this is a bug; GPU_BALANCER_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
