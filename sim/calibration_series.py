"""What a simulated serving-world run exports, as the frames `calibration.estimate` reads — DCGM
power, its limit and the pod of every GPU scraped, vLLM's TPOT and TTFT means and batch per ready
replica, each node's allocatable cores — and as OpenMetrics text with timestamps, for a real
Prometheus to hold. Pure (runs the simulator)."""

from __future__ import annotations

import random
from collections import defaultdict

from calibration.estimate import Channels, Frame, GpuReading, NodeFrame, ReplicaReading
from sim.world_state import World
from sim.llm.world import gpu_of_node, tdp_w
from sim.policies import Stock
from sim.run import run_policy
from sim.scenario import Scenario


class _Watched(Stock):
    """The stock scheduler, keeping the world it places in, so its exports can be read after."""

    world: World | None = None

    def place(self, world: World, pod):
        self.world = world
        return super().place(world, pod)


def simulated_world(scenario: Scenario, seed: int) -> World:
    """The scenario's world after a run under the stock scheduler (the cluster as it is)."""
    watched = _Watched(random.Random(seed * 7 + 3))
    run_policy(scenario, "stock", seed, policy=watched)
    assert watched.world is not None  # tick 0 always places the fleet
    return watched.world


def channels_of(scenario: Scenario) -> Channels:
    co = scenario.contention
    return Channels(host_cores_per_replica=co.host_cores_per_replica,
                    training_cores_per_worker=co.training_cores_per_worker,
                    gpu_power_budget_share=co.gpu_power_budget_share, power_sensitivity=co.power_sensitivity,
                    gpus_per_pcie_switch=co.gpus_per_pcie_switch, pcie_penalty=co.pcie_penalty)


def frames_of(world: World) -> list[Frame]:
    """Every tick's exports, node by node (a GPU whose scrape was missed is absent)."""
    frames, model = [], world.scenario.serving.model
    for per_gpu, readings, serving in zip(world.gpu_util, world.gpu_readings, world.serving):
        replicas: dict[str, list[ReplicaReading]] = defaultdict(list)
        for key, state in serving.items():
            if state.tpot_mean_s is not None:
                replicas[state.node].append(ReplicaReading(key, model, state.tpot_mean_s, state.ttft_mean_s,
                                                           state.running or 0.0, state.kv_usage or 0.0))
        frame = {}
        for node, gpus in per_gpu.items():
            gpu = gpu_of_node(world, node)
            limit = tdp_w(gpu)
            seen = [GpuReading(index, reported[1], readings[node][index].power_w, limit)
                    for index, reported in sorted(gpus.items()) if reported is not None]
            scraped = {g.pod for g in seen}
            frame[node] = NodeFrame(gpu.aliases[0], tuple(seen),
                                    tuple(r for r in replicas.get(node, ()) if r.pod in scraped),
                                    float(world.nodes[node].allocatable.get("cpu", 0)) or None,
                                    complete=len(seen) == len(gpus))
        frames.append(frame)
    return frames


REQUESTS_PER_TICK = 100
"""What the export counts into each replica's histograms a tick: the tick's mean is what a rate
over the tick reads back, whatever the count (the export keeps no request counts)."""


def openmetrics(world: World, start: float) -> str:
    """The run's exports as OpenMetrics text, tick t at `start + t × tick`: DCGM power and limit per
    GPU scraped, vLLM's batch, KV fill and TPOT / TTFT histograms (+Inf bucket, sum and count)
    per ready replica, kube-state-metrics' allocatable cores per node."""
    dt = world.scenario.tick_seconds
    gauges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    histograms: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    model = world.scenario.serving.model
    previous: set[tuple[str, str]] = set()
    for tick, frame in enumerate(frames_of(world)):
        at = f"{start + tick * dt:.3f}"
        for node, nf in frame.items():
            gauges["kube_node_status_allocatable"][f'node="{node}",resource="cpu",unit="core"'].append(
                f"{nf.allocatable_cores or 0:g} {at}")
            for g in nf.gpus:
                pod = f',namespace="{g.pod.split("/")[0]}",pod="{g.pod.split("/")[1]}"' if g.pod else ""
                labels = f'Hostname="{node}",gpu="{g.index}",modelName="{nf.model}"{pod}'
                gauges["DCGM_FI_DEV_POWER_USAGE"][labels].append(f"{g.watts:.3f} {at}")
                gauges["DCGM_FI_DEV_POWER_MGMT_LIMIT"][labels].append(f"{g.limit_watts:g} {at}")
            for r in nf.replicas:
                namespace, name = r.pod.split("/")
                labels = f'model_name="{model}",namespace="{namespace}",pod="{name}"'
                gauges["vllm:num_requests_running"][labels].append(f"{r.running:.4f} {at}")
                gauges["vllm:kv_cache_usage_perc"][labels].append(f"{r.kv_usage:.6f} {at}")
                for family, value in (("vllm:time_per_output_token_seconds", r.tpot_s),
                                      ("vllm:time_to_first_token_seconds", r.ttft_s)):
                    total = totals[family, labels]
                    total[0] += REQUESTS_PER_TICK
                    total[1] += REQUESTS_PER_TICK * value
                    histograms[family][labels].extend([
                        f'{family}_bucket{{{labels},le="+Inf"}} {total[0]:g} {at}',
                        f"{family}_count{{{labels}}} {total[0]:g} {at}",
                        f"{family}_sum{{{labels}}} {total[1]:.9g} {at}"])
        now = {(f, labels) for f, series in gauges.items() for labels, points in series.items()
               if points[-1].endswith(f" {at}")} | {
            (f, labels) for f, series in histograms.items() for labels, lines in series.items()
            if lines[-1].endswith(f" {at}")}
        # A series gone from a scrape is marked stale at once, as Prometheus marks it (backfilled
        # blocks get no markers): NaN here, which the reader skips. Left alone, a pod that left
        # its GPU would haunt it for the five minutes of lookback.
        for family, labels in sorted(previous - now):
            if family in gauges:
                gauges[family][labels].append(f"NaN {at}")
            else:
                histograms[family][labels].extend(f"{family}_{part}{{{labels}{extra}}} NaN {at}" for part, extra in
                                                  (("bucket", ',le="+Inf"'), ("count", ""), ("sum", "")))
        previous = now
    lines = []
    for family, series in gauges.items():
        lines.append(f"# TYPE {family} gauge")
        lines.extend(f"{family}{{{labels}}} {point}" for labels, points in series.items() for point in points)
    for family, series in histograms.items():
        lines.append(f"# TYPE {family} histogram")
        lines.extend(line for lines_of in series.values() for line in lines_of)
    return "\n".join(lines) + "\n# EOF\n"
