"""Simulation results as a table, JSON, a Markdown summary and PNG plots (plots and files: I/O)."""

from __future__ import annotations

import json
from pathlib import Path

from sim.run import PolicyResult

METRICS = ("node_util_cov", "max_node_util", "hot_node_minutes", "p99_latency_ms", "p99_at_even_load_ms",
           "evictions", "pending_pods")
FORMATS = {"node_util_cov": "{:.3f}", "max_node_util": "{:.1f}", "hot_node_minutes": "{:.1f}",
           "p99_latency_ms": "{:.0f}", "p99_at_even_load_ms": "{:.0f}", "evictions": "{:.0f}", "pending_pods": "{:.2f}",
           "evictions_per_pod_hour_percent": "{:.2f}", "training_jobs_in_one_clique": "{:.0%}",
           "advice_feasible": "{:.1%}", "advice_followed": "{:.1%}"}


def as_json(scenario: str, seed: int, results: dict[str, PolicyResult]) -> str:
    return json.dumps({"scenario": scenario, "seed": seed,
                       "results": {name: {k: round(v, 4) for k, v in r.metrics.items()}
                                   for name, r in results.items()}}, indent=2)


COMPARED = ("node_util_cov", "hot_node_minutes", "p99_latency_ms")
"""Metrics quoted with their change against stock (lower is better for each)."""


def columns(metric_names: set[str]) -> list[str]:
    """The standard metrics first, then any others (training, advice) in name order."""
    return list(METRICS) + sorted(metric_names - set(METRICS))


def render(title: str, rows: list[list[str]]) -> str:
    """A title and rows as aligned columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join([title, *("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)])


def vs_stock(results: dict[str, PolicyResult], metric: str, name: str) -> str:
    base = results.get("stock")
    if base is None or name == "stock" or not base.metrics.get(metric):
        return ""
    return f" ({(results[name].metrics[metric] / base.metrics[metric] - 1) * 100:+.0f}%)"


def _cell(results: dict[str, PolicyResult], metric: str, name: str) -> str:
    value = results[name].metrics.get(metric)
    if value is None:
        return "n/a"  # e.g. no training job found a clique with room, so packing was not judged
    return FORMATS.get(metric, "{:.2f}").format(value) + (vs_stock(results, metric, name) if metric in COMPARED else "")


def as_table(scenario: str, seed: int, results: dict[str, PolicyResult]) -> str:
    shown = columns({k for r in results.values() for k in r.metrics})
    rows = [["policy", *shown]]
    for name in results:
        rows.append([name, *(_cell(results, c, name) for c in shown)])
    return render(f"scenario {scenario}, seed {seed}", rows)


def write_report(directory: Path, scenario: str, seed: int, results: dict[str, PolicyResult]) -> list[Path]:
    """summary.md, node-utilisation heatmaps (one panel per policy) and the latency CDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    figure, axes = plt.subplots(len(results), 1, figsize=(11, 2.2 * len(results)), sharex=True)
    axes = axes if len(results) > 1 else [axes]
    for axis, (name, result) in zip(axes, results.items()):
        nodes = sorted({n for tick in result.node_util for n in tick})
        grid = [[tick.get(n, float("nan")) for tick in result.node_util] for n in nodes]
        image = axis.imshow(grid, aspect="auto", cmap="inferno", vmin=0, vmax=100, interpolation="nearest")
        axis.set_title(f"{name}: node GPU utilisation (%)", fontsize=9)
        axis.set_ylabel("node")
    axes[-1].set_xlabel("tick")
    figure.colorbar(image, ax=axes, shrink=0.8)
    heatmap = directory / "node-utilisation.png"
    figure.savefig(heatmap, dpi=90)
    plt.close(figure)
    written.append(heatmap)

    figure, axis = plt.subplots(figsize=(7, 4))
    for name, result in results.items():
        ordered = sorted(result.latencies)
        total = sum(w for _, w in ordered) or 1.0
        xs, ys, running = [], [], 0.0
        for value, weight in ordered[:: max(1, len(ordered) // 2000)]:
            running += weight * max(1, len(ordered) // 2000)
            xs.append(value)
            ys.append(min(1.0, running / total))
        axis.plot(xs, ys, label=name)
    axis.set_xscale("log")
    axis.set_xlabel("modelled replica p99 latency (ms)")
    axis.set_ylabel("share of requests")
    axis.legend(fontsize=8)
    cdf = directory / "latency-cdf.png"
    figure.savefig(cdf, dpi=90, bbox_inches="tight")
    plt.close(figure)
    written.append(cdf)

    summary = directory / "summary.md"
    table = as_table(scenario, seed, results).splitlines()
    summary.write_text("\n".join([
        f"# gpu-balancer simulation: {scenario} (seed {seed})", "",
        "Same arrivals for every policy; gpu-balancer runs the production webhook decision and",
        "descheduler plan on telemetry lagged like a real exporter.", "",
        "```", *table, "```", "",
        "![node utilisation](node-utilisation.png)", "", "![latency CDF](latency-cdf.png)", ""]))
    written.append(summary)
    return written
