"""What a real Prometheus alone costs to hand over the snapshot's per-GPU rows, against the
per-node records and per-pod rows a recorded refresh reads instead. Prints figures; its I/O is the
local Prometheus and exporters it starts.

    .venv/bin/python bench/series_cost.py [--nodes 5000] [--gpus 8] [--exporters 10] [--repeats 3]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).parent))
from snapshot_scale import fleet_arguments, fleet_in_prometheus, gpus_in_fleet  # noqa: E402

from scoring import dcgm  # noqa: E402
from scoring.ingest import recording  # noqa: E402
from scoring.ingest.queries import REPLACEMENT_ROWS, snapshot_queries, topology_keys  # noqa: E402
from scoring.policy import default_policy  # noqa: E402


def main() -> None:
    args = fleet_arguments(__doc__.splitlines()[0], repeats=3).parse_args()
    policy = default_policy()
    keys = topology_keys(policy)
    total = gpus_in_fleet(args.nodes, args.gpus, args.exporters)
    with fleet_in_prometheus(args.nodes, args.gpus, args.exporters, recorded=True) as prometheus:
        queries = snapshot_queries(policy.prometheus.selector_matchers, lookback_seconds=600,
                                   busy=policy.telemetry.busy, topology_keys=keys)
        summed = f'{{__name__=~"{dcgm.FB_USED}|{dcgm.FB_FREE}|{dcgm.POWER_USAGE}"}}'
        framebuffer = f'{{__name__=~"{dcgm.FB_USED}|{dcgm.FB_FREE}"}}'
        per_node = ", ".join(dcgm.NODE_LABEL_CANDIDATES)
        ours = recording.fingerprint(policy, keys)
        copies = recording.record_selector("unit_copies", ours)
        variants = {"recorded per-GPU rows (unit_copies)": copies,
                    "only counting them (count)": f"count({copies})",
                    # What a recorded refresh reads in their place.
                    **{f"recorded {name}": recording.record_selector(name, ours) for name in REPLACEMENT_ROWS},
                    # The raw `sums` and `fb_counts` queries as issue 18 left them (each GPU once) and as
                    # they were (each series once).
                    "raw sums, each GPU once": queries["sums"],
                    "raw sums, each series once": f"sum by (__name__, {per_node}) ({summed})",
                    "raw fb_counts, each GPU once": queries["fb_counts"],
                    "raw fb_counts, each series once": f"count by (__name__, {per_node}) ({framebuffer})",
                    # Memory room (issue 32): raw, and as the rules record it.
                    "raw fb_placeable_used": queries["fb_placeable_used"],
                    "recorded fb_placeable_used": recording.record_selector("fb_placeable_used", ours),
                    # Degraded GPUs (issue 47, item 3): every GPU's clock under load against its
                    # model's median, beside another signal's per-GPU scan (power-capped clocks).
                    "raw power_capped": queries["power_capped"],
                    "raw degraded_clocks": queries["degraded_clocks"],
                    "raw peer_clocks": queries["peer_clocks"],
                    "recorded degraded_clocks": recording.record_selector("degraded_clocks", ours),
                    # Its memory (an hour), as a recorded read asks it: max_over_time of the record. (The
                    # raw read's subquery evaluates the raw query a dozen times over an hour of samples,
                    # which a fleet loaded minutes ago does not have, so it is not timed here.)
                    "recorded degraded_clocks remembered": recording.recorded_query(
                        "degraded_clocks", queries["degraded_clocks"], ours, memory_seconds=3600),
                    # PCIe neighbours (issue 47, item 2): every GPU's bytes, mapped to switches.
                    "raw pcie_busy_switches": queries["pcie_busy_switches"],
                    "raw pcie_free_gpus": queries["pcie_free_gpus"],
                    "recorded pcie_busy_switches": recording.record_selector("pcie_busy_switches", ours)}
        session = requests.Session()
        print(f"{args.nodes} nodes x {args.gpus} GPUs = {total} GPUs; medians of {args.repeats}")
        for label, promql in variants.items():
            serve, decode, size = [], [], 0
            for _ in range(args.repeats):
                begin = time.perf_counter()
                body = session.get(prometheus.url + "/api/v1/query", params={"query": promql}, timeout=60).content
                served = time.perf_counter()
                json.loads(body)
                serve.append(served - begin)
                decode.append(time.perf_counter() - served)
                size = len(body)
            print(f"  {label:38s} Prometheus + HTTP {1000 * statistics.median(serve):6.0f} ms, "
                  f"JSON decode {1000 * statistics.median(decode):5.0f} ms, {size / 1e6:5.1f} MB")


if __name__ == "__main__":
    main()
