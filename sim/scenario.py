"""Simulation scenarios: the fleet, the workloads and the events, as plain frozen data. Pure.

A scenario file is YAML with the same field names in camelCase (see README, "Simulating your
fleet"); `load_scenario` decodes and validates it with the policy loader's rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import yaml

from scoring.policy import PolicyError, decode_fields


@dataclass(frozen=True)
class FleetShape:
    nodes: int = 32
    gpus_per_node: int = 8
    cpu_per_node: int = 96
    memory_gib_per_node: int = 1024
    zones: int = 4
    nodes_per_clique: int = 4
    """NVLink domain size: nodes sharing one `nvidia.com/gpu.clique` value."""


@dataclass(frozen=True)
class InferenceShape:
    services: int = 40
    mean_demand_fraction: float = 0.35
    """Mean total demand as a share of all GPUs (in GPUs fully busy)."""
    pareto_alpha: float = 1.2
    """Tail of the per-service demand distribution: smaller is more skewed."""
    target_util: float = 0.6
    """The autoscaler's target utilisation per replica."""
    max_replica_util: float = 0.9
    """Replica caps let a service's peak (diurnal high and a burst) run at this utilisation."""
    diurnal_amplitude: float = 0.3
    bursts_per_hour: float = 0.5
    rollouts_per_service_per_day: float = 4.0
    autoscale_every_ticks: int = 4


@dataclass(frozen=True)
class TrainingShape:
    jobs_per_hour: float = 0.0
    workers: tuple[int, ...] = (2, 4)
    gpus_per_worker: int = 4
    duration_hours: tuple[float, ...] = (1.0, 2.0)


@dataclass(frozen=True)
class Events:
    burst_pods_at_hour: float = -1.0
    """When ≥ 0: at this hour one service scales out by `burstPods` pods within one tick."""
    burst_pods: int = 200
    node_failures_at_hour: float = -1.0
    failed_nodes: int = 2
    failure_duration_hours: float = 1.0


@dataclass(frozen=True)
class Scenario:
    name: str = "custom"
    hours: float = 6.0
    tick_seconds: float = 30.0
    telemetry_lag_seconds: float = 45.0
    """Exporter collect interval plus scrape interval: how old what policies see is."""
    descheduler_every_ticks: int = 10
    fleet: FleetShape = field(default_factory=FleetShape)
    inference: InferenceShape = field(default_factory=InferenceShape)
    training: TrainingShape = field(default_factory=TrainingShape)
    events: Events = field(default_factory=Events)


BUILT_IN = {
    "skewed-inference": Scenario(name="skewed-inference"),
    "burst": Scenario(name="burst", hours=2.0, events=Events(burst_pods_at_hour=1.0, burst_pods=200),
                      fleet=FleetShape(nodes=48), inference=InferenceShape(services=30, mean_demand_fraction=0.3)),
    "training-mix": Scenario(name="training-mix", hours=6.0,
                             inference=InferenceShape(services=30, mean_demand_fraction=0.3),
                             training=TrainingShape(jobs_per_hour=1.5)),
    "node-failure": Scenario(name="node-failure", hours=4.0,
                             events=Events(node_failures_at_hour=1.5, failed_nodes=3, failure_duration_hours=1.0)),
}


def load_scenario(text: str) -> Scenario:
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise PolicyError(f"scenario is not valid YAML: {error}") from None
    scenario = decode_fields(Scenario, document, path="")
    for path, ok in (("hours", 0 < scenario.hours <= 24 * 7), ("tickSeconds", 5 <= scenario.tick_seconds <= 600),
                     ("fleet.nodes", 1 <= scenario.fleet.nodes <= 2000),
                     ("fleet.gpusPerNode", 1 <= scenario.fleet.gpus_per_node <= 16),
                     ("inference.services", 0 <= scenario.inference.services <= 2000),
                     ("inference.paretoAlpha", scenario.inference.pareto_alpha > 1.0),
                     ("inference.targetUtil", 0 < scenario.inference.target_util <= 1)):
        if not ok:
            raise PolicyError(f"{path}: out of range")
    return scenario


def named(name: str) -> Scenario:
    if name not in BUILT_IN:
        raise KeyError(f"unknown scenario {name!r}; built in: {', '.join(BUILT_IN)}")
    return BUILT_IN[name]


__all__ = ["BUILT_IN", "Events", "FleetShape", "InferenceShape", "Scenario", "TrainingShape", "load_scenario",
           "named", "replace"]
