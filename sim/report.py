"""Simulation results as a terminal table and JSON: one renderer for one seed or several. Pure.

The table has a row per metric (with its unit) and a column per policy, so it fits 100 columns
however many metrics a scenario reports; every percentage is the change of the mean against stock.
"""

from __future__ import annotations

import json

from sim.run import PolicyResult
from sim.seeds import aggregate, change_against_stock

METRICS = ("ttft_p99_ms", "tpot_p99_ms", "slo_attainment", "ttft_p99_at_even_contention_ms", "ttft_p50_ms",
           "e2e_p99_ms", "node_util_cov", "evictions", "retried_requests_percent", "pending_pods")
"""The rows every run reports, in this order (others follow in name order)."""
FORMATS = {"ttft_p99_ms": "{:.0f}", "ttft_p50_ms": "{:.0f}", "tpot_p99_ms": "{:.1f}", "e2e_p99_ms": "{:.0f}",
           "slo_attainment": "{:.2%}", "ttft_p99_at_even_contention_ms": "{:.0f}", "retried_requests_percent": "{:.3f}",
           "node_util_cov": "{:.3f}", "ttft_p99_sensitive_ms": "{:.0f}", "evictions": "{:.0f}", "pending_pods": "{:.2f}",
           "evictions_per_pod_hour_percent": "{:.2f}", "training_jobs_in_one_clique": "{:.0%}",
           "training_step_ratio": "{:.3f}",
           "advice_feasible": "{:.1%}", "advice_followed": "{:.1%}",
           "placed_on_avoided": "{:.1%}", "requests_on_degraded_gpu_percent": "{:.2f}",
           "requests_across_domains_percent": "{:.1f}",
           "ttft_p99_unlimited_ms": "{:.0f}", "time_to_ready_p50_s": "{:.0f}", "time_to_ready_p99_s": "{:.0f}"}
LABELS = {
    "ttft_p99_ms": ("TTFT p99 (ms)", "99th percentile of time to first token over every request"),
    "ttft_p50_ms": ("TTFT p50 (ms)", "median time to first token over every request"),
    "tpot_p99_ms": ("TPOT p99 (ms)", "99th percentile of time per output token over every request"),
    "e2e_p99_ms": ("E2E p99 (ms)", "99th percentile of request latency, first byte in to last token out"),
    "slo_attainment": ("SLO attainment (%)", "requests within both the TTFT and the TPOT target"),
    "ttft_p99_at_even_contention_ms": ("TTFT p99, even contention (ms)", "TTFT p99 had each pool's contention been its mean"),
    "retried_requests_percent": ("retried requests (%)", "requests in flight on evicted or lost replicas, sent again"),
    "node_util_cov": ("GPU util CoV (ratio)", "spread of GPU utilisation across nodes (std / mean), time-averaged"),
    "ttft_p99_sensitive_ms": ("TTFT p99 sensitive (ms)", "TTFT p99 of the latency-sensitive services' requests"),
    "evictions": ("evictions (pods)", "pods the descheduler evicted"),
    "pending_pods": ("pending pods (mean)", "pods waiting for a node, time-averaged"),
    "evictions_per_pod_hour_percent": ("evictions (%/pod-h)", "evictions per running pod per hour, in percent"),
    "training_jobs_in_one_clique": ("jobs in one clique (%)", "training jobs whose workers share one NVLink clique"),
    "training_step_ratio": ("training step / ideal", "training jobs' mean step time over their ideal (fastest GPUs, "
                                                      "uncapped, one NVLink domain)"),
    "advice_feasible": ("advice feasible (%)", "advised pods whose every preferred node could take them"),
    "advice_followed": ("advice followed (%)", "advised pods that bound to one of their preferred nodes"),
    "placed_on_avoided": ("on avoided nodes (%)", "new pods bound to a node gpu-balancer's advice avoids (hot or unhealthy)"),
    "ttft_p99_unlimited_ms": ("TTFT p99 unlimited (ms)",
                              "TTFT p99 of the requests of services whose Deployments set no CPU limit"),
    "time_to_ready_p50_s": ("time to ready p50 (s)", "median wait of a new replica from its creation to serving"),
    "time_to_ready_p99_s": ("time to ready p99 (s)", "99th percentile of that wait: its node, pull, weights and start"),
    "requests_across_domains_percent": ("across NVLink domains (%)",
                                        "requests served by a two-pod replica (TP over two pods, or a prefill/decode "
                                        "pair) whose pods sit in different NVLink domains"),
    "requests_on_degraded_gpu_percent": ("on a degraded GPU (%)",
                                         "requests served on a GPU 1.25× or more slower than its model's fastest"),
}
SHORT_NAMES = {"stock-gpu-scored": "gpu-scored", "lownodeutilization": "lownodeutil",
               "lownodeutilization-actual": "lnu-actual",
               "gpu-balancer-serving": "gb+serving"}
