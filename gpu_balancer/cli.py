"""The `gpu-balancer` console script: argument parsing and wiring, no decisions (does I/O)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from scoring.heat import fleet_heat
from scoring.policy import BalancerPolicy, PolicyError, default_policy, parse_policy
from scoring.prometheus import TelemetryError, connect, read_snapshot


class UsageError(Exception):
    """Bad input on the command line or in a file it names; exit status 2."""


def load_policy(path: str | None, prometheus_url: str | None = None) -> BalancerPolicy:
    """The policy from `--config` (or the defaults), with `--prometheus-url` applied on top."""
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
    return policy


def _wants_colour(stream) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def cmd_status(args: argparse.Namespace) -> int:
    from gpu_balancer.status_view import heat_as_json, heat_as_table

    policy = load_policy(args.config, args.prometheus_url)
    snapshot = read_snapshot(connect(policy.prometheus), policy)
    fleet = fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc),
                       staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
    if args.output == "json":
        print(heat_as_json(fleet))
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


def cmd_demo(args: argparse.Namespace) -> int:
    from gpu_balancer.demo import run_demo

    return run_demo(nodes=args.nodes, gpus=args.gpus, seed=args.seed, colour=_wants_colour(sys.stdout))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-balancer", description="GPU-aware placement for Kubernetes.")
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

    demo = commands.add_parser("demo", help="fake-dcgm + a local Prometheus + the live heat table")
    demo.add_argument("--nodes", type=int, default=12)
    demo.add_argument("--gpus", type=int, default=8)
    demo.add_argument("--seed", type=int, default=11)
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
