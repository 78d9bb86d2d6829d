"""The placement policies the simulator compares, one module each, and their registry. Pure.

A new peer is one module with a class that implements `Policy` (its `name` and `about`), and one
line in `REGISTERED` below."""

from __future__ import annotations

import random
from dataclasses import fields

from scoring.policy import BalancerPolicy
from sim.policies.true_state import TrueState
from sim.policies.cache_affinity import CacheAffinity
from sim.policies.coolest_node import CoolestNode, Oracle
from sim.policies.exporters import EPOCH, observed_samples, sim_time, telemetry_lag
from sim.policies.gpu_balancer import (SERVING_POLICY, GpuBalancer, GpuBalancerServing, claim_book, preferred_nodes,
                                       watched_view)
from sim.policies.load_aware import LoadAware, target_load_packing
from sim.policies.lownodeutilization import LowNodeUtilization, LowNodeUtilizationActual
from sim.policies.protocol import Policy
from sim.policies.spread import Spread
from sim.policies.stock import Stock, StockGpuScored


REGISTERED: tuple[type[Policy], ...] = (
    Stock, StockGpuScored, LowNodeUtilization, Spread, LowNodeUtilizationActual, LoadAware, GpuBalancer,
    GpuBalancerServing, Oracle, CoolestNode, TrueState, CacheAffinity,
)


POLICY_CLASSES: dict[str, type[Policy]] = {cls.name: cls for cls in REGISTERED}
"""Every policy by its name: the one registry the runs and `simulate --list` read."""


POLICY_ABOUT = {name: cls.about for name, cls in POLICY_CLASSES.items()}
"""One line on each policy, for `simulate --list`."""


POLICIES = ("stock", "spread", "lownodeutilization-actual", "load-aware", "gpu-balancer", "coolest-node")
"""The comparison every scenario runs: the peers as their users run them (issue 31's names). The
oracle runs as `coolest-node`: it places on true current load, booked at once, but on the latency
objective it lost to stock on 9 of 16 scenario-seeds at contention 1 (BENCHMARKS), so it is no
oracle."""


def policies_for(scenario) -> tuple[str, ...]:
    """The policies a scenario compares: every scenario the same line-up; where a fleet condition
    is on, the reference that knows it (`true-state`) too, and where replicas start cold the
    peer that uses the cache (`cache-affinity`)."""
    conditions = scenario.conditions
    peers = POLICIES + (("cache-affinity",) if conditions.cold_start.enabled else ())
    return peers + ("true-state",) if any(getattr(conditions, f.name).enabled for f in fields(conditions)) \
        else peers


def make_policy(name: str, seed: int, balancer: BalancerPolicy | None = None) -> Policy:
    """The named policy for a seed; gpu-balancer's two under `balancer` where given (a variant)."""
    rng = random.Random(seed * 7 + 3)
    if balancer is not None and name in ("gpu-balancer", SERVING_POLICY):
        return (GpuBalancer if name == "gpu-balancer" else GpuBalancerServing)(rng, balancer)
    return POLICY_CLASSES[name](rng)


__all__ = ["EPOCH", "POLICIES", "POLICY_ABOUT", "POLICY_CLASSES", "REGISTERED", "SERVING_POLICY", "TrueState",
           "CacheAffinity", "CoolestNode",
           "GpuBalancer", "GpuBalancerServing", "LoadAware", "LowNodeUtilization", "LowNodeUtilizationActual",
           "Oracle", "Policy", "Spread", "Stock", "StockGpuScored", "claim_book", "make_policy", "observed_samples",
           "policies_for", "preferred_nodes", "sim_time", "target_load_packing", "telemetry_lag", "watched_view"]
