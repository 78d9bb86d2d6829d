"""`gpu-balancer demo` (what `make demo` runs) goes end to end on this machine and tells the story."""

import re
import subprocess
import sys

from tests.conftest import _require_prometheus


def demo(tmp_path, seed: int) -> str:
    result = subprocess.run([sys.executable, "-m", "gpu_balancer", "demo", "--nodes", "8", "--seed", str(seed),
                             "--report-dir", str(tmp_path / f"report-{seed}")], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "ERROR" not in result.stderr, result.stderr[-2000:]
    return result.stdout


def after_rows(out: str) -> list[str]:
    section = out.split("4. The fleet")[1].split("5. Over time")[0]
    return [line for line in section.splitlines() if re.match(r"\s+(stock alone|with gpu-balancer)", line)]


def test_the_demo_shows_the_problem_and_its_cure(tmp_path):
    _require_prometheus()
    out = demo(tmp_path, 3)
    assert "8 nodes x 8 GPUs, seed 3" in out
    assert "a real Prometheus scrapes it" in out and "15 minutes of backfilled history" in out
    assert re.search(r"\d+ hot, 1 unhealthy", out), "the fleet starts with the problem: hot and unhealthy nodes"
    assert re.search(r"(\d+)/12 admissions were patched", out)
    sent = re.search(r"Pods sent to hot or unhealthy nodes: stock (\d+), with the advice (\d+)", out)
    assert sent and int(sent.group(2)) <= int(sent.group(1))
    assert "DRY RUN" in out and "seeds 3-5" in out
    assert len(after_rows(out)) == 2 and "TTFT p99 ms" in out and "SLO met %" in out
    over_time = out.split("5. Over time")[1]
    assert "TTFT p99 (ms)" in over_time and "SLO attainment (%)" in over_time and "spread" in over_time
    assert re.search(r"gpu-balancer [+±-]\d+\.\d % against stock", over_time), "the verdict is computed in the run"
    assert "p99 latency (ms)" not in out, "one world: the queue-law latency is not shown"
    tables = out.split("4. The fleet")[1].split("report: open")[0]
    assert max(len(line) for line in tables.splitlines()) <= 100, "every row fits 100 columns"
    report = tmp_path / "report-3"
    assert (report / "report.html").exists() and (report / "summary.md").exists()


def test_the_seed_changes_the_demo(tmp_path):
    _require_prometheus()
    assert after_rows(demo(tmp_path, 3)) != after_rows(demo(tmp_path, 4))


def test_the_verdict_says_a_loss_in_the_readmes_words():
    from pathlib import Path

    from gpu_balancer.demo import LOSS_WORDS, verdict

    def summary(**means):
        return {name.replace("_", "-"): {"ttft_p99_ms": {"mean": v}} for name, v in means.items()}

    losing = verdict(summary(stock=100.0, spread=95.0, gpu_balancer=97.0, coolest_node=90.0))
    assert "-3.0 % against stock,\n   +2.1 % against the best peer (spread)" in losing and LOSS_WORDS in losing
    winning = verdict(summary(stock=100.0, spread=105.0, gpu_balancer=97.0))
    assert winning.endswith("-3.0 % against stock.") and LOSS_WORDS not in winning
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "### Where gpu-balancer loses" in readme and LOSS_WORDS in readme
