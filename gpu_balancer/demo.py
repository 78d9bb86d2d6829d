"""`gpu-balancer demo`: a skewed fake fleet, a local Prometheus scraping it, and the live heat table (I/O)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from prometheus_client.parser import text_string_to_metric_families

from gpu_balancer.local_prometheus import LocalPrometheus, PrometheusNotInstalled, ScrapeTarget
from gpu_balancer.status_view import heat_as_table
from scoring import dcgm
from scoring.heat import fleet_heat
from scoring.policy import default_policy
from scoring.prometheus import connect, read_snapshot
from scoring.series import series_from_families, snapshot_from_readings
from sim.dcgm_text import render_exposition
from sim.fake_dcgm import make_server, serve_in_background
from sim.fleet import FleetSpec, generate_fleet


def run_demo(*, nodes: int, gpus: int, seed: int, colour: bool) -> int:
    spec = FleetSpec(nodes=nodes, gpus_per_node=gpus, profile="failing", seed=seed)
    body = render_exposition(generate_fleet(spec), profiling=True)
    server = make_server(body, port=0)
    serve_in_background(server)
    policy = default_policy()
    now = datetime.now(timezone.utc)
    print(f"fake-dcgm serving {nodes} nodes x {gpus} GPUs (skewed, one failing GPU, one node short of "
          f"GPU memory) on http://127.0.0.1:{server.server_port}/metrics")
    try:
        with LocalPrometheus([ScrapeTarget(f"127.0.0.1:{server.server_port}")]) as prometheus:
            print(f"Prometheus scraping it at {prometheus.url}; waiting for the first scrape...")
            prometheus.wait_for(dcgm.FB_USED, at_least=nodes * gpus)
            policy = replace(policy, prometheus=replace(policy.prometheus, url=prometheus.url))
            snapshot = read_snapshot(connect(policy.prometheus), policy)
    except PrometheusNotInstalled:
        print("Prometheus is not installed here, so the snapshot is read straight from fake-dcgm's text "
              "(install Debian's `prometheus` package for the real path).")
        readings = series_from_families(text_string_to_metric_families(body))
        snapshot = snapshot_from_readings(readings, taken_at=now, newest_sample_at=now)
    finally:
        server.shutdown()
    fleet = fleet_heat(snapshot, policy.heat, now=datetime.now(timezone.utc),
                       staleness_limit_seconds=policy.telemetry.staleness_limit_seconds)
    print()
    print(heat_as_table(fleet, colour=colour))
    return 0
