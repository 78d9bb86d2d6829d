"""The simulation report: pictures a person reads at a glance, a self-contained page, a narrow table."""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser

import pytest

from sim import report_figures as figures
from sim.report import WIDTH, as_table
from sim.report_files import write_report
from sim.run import compare
from sim.scenario import load_scenario
from sim.seeds import aggregate
from tests.conftest import require_tool

TINY = load_scenario("name: tiny\nhours: 0.5\nfleet: {nodes: 6}\ninference: {services: 6, meanDemandFraction: 0.5}\n"
                     "events: {burstPodsAtHour: 0.25, burstPods: 12}\n")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def by_seed():
    return {seed: compare(TINY, seed) for seed in (1, 2)}


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack, self.text, self.images, self.headers = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)
        if tag == "img":
            self.images.append(dict(attrs))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        self.text.append(data)
        if self.stack and self.stack[-1] == "th":
            self.headers.append(data.strip())


def test_the_report_files_are_valid_and_self_contained(by_seed, tmp_path):
    written = {p.name for p in write_report(tmp_path, TINY, by_seed)}
    assert written == {"headline.png", "node-utilisation.png", "latency-tail.png", "report.html", "summary.md"}
    for name in ("headline.png", "node-utilisation.png", "latency-tail.png"):
        assert (tmp_path / name).read_bytes().startswith(PNG)
    page = Page()
    page.feed((tmp_path / "report.html").read_text())
    text = " ".join(page.text)
    assert "tiny" in text and "seeds 1–2" in text and "burst: +12 pods at 0.25 h" in text
    assert {"stock", "gpu-balancer", "coolest-node", "GPU util CoV (ratio)", "TTFT p99 (ms)",
            "SLO attainment (%)"} <= set(page.headers)
    assert "p99 latency (ms)" not in page.headers, "one world: no queue-law latency"
    assert "What each metric means" in text
    assert len(page.images) == 3 and all(i["src"].startswith("data:image/png;base64,") for i in page.images), \
        "pictures are inlined: the page opens from disk with no server"


def test_the_heatmap_has_hours_a_labelled_colour_bar_the_hot_threshold_and_the_events(by_seed):
    figure = figures.heatmap(TINY, 1, [1, 2], by_seed[1])
    axes = figure.axes
    panels, bar = axes[:-1], axes[-1]
    assert [a.get_title(loc="left") for a in panels] == list(by_seed[1])
    assert panels[-1].get_xlabel() == "time (hours)" and panels[-1].get_xlim() == (0.0, TINY.hours)
    assert "GPU utilisation (%)" in bar.get_ylabel() and "80 %" in bar.get_ylabel()
    assert any(line.get_ydata()[0] == 80 for line in bar.lines), "the 80 % threshold is marked on the colour bar"
    assert "tiny" in figure._suptitle.get_text() and "seed 1 (of seeds 1–2)" in figure._suptitle.get_text()
    assert any("burst: +12 pods" in t.get_text() for t in panels[0].texts)


def test_the_latency_tail_is_one_minus_cdf_on_log_axes_with_each_p99_marked(by_seed):
    axis = figures.latency_tail(TINY, [1, 2], by_seed).axes[0]
    assert axis.get_yscale() == "log" and axis.get_xscale() == "log"
    assert "1 − CDF" in axis.get_ylabel() and "(ms)" in axis.get_xlabel()
    assert sum(t.get_text().endswith(" ms") for t in axis.texts) == len(by_seed[1]), "one p99 label per policy"


def test_the_headline_chart_shows_changes_against_stock_with_the_range_over_seeds(by_seed):
    axis = figures.headline(TINY, [1, 2], by_seed).axes[0]
    assert "change against stock (%)" in axis.get_ylabel() and "range over seeds" in axis.get_title()
    assert [t.get_text() for t in axis.get_xticklabels()] == ["TTFT p99 (ms)", "TTFT p50 (ms)", "TPOT p99 (ms)",
                                                              "GPU util CoV (ratio)"]
    changes = figures.per_seed_changes(by_seed, "gpu-balancer", "node_util_cov")
    assert len(changes) == 2
    heights = sorted(round(p.get_height(), 6) for p in axis.patches)
    assert round(sum(changes) / 2, 6) in heights, "a bar is the mean of the per-seed changes"


def test_the_terminal_table_fits_100_columns_and_says_what_percentages_are(by_seed):
    table = as_table("tiny", [1, 2], aggregate(by_seed))
    assert max(len(line) for line in table.splitlines()) <= WIDTH
    assert "change of the mean against the stock scheduler" in table
    assert "TTFT p99 (ms)" in table and "SLO attainment (%)" in table and "hottest node" not in table


def test_the_page_renders_in_headless_chromium(by_seed, tmp_path):
    browser = require_tool("chromium", "chromium-browser", why="Debian's chromium; `make test` installs it as root")
    write_report(tmp_path, TINY, by_seed)
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,2000", f"--screenshot={shot}", (tmp_path / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 2000)
    colours = image.getcolors(maxcolors=1_000_000) or []
    assert len(colours) > 200, "the page drew text and pictures, not a blank or error page"


def test_with_seven_policies_every_range_stays_a_cell_of_its_own():
    policies = ("stock", "spread", "lownodeutilization-actual", "load-aware", "gpu-balancer", "coolest-node",
                "stock-gpu-scored")
    wide = {"node_util_cov": (0.240, 0.351), "advice_followed": (0.954, 1.0), "ttft_p99_ms": (1976.0, 57056.0)}
    summary = {p: {m: {"mean": (lo + hi) / 2, "min": lo, "max": hi, "per_seed": {"1": lo, "2": hi}}
                   for m, (lo, hi) in wide.items()} for p in policies}
    table = as_table("six", [1, 2], summary).splitlines()
    assert max(len(line) for line in table) <= WIDTH
    ranges = [line.split() for line in table if line.startswith(" ") and ("–" in line or ".." in line)]
    # Seven columns go in two blocks; each range a cell of its own in either.
    assert sum(len(cells) for cells in ranges) == len(wide) * len(policies), ranges
    assert all(re.fullmatch(r"[\d.]+–[\d.]+%?", cell) for cells in ranges for cell in cells), ranges


def test_a_change_that_rounds_to_nothing_reads_as_plus_minus_zero_never_minus_zero():
    from sim.report import signed

    assert [signed(-0.0004), signed(0.04, 1), signed(-0.04, 1), signed(2.6), signed(-12.5, 1)] == [
        "±0", "±0.0", "±0.0", "+3", "-12.5"]
    summary = {p: {"ttft_p99_ms": {"mean": v, "min": v, "max": v, "per_seed": {"1": v}}}
               for p, v in (("stock", 1000.0), ("gpu-balancer", 999.9))}
    table = as_table("tiny", [1], summary)
    assert "±0%" in table and "-0%" not in table
