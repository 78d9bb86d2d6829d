"""The report's pictures as matplotlib figures: utilisation heatmap, latency tail, headline changes.
Pure: each returns a Figure (tests read its titles and labels back); the caller saves it."""

from __future__ import annotations

from statistics import fmean

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from sim.report import LABELS, SHORT_NAMES  # noqa: E402
from sim.run import PolicyResult, weighted_quantile  # noqa: E402
from scoring.policy import HeatPolicy  # noqa: E402
from sim.scenario import Scenario  # noqa: E402

HEADLINE = ("ttft_p99_ms", "ttft_p50_ms", "tpot_p99_ms", "node_util_cov")
"""What users feel first, each lower-is-better like the bars' axis."""
HOT_UTIL = HeatPolicy().hot_util_percent
"""The heatmap's outline: a node this busy is hot by the default policy."""
COLOURS = {"stock": "tab:grey", "stock-gpu-scored": "tab:blue", "lownodeutilization": "tab:orange",
           "gpu-balancer": "tab:green", "gpu-balancer-serving": "tab:cyan", "oracle": "tab:purple"}
"""One colour per policy in every picture."""


def seeds_text(seeds: list[int]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}"


def events_of(scenario: Scenario) -> list[tuple[float, str]]:
    """(hour, label) of the scenario's burst and node failures, for the time axes."""
    events = scenario.events
    out = []
    if events.burst_pods_at_hour >= 0:
        out.append((events.burst_pods_at_hour, f"burst: +{events.burst_pods} pods"))
    if events.node_failures_at_hour >= 0:
        out.append((events.node_failures_at_hour, f"{events.failed_nodes} nodes fail"))
        out.append((events.node_failures_at_hour + events.failure_duration_hours, "nodes back"))
    return out


def heatmap(scenario: Scenario, seed: int, seeds: list[int], results: dict[str, PolicyResult]) -> Figure:
    """One panel per policy: nodes × time in hours, coloured by GPU utilisation, ≥ 80 % outlined."""
    hours = scenario.hours
    figure, axes = plt.subplots(len(results), 1, figsize=(11, 1.9 * len(results) + 1.0), sharex=True, squeeze=False)
    image = None
    for axis, (name, result) in zip(axes[:, 0], results.items()):
        nodes = sorted({n for tick in result.node_util for n in tick})
        grid = [[tick.get(n, float("nan")) for tick in result.node_util] for n in nodes]
        image = axis.imshow(grid, aspect="auto", cmap="inferno", vmin=0, vmax=100, interpolation="nearest",
                            extent=(0, hours, len(nodes), 0))
        if any(value >= HOT_UTIL for row in grid for value in row) and len(grid[0]) > 1 and len(nodes) > 1:
            step = hours / len(grid[0])
            axis.contour([(t + 0.5) * step for t in range(len(grid[0]))], [n + 0.5 for n in range(len(nodes))], grid,
                         levels=[HOT_UTIL], colors="cyan", linewidths=0.6)
        axis.set_title(name, fontsize=9, loc="left")
        axis.set_ylabel("node")
        for hour, label in events_of(scenario):
            axis.axvline(hour, color="white", linestyle="--", linewidth=0.8)
            axis.text(hour, 0, f" {label}", color="white", fontsize=7, va="top")
    axes[-1, 0].set_xlabel("time (hours)")
    figure.suptitle(f"{scenario.name}, {seeds_text([seed])} (of {seeds_text(seeds)}): GPU utilisation per node "
                    f"over time; cyan outline: ≥ {HOT_UTIL:.0f} % (hot)", fontsize=10)
    bar = figure.colorbar(image, ax=list(axes[:, 0]), shrink=0.8)
    bar.set_label(f"GPU utilisation (%); cyan line: hot threshold, {HOT_UTIL:.0f} %")
    bar.ax.axhline(HOT_UTIL, color="cyan", linewidth=2)
    return figure


