"""Give a throw-away Prometheus a past: exporter text held constant over a window, written as TSDB
blocks with `promtool tsdb create-blocks-from openmetrics` (file and process I/O)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def openmetrics_history(exposition: str, *, start: float, end: float, step: float = 15.0) -> str:
    """The exposition's samples repeated every `step` seconds from `start` to `end` (Unix time),
    as OpenMetrics text: one family at a time, each series' timestamps in order."""
    times = []
    t = start
    while t <= end:
        times.append(t)
        t += step
    lines = []
    for family in text_string_to_metric_families(exposition):
        kind = family.type if family.type in ("gauge", "counter") else "unknown"
        lines.append(f"# TYPE {family.name} {kind}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            series = f"{sample.name}{{{labels}}}" if labels else sample.name
            lines.extend(f"{series} {sample.value} {at:.3f}" for at in times)
    return "\n".join(lines) + "\n# EOF\n"


def backfilled_tsdb(exposition: str, directory: Path, *, start: float, end: float) -> bool:
    """Write the history into `directory` as TSDB blocks; False when promtool is not installed."""
    return openmetrics_blocks(openmetrics_history(exposition, start=start, end=end), directory)


def openmetrics_blocks(openmetrics: str, directory: Path) -> bool:
    """OpenMetrics text with timestamps into `directory` as TSDB blocks; False without promtool."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return False
    with tempfile.NamedTemporaryFile("w", suffix=".om", delete=False) as source:
        source.write(openmetrics)
    try:
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", source.name, str(directory)],
                       check=True, capture_output=True, timeout=120)
    finally:
        Path(source.name).unlink(missing_ok=True)
    return True
