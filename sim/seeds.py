"""Simulation results over several seeds: per policy and metric the mean, the range and the values
per seed, and the change of the mean against stock. Pure, no I/O."""

from __future__ import annotations

import json
from statistics import fmean

from sim.run import PolicyResult


def parse_seeds(text: str) -> list[int]:
    """"A-B" (inclusive) or "N" (seeds 1..N); raises ValueError."""
    low, dash, high = text.partition("-")
    try:
        first, last = (int(low), int(high)) if dash else (1, int(low))
    except ValueError:
        first, last = 0, -1
    if first < 0 or last < first or last - first >= 100:
        raise ValueError(f"--seeds {text!r}: give A-B with 0 ≤ A ≤ B and at most 100 seeds, or a count N")
    return list(range(first, last + 1))


def aggregate(by_seed: dict[int, dict[str, PolicyResult]]) -> dict[str, dict[str, dict]]:
    """policy → metric → {mean, min, max, per_seed}; a metric some seed lacks (e.g. no training job
    was judged) is averaged over the seeds that have it."""
    policies = list(next(iter(by_seed.values())))
    out: dict[str, dict[str, dict]] = {}
    for policy in policies:
        metrics = sorted({m for results in by_seed.values() for m in results[policy].metrics})
        out[policy] = {}
        for metric in metrics:
            values = {seed: results[policy].metrics[metric] for seed, results in by_seed.items()
                      if metric in results[policy].metrics}
            out[policy][metric] = {"mean": fmean(values.values()), "min": min(values.values()),
                                   "max": max(values.values()), "per_seed": values}
    return out


def change_against_stock(summary: dict[str, dict[str, dict]], policy: str, metric: str) -> float | None:
    stock = summary.get("stock", {}).get(metric)
    if stock is None or policy == "stock" or not stock["mean"] or metric not in summary[policy]:
        return None
    return summary[policy][metric]["mean"] / stock["mean"] - 1


def as_json(scenario: str, seeds: list[int], summary: dict[str, dict[str, dict]]) -> str:
    return json.dumps({"scenario": scenario, "seeds": seeds, "results": {
        policy: {metric: {"mean": round(v["mean"], 4), "min": round(v["min"], 4), "max": round(v["max"], 4),
                          "per_seed": {str(s): round(x, 4) for s, x in v["per_seed"].items()}}
                 for metric, v in metrics.items()} for policy, metrics in summary.items()}}, indent=2)
