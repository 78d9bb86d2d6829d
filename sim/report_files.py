"""Write a simulation report: PNG pictures, a self-contained report.html and summary.md (file I/O)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import matplotlib.pyplot as plt

from sim import report_figures as figures
from sim.report import LABELS, as_table, columns, figures_of
from sim.run import PolicyResult
from sim.scenario import Scenario
from sim.seeds import aggregate

PICTURES = (("headline.png", "Change against the stock scheduler"),
            ("node-utilisation.png", "GPU utilisation per node over time"),
            ("latency-tail.png", "Latency tail"))


def write_report(directory: Path, scenario: Scenario, by_seed: dict[int, dict[str, PolicyResult]]) -> list[Path]:
    """headline.png, node-utilisation.png (first seed), latency-tail.png, report.html, summary.md."""
    directory.mkdir(parents=True, exist_ok=True)
    seeds = sorted(by_seed)
    drawn = {"headline.png": figures.headline(scenario, seeds, by_seed),
             "node-utilisation.png": figures.heatmap(scenario, seeds[0], seeds, by_seed[seeds[0]]),
             "latency-tail.png": figures.latency_tail(scenario, seeds, by_seed)}
    written = []
    for name, figure in drawn.items():
        path = directory / name
        figure.savefig(path, dpi=90, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    summary = aggregate(by_seed)
    page = directory / "report.html"
    page.write_text(report_html(scenario, seeds, summary, {p.name: p.read_bytes() for p in written}))
    markdown = directory / "summary.md"
    markdown.write_text(summary_markdown(scenario, seeds, summary))
    return [*written, page, markdown]


def _cells(summary: dict[str, dict[str, dict]], metric: str, several: bool) -> list[str]:
    out = []
    for policy in summary:
        figures = figures_of(summary, policy, metric)
        if figures is None:
            out.append("n/a")
            continue
        mean, change, low, high = figures
        text = mean + (f" ({change * 100:+.0f} %)" if change is not None else "")
        out.append(text + (f"<br><small>{low} … {high}</small>" if several else ""))
    return out


def report_html(scenario: Scenario, seeds: list[int], summary: dict[str, dict[str, dict]],
                pictures: dict[str, bytes]) -> str:
    """One page with everything inlined: it opens from disk with no server."""
    several = len(seeds) > 1
    shown = columns({m for metrics in summary.values() for m in metrics})
    head = "".join(f"<th>{html.escape(p)}</th>" for p in summary)
    rows = "".join(
        f"<tr><th title='{html.escape(LABELS.get(m, (m, ''))[1])}'>{html.escape(LABELS.get(m, (m,))[0])}</th>"
        + "".join(f"<td>{c}</td>" for c in _cells(summary, m, several)) + "</tr>" for m in shown)
    meanings = "".join(f"<dt>{html.escape(LABELS[m][0])}</dt><dd>{html.escape(LABELS[m][1])}</dd>"
                       for m in shown if m in LABELS)
    images = "".join(
        f"<figure><img alt='{html.escape(title)}' src='data:image/png;base64,{base64.b64encode(pictures[name]).decode()}'>"
        f"<figcaption>{html.escape(title)}</figcaption></figure>" for name, title in PICTURES if name in pictures)
    seeds_line = figures.seeds_text(seeds) + (f" ({len(seeds)} runs; each cell: mean, change of the mean against "
                                              "stock, and the range over seeds)" if several else "")
    events = "; ".join(f"{label} at {hour:g} h" for hour, label in figures.events_of(scenario)) or "none"
    title = f"gpu-balancer simulation: {scenario.name}, {figures.seeds_text(seeds)}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }} th, td {{ border: 1px solid #ccc; padding: 4px 8px; }}
td {{ text-align: right; }} thead th {{ background: #f3f3f3; }} img {{ max-width: 100%; }}
figure {{ margin: 2em 0; }} figcaption {{ color: #555; }} dt {{ font-weight: 600; }} small {{ color: #666; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Scenario <b>{html.escape(scenario.name)}</b>: {scenario.hours:g} h of
{scenario.tick_seconds:g}-second ticks, the same arrivals for every policy; events: {html.escape(events)}.
Seeds: {html.escape(seeds_line)}. Percentages are changes against the stock scheduler; lower is better for every
compared metric.</p>
<table><thead><tr><th>metric</th>{head}</tr></thead><tbody>{rows}</tbody></table>
{images}
<h2>What each metric means</h2><dl>{meanings}</dl>
</body></html>
"""


def summary_markdown(scenario: Scenario, seeds: list[int], summary: dict[str, dict[str, dict]]) -> str:
    return "\n".join([f"# gpu-balancer simulation: {scenario.name} ({figures.seeds_text(seeds)})", "",
                      "Same arrivals for every policy; gpu-balancer runs the production webhook decision and",
                      "descheduler plan on telemetry lagged like a real exporter. The full report with pictures",
                      "is `report.html`.", "", "```", as_table(scenario.name, seeds, summary), "```", "",
                      *(f"![{title}]({name})\n" for name, title in PICTURES)])