def latency_tail(scenario: Scenario, seeds: list[int], by_seed: dict[int, dict[str, PolicyResult]]) -> Figure:
    """1 − CDF of request latency on log axes, pooled over seeds; each policy's p99 marked."""
    figure, axis = plt.subplots(figsize=(8, 4.5))
    policies = list(next(iter(by_seed.values())))
    for name in policies:
        samples = sorted(s for results in by_seed.values() for s in results[name].latencies)
        total = sum(w for _, w in samples) or 1.0
        xs, ys, running = [], [], 0.0
        step = max(1, len(samples) // 3000)
        for i, (value, weight) in enumerate(samples):
            running += weight
            if i % step == 0 and running < total:
                xs.append(value)
                ys.append(1 - running / total)
        line, = axis.plot(xs, ys, label=SHORT_NAMES.get(name, name), linewidth=1.2, color=COLOURS.get(name))
        p99 = weighted_quantile(samples, 0.99)
        axis.plot([p99], [0.01], marker="o", color=line.get_color())
        axis.annotate(f"{p99:.0f} ms", (p99, 0.01), textcoords="offset points", xytext=(4, 6 + 9 * policies.index(name)),
                      fontsize=7, color=line.get_color())
    axis.axhline(0.01, color="grey", linestyle=":", linewidth=0.8)
    axis.text(0.005, 0.011, "p99", fontsize=7, color="grey", transform=axis.get_yaxis_transform())
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_ylim(1e-4, 1)
    axis.set_xlabel("time to first token (ms)")
    axis.set_ylabel("share of requests slower (1 − CDF)")
    axis.set_title(f"{scenario.name}, {seeds_text(seeds)}: TTFT tail (dots: each policy's p99)", fontsize=10)
    axis.legend(fontsize=8)
    return figure


def per_seed_changes(by_seed: dict[int, dict[str, PolicyResult]], policy: str, metric: str) -> list[float]:
    """The change against stock in each seed (percent), where stock's value is not zero."""
    out = []
    for results in by_seed.values():
        base = results["stock"].metrics.get(metric)
        value = results[policy].metrics.get(metric)
        if base and value is not None:
            out.append(100 * (value / base - 1))
    return out


def headline_metrics(by_seed: dict[int, dict[str, PolicyResult]]) -> tuple[str, ...]:
    """`HEADLINE`, and the sensitive services' TTFT p99 where the scenario has them."""
    first = next(iter(next(iter(by_seed.values())).values()))
    return HEADLINE + (("ttft_p99_sensitive_ms",) if "ttft_p99_sensitive_ms" in first.metrics else ())


def headline(scenario: Scenario, seeds: list[int], by_seed: dict[int, dict[str, PolicyResult]]) -> Figure:
    """Each headline metric's change against stock per policy; whiskers: the range over seeds."""
    policies = [p for p in next(iter(by_seed.values())) if p != "stock"]
    shown = headline_metrics(by_seed)
    figure, axis = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(policies))
    for i, policy in enumerate(policies):
        means, low, high = [], [], []
        for metric in shown:
            changes = per_seed_changes(by_seed, policy, metric)
            mean = fmean(changes) if changes else 0.0
            means.append(mean)
            low.append(mean - min(changes, default=mean))
            high.append(max(changes, default=mean) - mean)
        positions = [m + (i - (len(policies) - 1) / 2) * width for m in range(len(shown))]
        axis.bar(positions, means, width, label=SHORT_NAMES.get(policy, policy), color=COLOURS.get(policy),
                 yerr=[low, high] if len(seeds) > 1 else None, capsize=2)
    axis.axhline(0, color="black", linewidth=0.8)
    axis.set_xticks(range(len(shown)), [LABELS[m][0] for m in shown], fontsize=8)
    axis.set_ylabel("change against stock (%)  — lower is better")
    whiskers = "; whiskers: range over seeds" if len(seeds) > 1 else ""
    axis.set_title(f"{scenario.name}, {seeds_text(seeds)}: change against the stock scheduler "
                   f"(mean of per-seed changes{whiskers})", fontsize=10)
    axis.legend(fontsize=8)
    return figure


__all__ = ["HEADLINE", "events_of", "headline", "headline_metrics", "heatmap", "latency_tail", "per_seed_changes", "seeds_text"]
