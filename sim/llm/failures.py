"""GPU failures and node losses in the serving world (`conditions.failures`): when they come, what
they take, and what the exporters show. Pure, no I/O.

Events arrive as Poisson processes at the scenario's rates, drawn once from a generator of their
own so the condition leaves every other draw as it was. At the published rates a two-hour run on
768 GPUs expects about 0.016 GPU failures and 0.004 node losses: most seeds see none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.scenario import Failures

XID_DOUBLE_BIT_ECC = 48
"""An uncorrectable (double-bit) ECC error: the HBM failures. The GPU stays listed with the XID."""
XID_FALLEN_OFF_BUS = 79
"""The GPU has fallen off the bus: NVML no longer sees it, so its series vanish."""


@dataclass(frozen=True)
class GpuFailure:
    at_seconds: float
    node: str
    gpu: int
    xid: int
    until_seconds: float


@dataclass(frozen=True)
class NodeLoss:
    at_seconds: float
    node: str
    until_seconds: float


@dataclass
class FailurePlan:
    """Every failure of the run, in time order, and those under way."""

    shape: Failures = field(default_factory=Failures)
    gpu_failures: tuple[GpuFailure, ...] = ()
    node_losses: tuple[NodeLoss, ...] = ()
    failed: dict[tuple[str, int], GpuFailure] = field(default_factory=dict)
    """(node, GPU) → its failure, from its start until its repair."""

    @property
    def enabled(self) -> bool:
        return self.shape.enabled

    def failed_units(self, node: str, gpus: int, shares: int = 1) -> tuple[int, ...]:
        """The node's units on failed GPUs."""
        return tuple(unit for (name, gpu) in self.failed if name == node for unit in units_of_gpu(gpu, gpus, shares))

    def xid(self, node: str, gpu: int) -> int:
        failure = self.failed.get((node, gpu))
        return failure.xid if failure is not None else 0

    def vanished(self, node: str, gpu: int) -> bool:
        return self.xid(node, gpu) == XID_FALLEN_OFF_BUS


def units_of_gpu(gpu: int, gpus: int, shares: int) -> tuple[int, ...]:
    """A GPU's units on a node of `gpus` GPUs each given `shares` ways: g, g + gpus, …
    (`sim.llm.world.gpu_of_unit`)."""
    return tuple(gpu + k * gpus for k in range(shares))


def draw_plan(shape: Failures, gpus: dict[str, int], hours: float, seed: int) -> FailurePlan:
    """The run's failures: Poisson counts at the scenario's rates, each at a uniform moment on a
    uniform GPU or node, from a generator of the condition's own."""
    if not shape.enabled:
        return FailurePlan(shape)
    rng = np.random.default_rng([seed, 4603])
    span, nodes = hours * 3600, sorted(gpus)
    days = hours / 24
    gpu_failures = []
    for _ in range(rng.poisson(shape.gpu_failures_per_gpu_day * sum(gpus.values()) * days)):
        at, node = rng.uniform(0, span), nodes[rng.integers(len(nodes))]
        xid = XID_DOUBLE_BIT_ECC if rng.random() < shape.hbm_share else XID_FALLEN_OFF_BUS
        gpu_failures.append(GpuFailure(at, node, int(rng.integers(gpus[node])), xid, at + shape.gpu_repair_hours * 3600))
    losses = []
    for _ in range(rng.poisson(shape.node_losses_per_node_day * len(nodes) * days)):
        at = rng.uniform(0, span)
        losses.append(NodeLoss(at, nodes[rng.integers(len(nodes))], at + shape.node_loss_hours * 3600))
    return FailurePlan(shape, tuple(sorted(gpu_failures, key=lambda f: f.at_seconds)),
                       tuple(sorted(losses, key=lambda loss: loss.at_seconds)))


def starting(plan: FailurePlan, since: float, now: float) -> tuple[list[GpuFailure], list[NodeLoss]]:
    """The failures that begin in (since, now]."""
    return ([f for f in plan.gpu_failures if since < f.at_seconds <= now],
            [loss for loss in plan.node_losses if since < loss.at_seconds <= now])