COMPARED = ("node_util_cov", "ttft_p99_sensitive_ms", "ttft_p99_ms", "tpot_p99_ms")
"""Metrics quoted with their change against stock (lower is better for each)."""
WIDTH = 100


def columns(metric_names: set[str]) -> list[str]:
    """The standard metrics first, then any others (training, advice) in name order."""
    return [m for m in METRICS if m in metric_names] + sorted(metric_names - set(METRICS))


def as_json(scenario: str, seed: int, results: dict[str, PolicyResult]) -> str:
    return json.dumps({"scenario": scenario, "seed": seed,
                       "results": {name: {k: round(v, 4) for k, v in r.metrics.items()}
                                   for name, r in results.items()}}, indent=2)


def _value(metric: str, value: float) -> str:
    return FORMATS.get(metric, "{:.2f}").format(value)


def signed(value: float, digits: int = 0) -> str:
    """`value` with its sign, rounded; ± for a change that rounds to nothing (never "-0")."""
    rounded = round(value, digits)
    return f"±{0:.{digits}f}" if rounded == 0 else f"{rounded:+.{digits}f}"


def span(low: str, high: str) -> str:
    """A range of two formatted figures, printed one way everywhere: `low–high`, a unit sign once."""
    if low.endswith("%") and high.endswith("%"):
        low = low[:-1]
    return f"{low}–{high}"


def figures_of(summary: dict[str, dict[str, dict]], policy: str, metric: str
               ) -> tuple[str, float | None, str, str] | None:
    """One cell's figures as text: the mean, its change against stock (a fraction, for the
    compared metrics), the lowest and the highest seed; None when the policy lacks the metric."""
    value = summary[policy].get(metric)
    if value is None:
        return None
    change = change_against_stock(summary, policy, metric) if metric in COMPARED else None
    return _value(metric, value["mean"]), change, _value(metric, value["min"]), _value(metric, value["max"])


def as_table(scenario: str, seeds: list[int], summary: dict[str, dict[str, dict]]) -> str:
    """Rows of metrics, columns of policies; with several seeds a second line gives the range.
    Policies that do not fit in `WIDTH` columns beside the labels go on to a further block below,
    so that every cell keeps its own room and at least two spaces before the next."""
    policies = list(summary)
    shown = columns({m for metrics in summary.values() for m in metrics})
    label_width = max(len(LABELS.get(m, (m,))[0]) for m in shown) + 2
    several = len(seeds) > 1
    cells = {policy: _column(summary, policy, shown, several) for policy in policies}
    content = {policy: max(len(c) for c in [SHORT_NAMES.get(policy, policy), *cells[policy]]) for policy in policies}
    room = WIDTH - label_width
    gap = next((g for g in (2, 1) if sum(content.values()) + g * (len(policies) - 1) <= room), 2)
    widths = {policy: width + gap for policy, width in content.items()}
    lines = [f"scenario {scenario}, " + (f"seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} runs): mean, and below it the "
                                         "range over seeds" if several else f"seed {seeds[0]}"),
             "percentages: change of the mean against the stock scheduler (lower is better)"]
    for block in _blocks(policies, widths, room + gap):
        if len(lines) > 2:
            lines.append("")
        lines.append("".ljust(label_width) + "".join(SHORT_NAMES.get(p, p).ljust(widths[p]) for p in block))
        for row, metric in enumerate(r for m in shown for r in ([m, None] if several else [m])):
            if metric is None and not any(cells[p][row] for p in block):
                continue  # no range where no policy has the figure
            label = LABELS.get(metric, (metric,))[0] if metric else ""
            lines.append(label.ljust(label_width) + "".join(cells[p][row].ljust(widths[p]) for p in block))
    aliases = [f"{short} = {name}" for name, short in SHORT_NAMES.items() if name in policies]
    if aliases:
        lines.append("(" + ", ".join(aliases) + ")")
    return "\n".join(line.rstrip() for line in lines)


def _column(summary: dict[str, dict[str, dict]], policy: str, shown: list[str], several: bool) -> list[str]:
    """One policy's cells, top to bottom: per metric its mean (and change), then its range."""
    out = []
    for metric in shown:
        figures = figures_of(summary, policy, metric)
        if figures is None:
            out += ["n/a", ""] if several else ["n/a"]
            continue
        mean, change, low, high = figures
        out.append(mean + (f" {signed(change * 100)}%" if change is not None else ""))
        if several:
            out.append(span(low, high))
    return out


def _blocks(policies: list[str], widths: dict[str, int], room: int) -> list[list[str]]:
    """The policies in order, cut into as few runs as fit `room`, of even size (one column at
    least each)."""
    for count in range(1, len(policies) + 1):
        size = -(-len(policies) // count)
        blocks = [policies[i:i + size] for i in range(0, len(policies), size)]
        if all(sum(widths[p] for p in block) <= room for block in blocks):
            return blocks
    return [[p] for p in policies]


def single_seed_table(scenario: str, seed: int, results: dict[str, PolicyResult]) -> str:
    return as_table(scenario, [seed], aggregate({seed: results}))
