"""Where a policy puts GPU pods, traced through one run: how many replicas sit on the batch pods' nodes at
each descheduler pass (where the scenario has CPU neighbours), and how many placed after the first
minutes had a free node holding their image and landed on one. Runs the simulator (CPU only; prints
figures, no other I/O).

    .venv/bin/python bench/placement_trace.py --scenario llm-cpu-neighbours --policies gpu-balancer,true-state --seed 1
    .venv/bin/python bench/placement_trace.py --scenario llm-tp-disagg --policies stock,gpu-balancer --seed 2
    .venv/bin/python bench/placement_trace.py --policies stock,gpu-balancer,true-state --seeds 1-8 --jobs 2

The probe wraps the policy object's own `place` and `deschedule`; what they decide is unchanged.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.node_state import image_name  # noqa: E402
from sim.policies import make_policy  # noqa: E402
from sim.run import run_policy  # noqa: E402
from sim.scenario import named  # noqa: E402
from sim.seeds import parse_seeds  # noqa: E402

SETTLED_SECONDS = 300.0
"""Placements from this time on are counted (`--after-seconds`): the fleet's first placement
precedes any telemetry."""


@dataclass
class Trace:
    on_batch_nodes: list[tuple[float, int, int]] = field(default_factory=list)
    """(minute, replicas of services without CPU limits, of them on a node with batch pods)."""
    placed: int = 0
    placed_unlimited: int = 0
    placed_on_batch_nodes: int = 0
    image_free_somewhere: int = 0
    landed_on_image: int = 0


def _free_with_image(world, pod) -> bool:
    image, need = image_name(pod.obj["spec"]["containers"][0]["image"]), _gpus_of(pod.obj)
    for node in world.nodes.values():
        held = sum(_gpus_of(p) for p in node.pods.values())
        if image in node.images and not node.unschedulable and node.allocatable.get("nvidia.com/gpu", 0) - held >= need:
            return True
    return False


def _gpus_of(obj: dict) -> int:
    """Whole GPUs the pod object asks for."""
    return sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) for c in obj["spec"]["containers"])


def traced(scenario, policy_name: str, seed: int, after: float = SETTLED_SECONDS) -> tuple[Trace, dict[str, float]]:
    trace, policy = Trace(), make_policy(policy_name, seed)
    place, deschedule = policy.place, policy.deschedule

    def unlimited(world, pod) -> bool:
        return pod.service is not None and pod.service not in world.llm.host.limited_services

    def probed_place(world, pod):
        counted = world.now_seconds >= after and _gpus_of(pod.obj) > 0  # every GPU pod: a group's follower too
        free_with_image = counted and _free_with_image(world, pod)
        node = place(world, pod)
        if node is not None and counted:
            trace.placed += 1
            if world.llm.host.enabled and unlimited(world, pod):
                trace.placed_unlimited += 1
                trace.placed_on_batch_nodes += node in world.llm.host.batch_nodes
            trace.image_free_somewhere += free_with_image
            image = image_name(pod.obj["spec"]["containers"][0]["image"])
            trace.landed_on_image += free_with_image and image in world.nodes[node].images
        return node

    def probed_deschedule(world):
        if world.llm.host.enabled:
            replicas = [p for p in world.pods.values() if p.node and unlimited(world, p)]
            trace.on_batch_nodes.append((world.now_seconds / 60, len(replicas),
                                         sum(p.node in world.llm.host.batch_nodes for p in replicas)))
        return deschedule(world)

    policy.place, policy.deschedule = probed_place, probed_deschedule
    return trace, run_policy(scenario, policy_name, seed, policy=policy).metrics


def _one(job: tuple[str, float | None, str, int, float]) -> tuple[str, int, Trace, dict[str, float]]:
    scenario_name, hours, name, seed, after = job
    scenario = named(scenario_name)
    if hours is not None:
        scenario = replace(scenario, hours=hours)
    return (name, seed, *traced(scenario, name, seed, after))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="llm-cpu-neighbours")
    parser.add_argument("--policies", default="gpu-balancer,true-state")
    parser.add_argument("--seed", type=int, default=None, help="one seed (default 1)")
    parser.add_argument("--seeds", default=None, help="A-B or N: several, with a summary per policy")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--after-seconds", type=float, default=SETTLED_SECONDS,
                        help="count placements from this simulated time on")
    parser.add_argument("--hours", type=float, default=None, help="shorten the run (tests)")
    args = parser.parse_args()
    if args.seed is not None and args.seeds is not None:
        parser.error("--seed and --seeds: give one of them")
    seeds = parse_seeds(args.seeds) if args.seeds is not None else [args.seed if args.seed is not None else 1]
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    jobs = [(args.scenario, args.hours, name, seed, args.after_seconds) for seed in seeds for name in names]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        found = {(name, seed): (trace, metrics) for name, seed, trace, metrics in pool.map(_one, jobs)}
    for seed in seeds:
        print(f"{args.scenario}, seed {seed}")
        for name in names:
            trace, metrics = found[name, seed]
            print(f"{name}: TTFT p99 {metrics['ttft_p99_ms']:,.0f} ms; GPU pods placed from minute "
                  f"{args.after_seconds / 60:g}: {trace.placed}, {trace.image_free_somewhere} with a free node holding "
                  f"their image, {trace.landed_on_image} of those landed on one")
            if trace.on_batch_nodes:
                passes = ", ".join(f"{m:.0f} min {on}/{n}" for m, n, on in trace.on_batch_nodes[::6])
                print(f"  services without CPU limits: {trace.placed_on_batch_nodes} of the {trace.placed_unlimited} "
                      f"placed went to nodes with batch pods; on such nodes (every sixth pass): {passes}")
    if len(seeds) > 1 and any(found[key][0].on_batch_nodes for key in found):
        print("services without CPU limits, per seed: replicas on nodes with batch pods at the first descheduler "
              "pass (placed before any telemetry), and their TTFT p99 ms")
        for name in names:
            runs = [found[name, seed] for seed in seeds]
            cells = "; ".join(f"{trace.on_batch_nodes[0][2] if trace.on_batch_nodes else 0} / "
                              f"{metrics.get('ttft_p99_unlimited_ms', 0.0):,.0f}" for trace, metrics in runs)
            print(f"  {name:14s} {cells}; placed from minute {args.after_seconds / 60:g}: "
                  f"{sum(t.placed_on_batch_nodes for t, _ in runs)} of {sum(t.placed_unlimited for t, _ in runs)} "
                  f"on such nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
