"""How much a node slows the LLM replicas on it, estimated from what exporters report: frames of
DCGM and vLLM readings in, a contention scale with a 95 % interval out. Pure (NumPy).

The model is the serving world's (`sim.llm.world`): a replica's engine step is stretched by
s = 1 + scale × exposure, where the exposure at scale 1 adds the node's channels as its series
show them — host cores short (replicas and training workers counted against the node's
allocatable CPU), GPU power over the node's budget, and a PCIe switch shared with a GPU that
serves nothing (a training worker, or a replica still loading). At a given batch (vLLM's
`num_requests_running`) TPOT is the step time, so within one workload on one GPU model

    log TPOT = f(batch) + log(1 + scale × exposure)

`f` is a cubic in log(1 + batch) per workload and GPU model; `scale` is found by least squares
over a grid refined by golden section, its interval from the slope's standard error clustered by
replica (a linearisation at the estimate). TTFT gets the same fit, with the queue's wait folded
into `f` only as far as the batch tracks it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MAX_SCALE = 10.0
"""The top of the search, and of `simulate --contention-scale`."""


@dataclass(frozen=True)
class Channels:
    """The contention channels at scale 1: the serving world's defaults (`sim.scenario.ContentionShape`
    names each one's source); a test holds the two equal."""

    host_cores_per_replica: float = 2.0
    training_cores_per_worker: float = 32.0
    gpu_power_budget_share: float = 0.77
    power_sensitivity: float = 0.45
    gpus_per_pcie_switch: int = 2
    pcie_penalty: float = 0.05
    training_power_share: float = 0.5
    """A GPU that serves nothing and draws over this share of its limit is a training worker's
    (one that draws less is a replica loading its weights): assumption."""


@dataclass(frozen=True)
class GpuReading:
    index: int
    pod: str | None
    """`namespace/name` of the pod the GPU is assigned to, or None."""
    watts: float
    limit_watts: float | None
    """DCGM_FI_DEV_POWER_MGMT_LIMIT where exported."""


@dataclass(frozen=True)
class ReplicaReading:
    pod: str
    served_model: str
    """vLLM's `model_name` label."""
    tpot_s: float
    ttft_s: float
    running: float
    kv_usage: float


@dataclass(frozen=True)
class NodeFrame:
    """One node at one instant: its GPUs (all of them, or the power channel is unknown) and the
    replicas serving on it."""

    model: str
    gpus: tuple[GpuReading, ...]
    replicas: tuple[ReplicaReading, ...]
    allocatable_cores: float | None = None
    complete: bool = True
    """False when some GPU's scrape is missing: the node's power cannot be summed."""
    serving: frozenset[str] = frozenset()
    """Pods exporting serving series, with or without a latency to read this instant (a replica's
    first scrape has no rate yet); the replicas' pods count whether or not they are listed."""


Frame = Mapping[str, NodeFrame]
"""Every node at one instant."""


@dataclass(frozen=True)
class Sample:
    pod: str
    group: str
    running: float
    kv_usage: float
    tpot_s: float
    ttft_s: float
    exposure: float


@dataclass(frozen=True)
class Estimate:
    scale: float
    interval: tuple[float, float]
    samples: int
    exposed: int
    """Samples whose exposure is above zero: the ones that carry the signal."""
    replicas: int


@dataclass(frozen=True)
class Calibration:
    tpot: Estimate
    ttft: Estimate
    channels: tuple[str, ...]
    """The channels the series could show (power needs limits, host CPU needs allocatable cores)."""

    def as_json(self) -> dict:
        return {"contention_scale": round(self.tpot.scale, 4),
                "interval": [round(self.tpot.interval[0], 4), round(self.tpot.interval[1], 4)],
                "samples": self.tpot.samples, "exposed_samples": self.tpot.exposed, "replicas": self.tpot.replicas,
                "ttft_contention_scale": round(self.ttft.scale, 4),
                "ttft_interval": [round(self.ttft.interval[0], 4), round(self.ttft.interval[1], 4)],
                "channels": list(self.channels), "estimated_from": "TPOT against the batch and KV-cache fill, per GPU model and served model"}


