"""Benchmark: what the recording rules cost Prometheus at two snapshot-group intervals, in one run.

Starts a fleet in a local Prometheus with the default policy's recording rules (as
`bench/snapshot_scale.py --recorded` does), then alternates the snapshot group's interval between
`--intervals` (reloading the rules by SIGHUP), and after each change, once the group has run at
the new interval, measures Prometheus's CPU (user + system, from /proc) over `--seconds` with no
reader running: scraping, the three rule groups, and nothing else. The intervals alternate
(A B A B ...), so a drift in the machine's speed falls on both. Linux only.

    .venv/bin/python bench/rule_interval_cost.py [--nodes 15000] [--gpus 8] [--exporters 12] [--intervals 15 30] [--repeats 2] [--seconds 90]

`--repeats` is how many times each interval is measured.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from snapshot_scale import fleet_arguments, fleet_in_prometheus, gpus_in_fleet  # noqa: E402

from scoring.ingest.queries import topology_keys  # noqa: E402
from scoring.ingest.recording import SNAPSHOT_GROUP, recording_rules  # noqa: E402
from scoring.policy import default_policy  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot_group(url: str) -> dict:
    groups = requests.get(f"{url}/api/v1/rules", timeout=30).json()["data"]["groups"]
    return next(g for g in groups if g["name"] == SNAPSHOT_GROUP)


def reload_at(prometheus, interval: int) -> None:
    """The default policy's rules, the snapshot group every `interval` seconds, loaded and run once."""
    policy = default_policy()
    policy = replace(policy, telemetry=replace(policy.telemetry, recording_interval_seconds=float(interval)))
    before = snapshot_group(prometheus.url)["lastEvaluation"]
    prometheus.rule_files[0].write_text(yaml.safe_dump(recording_rules(policy, topology_keys(policy))))
    prometheus.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        group = snapshot_group(prometheus.url)
        if group["interval"] == interval and group["lastEvaluation"] != before:
            return
        time.sleep(1)
    raise TimeoutError(f"the snapshot group did not run at {interval}s")


def main() -> None:
    parser = fleet_arguments(__doc__.splitlines()[0], repeats=2)
    parser.add_argument("--intervals", type=int, nargs="+", default=[15, 30])
    parser.add_argument("--seconds", type=float, default=90.0)
    args = parser.parse_args()
    cores: dict[int, list[float]] = {interval: [] for interval in args.intervals}
    evaluations: dict[int, list[float]] = {interval: [] for interval in args.intervals}
    with fleet_in_prometheus(args.nodes, args.gpus, args.exporters, recorded=True) as prometheus:
        print(f"fleet: {args.nodes} nodes x {args.gpus} GPUs = "
              f"{gpus_in_fleet(args.nodes, args.gpus, args.exporters)} GPUs, scraped every 15 s")
        for _ in range(args.repeats):
            for interval in args.intervals:
                reload_at(prometheus, interval)
                begin, cpu_begin = time.monotonic(), cpu_seconds(prometheus.process.pid)
                time.sleep(args.seconds)
                cores[interval].append((cpu_seconds(prometheus.process.pid) - cpu_begin) / (time.monotonic() - begin))
                evaluations[interval].append(snapshot_group(prometheus.url)["evaluationTime"])
                print(f"  snapshot group every {interval:>3d}s: Prometheus {cores[interval][-1]:.3f} cores over "
                      f"{args.seconds:g}s, the group's last evaluation {evaluations[interval][-1]:.2f}s", flush=True)
    first = args.intervals[0]
    baseline = statistics.fmean(cores[first])
    for interval in args.intervals:
        mean = statistics.fmean(cores[interval])
        # A tiny fleet can leave Prometheus under one clock tick of CPU in the window: no ratio then.
        against = f"{mean / baseline:.2f}x the {first}s interval's CPU" if baseline > 0 else (
            f"the {first}s interval's CPU was under one clock tick, no ratio")
        print(f"snapshot group every {interval}s: Prometheus mean {mean:.3f} cores "
              f"(range {min(cores[interval]):.3f}-{max(cores[interval]):.3f}), an evaluation "
              f"{statistics.fmean(evaluations[interval]):.2f}s; {against}")


if __name__ == "__main__":
    main()
