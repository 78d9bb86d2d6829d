"""The webhook's cluster view on a DRA fleet: what claim events and freezes cost at 15,000 nodes ×
8 GPUs with one claim per GPU, against the same fleet on the device plugin. Feeds `ClusterWatch`
the objects directly (no HTTP), so it times the view, not the API. Prints figures; no I/O.

    .venv/bin/python bench/dra_view_scale.py [--nodes 15000] [--gpus 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scoring.policy import PlacementPolicy  # noqa: E402
from tests.dra_objects import claim, exactly, gpu_slice  # noqa: E402
from webhook.cluster_watch import ClusterWatch  # noqa: E402

NOW = datetime.now(timezone.utc)


def fleet(nodes: int, gpus: int, dra: bool) -> tuple[ClusterWatch, float]:
    """A synced watch holding the fleet, fed through its public list and event calls; and the
    seconds its claim events took."""
    watch = ClusterWatch(client.ApiClient(client.Configuration()), PlacementPolicy(), clock=lambda: NOW)
    plugin = {} if dra else {"nvidia.com/gpu": str(gpus)}
    watch.on_list("nodes", [{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "96", **plugin}}}
                            for i in range(nodes)])
    watch.on_list("resourceslices", [gpu_slice(f"n{i}", gpus) for i in range(nodes)] if dra else [])
    watch.on_list("resourceclaimtemplates", [])
    watch.on_list("resourceclaims", [])
    claims = 0.0
    pods = []
    for i in range(nodes):
        for g in range(gpus):
            if dra:
                begin = time.perf_counter()
                watch.on_event("resourceclaims", "ADDED", claim(f"p{i}-{g}", exactly(), allocated=[(f"n{i}", f"gpu-{g}")]))
                claims += time.perf_counter() - begin
            limits = {} if dra else {"nvidia.com/gpu": "1"}
            pods.append({"metadata": {"name": f"p{i}-{g}", "namespace": "ml"}, "spec": {
                "nodeName": f"n{i}", "containers": [{"name": "c", "resources": {"limits": limits}}]},
                "status": {"phase": "Running"}})
    watch.on_list("pods", pods)
    return watch, claims


def timed_freeze(watch: ClusterWatch, change) -> float:
    """The freeze after `change` (a watch event), timed alone."""
    change()
    begin = time.perf_counter()
    watch.freeze()
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    node = {"metadata": {"name": "n0"}, "status": {"allocatable": {"cpu": "96"}}}
    for dra in (True, False):
        watch, claims = fleet(args.nodes, args.gpus, dra)
        label = "DRA" if dra else "device plugin"
        first = timed_freeze(watch, lambda: None)
        after_pod = timed_freeze(watch, lambda: None)
        after_node = timed_freeze(watch, lambda w=watch: w.on_event("nodes", "MODIFIED", node))
        line = (f"{label:14s} freeze: first {first * 1000:5.0f} ms, after a pod event {after_pod * 1000:4.0f} ms, "
                f"after a node event {after_node * 1000:4.0f} ms")
        if dra:
            after_slice = timed_freeze(watch, lambda w=watch: w.on_event("resourceslices", "MODIFIED",
                                                                           gpu_slice("n0", args.gpus)))
            line += (f", after a slice change {after_slice * 1000:4.0f} ms; "
                     f"a claim event {claims / (args.nodes * args.gpus) * 1e6:.0f} µs")
        print(line)


if __name__ == "__main__":
    main()