class CalibrationError(ValueError):
    """The series cannot carry an estimate (too few samples, or none exposed to contention)."""


def exposures(frame: NodeFrame, channels: Channels = Channels()) -> dict[str, float]:
    """Each serving replica's exposure on this node at scale 1 (CPU + power + PCIe)."""
    serving = frame.serving | {r.pod for r in frame.replicas}
    cpu = power = 0.0
    if frame.allocatable_cores:
        cores = 0.0
        for pod, gpus in _pods(frame.gpus).items():
            if pod in serving or not _draws_like_training(gpus, channels):
                cores += channels.host_cores_per_replica
            else:
                cores += channels.training_cores_per_worker
        cpu = max(0.0, cores / frame.allocatable_cores - 1)
    limits = [g.limit_watts for g in frame.gpus]
    if frame.complete and frame.gpus and all(limits):
        budget = channels.gpu_power_budget_share * sum(limits)
        power = max(0.0, sum(g.watts for g in frame.gpus) / budget - 1) * channels.power_sensitivity
    switch = channels.gpus_per_pcie_switch
    noisy = {g.index // switch for g in frame.gpus if g.pod is not None and g.pod not in serving}
    out = {}
    listed = {r.pod for r in frame.replicas}
    for pod, gpus in _pods(frame.gpus).items():
        if pod in listed:
            shared = any(g.index // switch in noisy for g in gpus)
            out[pod] = cpu + power + (channels.pcie_penalty if shared else 0.0)
    return out


def _pods(gpus: Iterable[GpuReading]) -> dict[str, list[GpuReading]]:
    out: dict[str, list[GpuReading]] = {}
    for g in gpus:
        if g.pod is not None:
            out.setdefault(g.pod, []).append(g)
    return out


def _draws_like_training(gpus: Sequence[GpuReading], channels: Channels) -> bool:
    return all(g.limit_watts and g.watts > channels.training_power_share * g.limit_watts for g in gpus)


def samples_of(frames: Iterable[Frame], channels: Channels = Channels()) -> list[Sample]:
    """One sample per serving replica per frame, where its TPOT and TTFT are positive."""
    out = []
    for frame in frames:
        for node in frame.values():
            exposure = exposures(node, channels)
            for r in node.replicas:
                if r.pod in exposure and r.tpot_s > 0 and r.ttft_s > 0 and math.isfinite(r.tpot_s + r.ttft_s):
                    out.append(Sample(r.pod, f"{node.model}/{r.served_model}", r.running, r.kv_usage, r.tpot_s,
                                      r.ttft_s, exposure[r.pod]))
    return out


def channels_seen(frames: Sequence[Frame]) -> tuple[str, ...]:
    nodes = [n for f in frames for n in f.values()]
    seen = ["pcie"]
    if any(n.gpus and all(g.limit_watts for g in n.gpus) for n in nodes):
        seen.append("power")
    if any(n.allocatable_cores for n in nodes):
        seen.append("host-cpu")
    return tuple(sorted(seen))


def calibrate(frames: Sequence[Frame], channels: Channels = Channels()) -> Calibration:
    samples = samples_of(frames, channels)
    return Calibration(estimate(samples, "tpot_s"), estimate(samples, "ttft_s"), channels_seen(frames))


def estimate(samples: Sequence[Sample], latency: str = "tpot_s") -> Estimate:
    """The scale that best explains log latency given the batch, with its 95 % interval."""
    if len(samples) < 20:
        raise CalibrationError(f"{len(samples)} replica samples: too few to estimate from (20 at least)")
    exposure = np.asarray([s.exposure for s in samples])
    exposed = int((exposure > 0).sum())
    if exposed == 0:
        raise CalibrationError(f"none of the {len(samples)} replica samples was exposed to contention (no "
                               "node's CPU, power or PCIe channel was ever loaded): the scale cannot be seen")
    y = np.log([getattr(s, latency) for s in samples])
    projector = _GroupProjector([s.group for s in samples], np.log1p([max(0.0, s.running) for s in samples]),
                                np.asarray([s.kv_usage for s in samples]))
    grid = np.linspace(0.0, MAX_SCALE, 201)
    rss = projector.residual_ss(y[:, None] - np.log1p(exposure[:, None] * grid[None, :]))
    best = int(np.argmin(rss))
    low, high = grid[max(0, best - 1)], grid[min(len(grid) - 1, best + 1)]
    scale = float(_golden(lambda k: float(projector.residual_ss((y - np.log1p(exposure * k))[:, None])[0]), low, high))
    # Linearised at the estimate: the residual against the model's slope in the scale, both with
    # each group's batch curve taken out, the variance clustered by replica.
    residual = projector.residual(y - np.log1p(exposure * scale))
    slope = projector.residual(exposure / (1 + exposure * scale))
    denominator = float(slope @ slope)
    pods = [s.pod for s in samples]
    scale = round(scale, 6)  # the search's last digits are noise; and no -0.0 or 1e-10 to print
    if denominator <= 0:
        return Estimate(scale, (0.0, MAX_SCALE), len(samples), exposed, len(set(pods)))
    scores: dict[str, float] = {}
    for pod, value in zip(pods, slope * residual):
        scores[pod] = scores.get(pod, 0.0) + float(value)
    clusters = len(scores)
    correction = clusters / (clusters - 1) if clusters > 1 else 1.0
    error = math.sqrt(correction * sum(v * v for v in scores.values())) / denominator
    return Estimate(scale, (max(0.0, round(scale - 1.96 * error, 6)), min(MAX_SCALE, round(scale + 1.96 * error, 6))),
                    len(samples), exposed, clusters)


class _GroupProjector:
    """Takes each group's step-time curve out of columns of values: cubics in the batch and in
    the KV cache's fill (a step reads the weights once and every cached token's KV)."""

    def __init__(self, groups: Sequence[str], batch: np.ndarray, kv: np.ndarray) -> None:
        members: dict[str, list[int]] = {}
        for i, g in enumerate(groups):
            members.setdefault(g, []).append(i)
        self._parts = []
        for group in sorted(members):
            rows = np.asarray(members[group])
            columns = [np.ones(len(rows))]
            for feature in (batch[rows], kv[rows]):
                centred = feature - feature.mean()
                columns.extend(centred ** power for power in (1, 2, 3))
            basis = np.column_stack(columns)
            q, r = np.linalg.qr(basis)
            q = q[:, np.abs(np.diag(r)) > 1e-9 * max(1.0, np.abs(r).max())]  # drop features the group never varies
            self._parts.append((rows, q))

    def residual(self, values: np.ndarray) -> np.ndarray:
        out = np.array(values, dtype=float)
        for rows, q in self._parts:
            out[rows] = values[rows] - q @ (q.T @ values[rows])
        return out

    def residual_ss(self, columns: np.ndarray) -> np.ndarray:
        total = np.zeros(columns.shape[1])
        for rows, q in self._parts:
            part = columns[rows]
            total += (part * part).sum(axis=0) - ((q.T @ part) ** 2).sum(axis=0)
        return total


def _golden(f, low: float, high: float, steps: int = 40) -> float:
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def fragment(calibration: Calibration) -> str:
    """The scenario fragment `simulate --calibration` reads."""
    lo, hi = calibration.tpot.interval
    return (f"# gpu-balancer calibrate: {calibration.tpot.samples} replica samples, "
            f"{calibration.tpot.exposed} exposed to contention; 95 % interval {lo:.3g}-{hi:.3g}\n"
            f"contention:\n  scale: {calibration.tpot.scale:.4g}\n")
